"""gather and scatter kernels, checked against jax (the oracle).

Programs are lowered with jax (lowered HLO and XLA:CPU's optimized HLO), parsed, run by
`run_module` and compared with jax's result: integers exactly, floats bit-exactly where
the kernel does no arithmetic and to a tight tolerance where updates are combined.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from oracle import assert_leaves_close, check_against_jax  # noqa: E402
from xlaplug.backends.executor import run_module  # noqa: E402
from xlaplug.hlo.parser import parse_module  # noqa: E402

RNG = np.random.default_rng(777)


def _assert_close(got, want, what, rtol):
    """Floats bit-exactly when rtol is 0, else to rtol = atol = `rtol`; integers exactly."""
    assert_leaves_close(got, want, what, rtol, exact=rtol == 0)


def check(f, *args, x64=False, modes=("lowered", "compiled"), rtol=0.0, expect_op=None):
    check_against_jax(f, args, lambda got, want, mode: _assert_close(got, want, mode, rtol),
                      x64=x64, modes=modes, keep_unused=True, strip_tables=True,
                      expect_op=expect_op)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ---- gather ------------------------------------------------------------------------------

@pytest.mark.parametrize("dt", [np.int32, np.int8, np.uint8, np.int64])
def test_take_clamps_out_of_bounds(dt):
    x = f32(7, 5)
    idx = np.array([0, 6, 9, 3, 200 if dt != np.int8 else 100], dtype=dt)
    if np.dtype(dt).kind == "i":
        idx[2] = -4
    # mode="clip" clamps in jax; XLA's gather clamps the start index the same way.
    check(lambda x, i: jnp.take(x, i, axis=0, mode="clip"), x, idx, x64=(dt == np.int64),
          expect_op="gather")
    check(lambda x, i: x[:, jnp.clip(i, 0, 4)], x, idx, x64=(dt == np.int64))


def test_raw_gather_clamps_whole_slice():
    # Out-of-bounds start indices clamp so that the whole slice fits (XLA semantics).
    x = f32(6, 8)
    idx = np.array([[0, 0], [5, 7], [-3, 2], [4, 6], [2, -9]], np.int32)
    dn = lax.GatherDimensionNumbers(offset_dims=(1, 2), collapsed_slice_dims=(),
                                    start_index_map=(0, 1))
    check(lambda x, i: lax.gather(x, i, dn, (3, 4), mode="clip"), x, idx)
    dn2 = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,),
                                     start_index_map=(0, 1))
    check(lambda x, i: lax.gather(x, i, dn2, (1, 3), mode="clip"), x, idx)


def test_fancy_indexing():
    x = f32(4, 5, 6)
    i = np.array([[0, 3], [2, 1]], np.int32)
    j = np.array([4, 0], np.int32)
    check(lambda x, i, j: (x[i, :, j], x[:, j], x[1:3, i], x[..., 2], x[i]), x, i, j)


def test_gather_index_vector_dim_not_last():
    x = f32(5, 6, 3)
    idx = np.array([[1, 4, 0], [2, 5, 3]], np.int32)  # index vector along dim 0
    dn = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0, 1),
                                    start_index_map=(0, 1))

    def f(x, i):
        return lax.gather(x, jnp.transpose(i), dn, (1, 1, 2), mode="clip")
    check(f, x, idx)


def test_gather_operand_batching_dims():
    x = f32(3, 7, 4)
    idx = RNG.integers(-2, 9, (3, 5, 1)).astype(np.int32)
    dn = lax.GatherDimensionNumbers(offset_dims=(2,), collapsed_slice_dims=(1,),
                                    start_index_map=(1,), operand_batching_dims=(0,),
                                    start_indices_batching_dims=(0,))
    check(lambda x, i: lax.gather(x, i, dn, (1, 1, 4), mode="clip"), x, idx,
          modes=("lowered",))
    # Batching dims not leading on either side.
    x2 = f32(7, 4, 3)
    idx2 = RNG.integers(0, 7, (5, 3, 1)).astype(np.int32)
    dn2 = lax.GatherDimensionNumbers(offset_dims=(2,), collapsed_slice_dims=(0,),
                                     start_index_map=(0,), operand_batching_dims=(2,),
                                     start_indices_batching_dims=(1,))
    check(lambda x, i: lax.gather(x, i, dn2, (1, 4, 1), mode="clip"), x2, idx2,
          modes=("lowered",))


def test_vmapped_gather():
    x = f32(4, 9, 3)
    idx = RNG.integers(0, 9, (4, 6)).astype(np.int32)
    f = jax.vmap(lambda row, i: row[i])
    check(f, x, idx, expect_op="gather")
    g = jax.vmap(lambda row, i: jnp.take_along_axis(row, i[:, None], axis=0))
    check(g, x, idx)


def test_gather_bool_and_bf16():
    xb = RNG.random((6, 4)) < 0.5
    xh = f32(6, 4).astype(ml_dtypes.bfloat16)
    idx = np.array([5, 0, 2, 2], np.int32)
    check(lambda a, b, i: (a[i], b[i, 1:3]), xb, xh, idx)


def test_gather_empty_indices():
    x = f32(4, 3)
    idx = np.zeros((0,), np.int32)
    check(lambda x, i: x[i], x, idx)


# ---- scatter -----------------------------------------------------------------------------

@pytest.mark.parametrize("mode", [None, "drop"])
@pytest.mark.parametrize("op", ["set", "add", "mul", "min", "max"])
def test_at_update(op, mode):
    x = f32(6, 4)
    idx = np.array([1, 5, 1, 9, -1, 3, -8], np.int32)  # repeats, negatives, out of bounds
    u = f32(7, 4)
    if op == "set":
        idx = np.array([1, 5, 9, -1, 3, -8], np.int32)   # no repeats: unordered in XLA
        u = u[:6]

    def f(x, i, u):
        return getattr(x.at[i], op)(u, mode=mode)
    check(f, x, idx, u, rtol=1e-6, expect_op="scatter")


def test_scatter_add_repeated_int_and_bool():
    x = np.zeros((5, 3), np.int32)
    idx = RNG.integers(0, 5, (20,)).astype(np.int32)
    u = RNG.integers(-9, 9, (20, 3)).astype(np.int32)
    check(lambda x, i, u: x.at[i].add(u), x, idx, u)
    b = np.zeros(8, bool)
    check(lambda b, i: b.at[i].set(True), b, idx)
    check(lambda b, i: b.at[i].max(True), b, idx)


def test_scatter_window_out_of_bounds_skipped():
    # A window that would stick out of the operand is dropped whole.
    x = f32(6, 7)
    idx = np.array([[0, 0], [4, 5], [5, 1], [-1, 2], [3, 4]], np.int32)
    u = f32(5, 2, 3)
    dn = lax.ScatterDimensionNumbers(update_window_dims=(1, 2), inserted_window_dims=(),
                                     scatter_dims_to_operand_dims=(0, 1))
    check(lambda x, i, u: lax.scatter_add(x, i, u, dn, mode="drop"), x, idx, u, rtol=1e-6)
    check(lambda x, i, u: lax.scatter(x, i, u, dn, mode="drop", unique_indices=True),
          x, idx[[0, 2, 3]], u[[0, 2, 3]])


def test_scatter_general_combiner():
    x = f32(5, 3)
    idx = np.array([[4], [0], [4], [2]], np.int32)
    u = f32(4, 3)
    dn = lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                     scatter_dims_to_operand_dims=(0,))
    # A combiner that is not a plain ufunc runs in the numba loop.
    check(lambda x, i: lax.scatter_apply(x, i, jnp.sin, dn, update_shape=(4, 3)),
          x, idx, rtol=1e-6)

    def f(x, i, u):
        return lax.scatter_add(x * 2.0, i, jnp.abs(u), dn)
    check(f, x, idx, u, rtol=1e-6)


def test_scatter_index_types_x64():
    x = np.arange(12, dtype=np.float64).reshape(4, 3)
    for dt in (np.int64, np.uint32, np.int16):
        idx = np.array([3, 0, 2, 3], dt)
        u = RNG.standard_normal((4, 3))
        check(lambda x, i, u: x.at[i].add(u), x, idx, u, x64=True, rtol=1e-12)


def test_vmapped_scatter_batching_dims():
    x = f32(3, 8)
    idx = RNG.integers(-3, 11, (3, 5)).astype(np.int32)
    u = f32(3, 5)
    f = jax.vmap(lambda row, i, v: row.at[i].add(v, mode="drop"))
    check(f, x, idx, u, rtol=1e-6, expect_op="scatter")
    g = jax.vmap(lambda row, i, v: row.at[i].set(v, mode="drop", unique_indices=True))
    check(g, x, np.tile(np.array([7, 2, 0, 5, 9], np.int32), (3, 1)), u)


def test_raw_scatter_batching_dims():
    x = f32(4, 3, 6)
    idx = RNG.integers(0, 5, (3, 2, 4, 1)).astype(np.int32)   # batch dims 2 (-> operand 0)
    u = f32(3, 2, 4, 2)
    dn = lax.ScatterDimensionNumbers(update_window_dims=(3,), inserted_window_dims=(),
                                     scatter_dims_to_operand_dims=(2,),
                                     operand_batching_dims=(0, 1),
                                     scatter_indices_batching_dims=(2, 0))
    check(lambda x, i, u: lax.scatter_add(x, i, u, dn, mode="drop"), x, idx, u, rtol=1e-6,
          modes=("lowered",))


def test_variadic_scatter():
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
    want = jax.jit(oracle)(x, y, idx, u, w)
    got = run_module(parse_module(hlo), [x, y, idx, u, w])
    _assert_close(got, want, "variadic", 0.0)
