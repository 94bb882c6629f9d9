"""gather and scatter kernels on every device (tests/devices.py), one case table.

Programs are lowered with jax (lowered HLO and XLA:CPU's optimized HLO), parsed and run by
`run_module`.  On cpu the result is compared with jax's: integers exactly, floats
bit-exactly where the kernel does no arithmetic and to a tight tolerance where updates are
combined.  On cuda it is compared with the cpu's, bit for bit: the combiners run in the cpu
kernel's (XLA's) update order.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from devices import check_on, cuda_against_cpu, on_each_device  # noqa: E402
from oracle import assert_leaves_close  # noqa: E402
from xlaplug.runtime.executor import run_module# noqa: E402
from xlaplug.hlo.text.parser import parse_module  # noqa: E402

pytestmark = pytest.mark.jax
RNG = np.random.default_rng(777)


def _assert_close(got, want, what, rtol):
    """Floats bit-exactly when rtol is 0, else to rtol = atol = `rtol`; integers exactly."""
    assert_leaves_close(got, want, what, rtol, exact=rtol == 0)


def check(device, f, *args, x64=False, modes=("lowered", "compiled"), rtol=0.0,
          expect_op=None):
    check_on(device, f, args, lambda got, want, mode: _assert_close(got, want, mode, rtol),
             x64=x64, modes=modes, keep_unused=True, strip_tables=True, expect_op=expect_op)


def run_on(device, text, args, oracle):
    """HLO text the lowering never emits: on cpu against `oracle()` (jax), on cuda against
    the cpu.  Returns the device's result."""
    if device == "cuda":
        return cuda_against_cpu(text, args)
    got = run_module(parse_module(text), list(args))
    _assert_close(got, oracle(), "hlo", 0.0)
    return got


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ---- gather ------------------------------------------------------------------------------

@pytest.mark.parametrize("dt", [np.int32, np.int8, np.uint8, np.int64])
@on_each_device
def test_take_clamps_out_of_bounds(device, dt):
    x = f32(7, 5)
    idx = np.array([0, 6, 9, 3, 200 if dt != np.int8 else 100], dtype=dt)
    if np.dtype(dt).kind == "i":
        idx[2] = -4
    # mode="clip" clamps in jax; XLA's gather clamps the start index the same way.
    check(device, lambda x, i: jnp.take(x, i, axis=0, mode="clip"), x, idx,
          x64=(dt == np.int64), expect_op="gather")
    check(device, lambda x, i: x[:, jnp.clip(i, 0, 4)], x, idx, x64=(dt == np.int64))


@on_each_device
def test_raw_gather_clamps_whole_slice(device):
    # Out-of-bounds start indices clamp so that the whole slice fits (XLA semantics).
    x = f32(6, 8)
    idx = np.array([[0, 0], [5, 7], [-3, 2], [4, 6], [2, -9]], np.int32)
    dn = lax.GatherDimensionNumbers(offset_dims=(1, 2), collapsed_slice_dims=(),
                                    start_index_map=(0, 1))
    check(device, lambda x, i: lax.gather(x, i, dn, (3, 4), mode="clip"), x, idx)
    dn2 = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,),
                                     start_index_map=(0, 1))
    check(device, lambda x, i: lax.gather(x, i, dn2, (1, 3), mode="clip"), x, idx)


@on_each_device
def test_fancy_indexing(device):
    x = f32(4, 5, 6)
    i = np.array([[0, 3], [2, 1]], np.int32)
    j = np.array([4, 0], np.int32)
    check(device, lambda x, i, j: (x[i, :, j], x[:, j], x[1:3, i], x[..., 2], x[i]), x, i, j)


@on_each_device
def test_gather_index_vector_dim_not_last(device):
    x = f32(5, 6, 3)
    idx = np.array([[1, 4, 0], [2, 5, 3]], np.int32)  # index vector along dim 0
    dn = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0, 1),
                                    start_index_map=(0, 1))

    def f(x, i):
        return lax.gather(x, jnp.transpose(i), dn, (1, 1, 2), mode="clip")
    check(device, f, x, idx)


@on_each_device
def test_gather_operand_batching_dims(device):
    x = f32(3, 7, 4)
    idx = RNG.integers(-2, 9, (3, 5, 1)).astype(np.int32)
    dn = lax.GatherDimensionNumbers(offset_dims=(2,), collapsed_slice_dims=(1,),
                                    start_index_map=(1,), operand_batching_dims=(0,),
                                    start_indices_batching_dims=(0,))
    check(device, lambda x, i: lax.gather(x, i, dn, (1, 1, 4), mode="clip"), x, idx,
          modes=("lowered",))
    # Batching dims not leading on either side.
    x2 = f32(7, 4, 3)
    idx2 = RNG.integers(0, 7, (5, 3, 1)).astype(np.int32)
    dn2 = lax.GatherDimensionNumbers(offset_dims=(2,), collapsed_slice_dims=(0,),
                                     start_index_map=(0,), operand_batching_dims=(2,),
                                     start_indices_batching_dims=(1,))
    check(device, lambda x, i: lax.gather(x, i, dn2, (1, 4, 1), mode="clip"), x2, idx2,
          modes=("lowered",))


@on_each_device
def test_vmapped_gather(device):
    x = f32(4, 9, 3)
    idx = RNG.integers(0, 9, (4, 6)).astype(np.int32)
    f = jax.vmap(lambda row, i: row[i])
    check(device, f, x, idx, expect_op="gather")
    g = jax.vmap(lambda row, i: jnp.take_along_axis(row, i[:, None], axis=0))
    check(device, g, x, idx)


@on_each_device
def test_gather_bool_and_bf16(device):
    xb = RNG.random((6, 4)) < 0.5
    xh = f32(6, 4).astype(ml_dtypes.bfloat16)
    idx = np.array([5, 0, 2, 2], np.int32)
    check(device, lambda a, b, i: (a[i], b[i, 1:3]), xb, xh, idx)


@on_each_device
def test_gather_empty_indices(device):
    x = f32(4, 3)
    idx = np.zeros((0,), np.int32)
    check(device, lambda x, i: x[i], x, idx)


@on_each_device
def test_gather_clamped_and_unsigned_indices(device):
    x = f32(5, 4)
    idx = np.array([3, 1, 4, 0, 3], np.int32)
    uidx = np.array([3, 1, 70, 0, 2 ** 32 - 1], np.uint32)
    check(device, lambda x, i: (x[i], jnp.take(x, i, axis=1, mode="clip")), x, idx)
    check(device, lambda x, i: (jnp.take(x, i, axis=0, mode="clip"), x[i[:2], 1]), x, uidx)
    # windows with clamped starts
    check(device, lambda x, i: lax.dynamic_slice(x, (i[0], i[2]), (2, 2)), x, uidx)


@on_each_device
def test_gather_batching_dims_hlo(device):
    xb = f32(3, 5, 4)
    ib = RNG.integers(0, 5, (3, 2)).astype(np.int32)
    check(device, lambda x, i: jax.vmap(lambda a, j: a[j])(x, i), xb, ib)
    text = """HloModule m
ENTRY e {
  x = s32[2,4,3] parameter(0)
  i = s64[3,2,1] parameter(1)
  ROOT g = s32[3,2,2] gather(x, i), offset_dims={2}, collapsed_slice_dims={1}, start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={1}, index_vector_dim=2, slice_sizes={1,1,2}
}
"""
    x = np.arange(24, dtype=np.int32).reshape(2, 4, 3)
    i = np.array([[[0], [3]], [[9], [-2]], [[2], [1]]], np.int64)
    dn = lax.GatherDimensionNumbers(offset_dims=(2,), collapsed_slice_dims=(1,),
                                    start_index_map=(1,), operand_batching_dims=(0,),
                                    start_indices_batching_dims=(1,))
    with jax.enable_x64(True):
        run_on(device, text, [x, i],
               lambda: jax.jit(lambda x, i: lax.gather(x, i, dn, (1, 1, 2), mode="clip"))(x, i))


@on_each_device
def test_gather_fill_mode(device):
    x = f32(5, 4)
    idx = np.array([3, -1, 7, 0], np.int32)
    check(device, lambda x, i: (x.at[i].get(mode="fill", fill_value=-1), x[i]), x, idx)


# ---- scatter -----------------------------------------------------------------------------

@pytest.mark.parametrize("mode", [None, "drop"])
@pytest.mark.parametrize("op", ["set", "add", "mul", "min", "max"])
@on_each_device
def test_at_update(device, op, mode):
    x = f32(6, 4)
    idx = np.array([1, 5, 1, 9, -1, 3, -8], np.int32)  # repeats, negatives, out of bounds
    u = f32(7, 4)
    if op == "set":
        idx = np.array([1, 5, 9, -1, 3, -8], np.int32)   # no repeats: unordered in XLA
        u = u[:6]

    def f(x, i, u):
        return getattr(x.at[i], op)(u, mode=mode)
    check(device, f, x, idx, u, rtol=1e-6, expect_op="scatter")


@on_each_device
def test_scatter_add_repeated_int_and_bool(device):
    x = np.zeros((5, 3), np.int32)
    idx = RNG.integers(0, 5, (20,)).astype(np.int32)
    u = RNG.integers(-9, 9, (20, 3)).astype(np.int32)
    check(device, lambda x, i, u: x.at[i].add(u), x, idx, u)
    b = np.zeros(8, bool)
    check(device, lambda b, i: b.at[i].set(True), b, idx)
    check(device, lambda b, i: b.at[i].max(True), b, idx)


@on_each_device
def test_scatter_window_out_of_bounds_skipped(device):
    # A window that would stick out of the operand is dropped whole.
    x = f32(6, 7)
    idx = np.array([[0, 0], [4, 5], [5, 1], [-1, 2], [3, 4]], np.int32)
    u = f32(5, 2, 3)
    dn = lax.ScatterDimensionNumbers(update_window_dims=(1, 2), inserted_window_dims=(),
                                     scatter_dims_to_operand_dims=(0, 1))
    check(device, lambda x, i, u: lax.scatter_add(x, i, u, dn, mode="drop"), x, idx, u,
          rtol=1e-6)
    check(device, lambda x, i, u: lax.scatter(x, i, u, dn, mode="drop", unique_indices=True),
          x, idx[[0, 2, 3]], u[[0, 2, 3]])


@on_each_device
def test_scatter_general_combiner(device):
    x = f32(5, 3)
    idx = np.array([[4], [0], [4], [2]], np.int32)
    u = f32(4, 3)
    dn = lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                     scatter_dims_to_operand_dims=(0,))
    # A combiner that is not a plain ufunc runs in the numba loop.
    check(device, lambda x, i: lax.scatter_apply(x, i, jnp.sin, dn, update_shape=(4, 3)),
          x, idx, rtol=1e-6)

    def f(x, i, u):
        return lax.scatter_add(x * 2.0, i, jnp.abs(u), dn)
    check(device, f, x, idx, u, rtol=1e-6)


@on_each_device
def test_scatter_index_types_x64(device):
    x = np.arange(12, dtype=np.float64).reshape(4, 3)
    for dt in (np.int64, np.uint32, np.int16):
        idx = np.array([3, 0, 2, 3], dt)
        u = RNG.standard_normal((4, 3))
        check(device, lambda x, i, u: x.at[i].add(u), x, idx, u, x64=True, rtol=1e-12)


@on_each_device
def test_vmapped_scatter_batching_dims(device):
    x = f32(3, 8)
    idx = RNG.integers(-3, 11, (3, 5)).astype(np.int32)
    u = f32(3, 5)
    f = jax.vmap(lambda row, i, v: row.at[i].add(v, mode="drop"))
    check(device, f, x, idx, u, rtol=1e-6, expect_op="scatter")
    g = jax.vmap(lambda row, i, v: row.at[i].set(v, mode="drop", unique_indices=True))
    check(device, g, x, np.tile(np.array([7, 2, 0, 5, 9], np.int32), (3, 1)), u)


@on_each_device
def test_raw_scatter_batching_dims(device):
    x = f32(4, 3, 6)
    idx = RNG.integers(0, 5, (3, 2, 4, 1)).astype(np.int32)   # batch dims 2 (-> operand 0)
    u = f32(3, 2, 4, 2)
    dn = lax.ScatterDimensionNumbers(update_window_dims=(3,), inserted_window_dims=(),
                                     scatter_dims_to_operand_dims=(2,),
                                     operand_batching_dims=(0, 1),
                                     scatter_indices_batching_dims=(2, 0))
    check(device, lambda x, i, u: lax.scatter_add(x, i, u, dn, mode="drop"), x, idx, u,
          rtol=1e-6, modes=("lowered",))


@on_each_device
def test_variadic_scatter(device):
    hlo = """
HloModule variadic_scatter

comb {
  a = f32[] parameter(0)
  b = s32[] parameter(1)
  c = f32[] parameter(2)
  d = s32[] parameter(3)
  gt = pred[] compare(c, a), direction=GT
  v = f32[] select(gt, c, a)
  i = s32[] select(gt, d, b)
  ROOT t = (f32[], s32[]) tuple(v, i)
}

ENTRY main {
  x = f32[6]{0} parameter(0)
  y = s32[6]{0} parameter(1)
  idx = s32[5,1]{1,0} parameter(2)
  u = f32[5]{0} parameter(3)
  w = s32[5]{0} parameter(4)
  ROOT s = (f32[6]{0}, s32[6]{0}) scatter(x, y, idx, u, w), update_window_dims={},
    inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1,
    to_apply=comb
}
"""
    x = f32(6)
    y = np.arange(6, dtype=np.int32)
    idx = np.array([[2], [5], [2], [7], [0]], np.int32)
    u = f32(5)
    w = np.arange(10, 15, dtype=np.int32)

    # jax oracle: the same running arg-max, one update at a time in order.
    def oracle(x, y, idx, u, w):
        for t in range(idx.shape[0]):
            j = idx[t, 0]
            ok = (j >= 0) & (j < x.shape[0])
            jj = jnp.clip(j, 0, x.shape[0] - 1)
            gt = ok & (u[t] > x[jj])
            x = x.at[jj].set(jnp.where(gt, u[t], x[jj]))
            y = y.at[jj].set(jnp.where(gt, w[t], y[jj]))
        return x, y
    run_on(device, hlo, [x, y, idx, u, w], lambda: jax.jit(oracle)(x, y, idx, u, w))


@on_each_device
def test_scatter_combiners(device):
    x = f32(5, 4)
    idx = np.array([3, 1, 4, 0, 3, 3], np.int32)
    upd = f32(6, 4)
    check(device, lambda x, i, u: (x.at[i].add(u), x.at[i].set(u), x.at[i].mul(u),
                                   x.at[i].max(u)), x, idx, upd, rtol=1e-6)
    oob = np.array([3, 1, 70, 0, 3, 2 ** 32 - 1], np.uint32)
    check(device, lambda x, i, u: (x.at[i].add(u, mode="drop"), x.at[i, 1:3].min(u[:, :2])),
          x, oob, upd, rtol=1e-6)
    # no window dims (a 2-d index per scalar update); no scatter dims (one index vector)
    i2 = np.array([[0, 1], [4, 3], [0, 1], [5, 0]], np.int32)
    check(device, lambda x, i, u: (x.at[i[:, 0], i[:, 1]].add(u[:4, 0], mode="drop"),
                                   x.at[i[1, 0]].mul(u[0]), x.at[3, 1].set(u[0, 0])),
          x, i2, upd, rtol=1e-6)
    # a window partly out of bounds is skipped whole (row 4 of 5 with 2-row windows)
    dn = lax.ScatterDimensionNumbers(update_window_dims=(1, 2), inserted_window_dims=(),
                                     scatter_dims_to_operand_dims=(0,))
    wi = np.array([[4], [1], [3]], np.int32)
    check(device, lambda x, i, u: lax.scatter_add(x, i, u.reshape(3, 2, 4), dn, mode="drop"),
          x, wi, upd, rtol=1e-6)


@on_each_device
def test_scatter_batching_dims(device):
    xb = f32(3, 5, 4)
    ib = RNG.integers(0, 5, (3, 2)).astype(np.int32)
    check(device, lambda x, i: jax.vmap(lambda a, j: a.at[j].add(1.5))(x, i), xb, ib,
          rtol=1e-6)


_SCATTER_ORDER = """HloModule m
comb {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  two = s32[] constant(3)
  m = s32[] multiply(a, two)
  ROOT r = s32[] add(m, b)
}
comb2 {
  a = s32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = f32[] parameter(3)
  s = s32[] subtract(a, c)
  t = f32[] multiply(b, d)
  ROOT r = (s32[], f32[]) tuple(s, t)
}
ENTRY e {
  x = s32[5,2] parameter(0)
  i = s32[4,1] parameter(1)
  u = s32[4,2] parameter(2)
  y = f32[5,2] parameter(3)
  v = f32[4,2] parameter(4)
  s1 = s32[5,2] scatter(x, i, u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=comb
  s2 = (s32[5,2], f32[5,2]) scatter(x, y, i, u, v), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=comb2
  ROOT t = (s32[5,2], (s32[5,2], f32[5,2])) tuple(s1, s2)
}
"""


@on_each_device
def test_scatter_non_commutative_and_variadic_order(device):
    x = np.arange(10, dtype=np.int32).reshape(5, 2)
    i = np.array([[2], [0], [2], [7]], np.int32)
    u = np.array([[1, 2], [3, 4], [5, 6], [7, 8]], np.int32)
    y, v = f32(5, 2), f32(4, 2)

    # jax oracle: XLA applies the updates one at a time, in order; out of bounds is dropped
    def oracle(x, i, u, y, v):
        s1, s2x, s2y = x, x, y
        for t in range(i.shape[0]):
            j = int(i[t, 0])
            if 0 <= j < x.shape[0]:
                s1 = s1.at[j].set(s1[j] * 3 + u[t])
                s2x = s2x.at[j].set(s2x[j] - u[t])
                s2y = s2y.at[j].set(s2y[j] * v[t])
        return s1, (s2x, s2y)
    got = run_on(device, _SCATTER_ORDER, [x, i, u, y, v],
                 lambda: oracle(jnp.asarray(x), i, jnp.asarray(u), jnp.asarray(y),
                                jnp.asarray(v)))
    # row 2 gets (x*3 + u0)*3 + u2 -- XLA's update order; row 7 is out of bounds: dropped
    np.testing.assert_array_equal(got[0][2], (x[2] * 3 + u[0]) * 3 + u[2])
