"""CUDA data-movement, gather and scatter kernels, checked against the CPU backend.

Each program is lowered by jax (and some also compiled by XLA:CPU, whose optimized HLO has
fusions, copies and layout bitcasts), parsed, and run by `run_module` on device="cuda"
(numba's simulator: tests/conftest.py sets NUMBA_ENABLE_CUDASIM=1) and device="cpu" (the
backend verified against XLA).  These kernels do no arithmetic -- the scatter combiners
apart, and those run in the CPU kernel's order -- so results must be bit-identical.
Shapes are tiny: the simulator runs every GPU thread as a Python thread.
"""
from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import numpy as np
import pytest

import jax
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from xlaplug.backends.executor import run_module  # noqa: E402
from xlaplug.hlo.parser import parse_module  # noqa: E402
from oracle import leaves  # noqa: E402

RNG = np.random.default_rng(7)
_ELEMENTWISE = Path(__file__).resolve().parents[1] / "xlaplug/backends/cuda/elementwise.py"


@pytest.fixture(scope="module")
def elementwise():
    """Programs that also need elementwise CUDA kernels (jax's index normalisation, ...)."""
    assert _ELEMENTWISE.exists()


def same(got, want, what=""):
    g, w = leaves(got), leaves(want)
    assert len(g) == len(w), what
    for i, (a, b) in enumerate(zip(g, w)):
        assert a.dtype == b.dtype, f"{what}[{i}]: dtype {a.dtype} != {b.dtype}"
        assert a.shape == b.shape, f"{what}[{i}]: shape {a.shape} != {b.shape}"
        if a.dtype.kind in "fc":  # bitwise, NaN payloads and -0.0 included
            a, b = a.view(f"u{a.dtype.itemsize}"), b.view(f"u{b.dtype.itemsize}")
        np.testing.assert_array_equal(a, b, err_msg=f"{what}[{i}]")


def run_both(text: str, args):
    want = run_module(parse_module(text), list(args), device="cpu")
    got = run_module(parse_module(text), list(args), device="cuda")
    same(got, want, text.splitlines()[0][:60])
    return got


def check(f, *args, x64=False, compiled=False):
    cm = jax.enable_x64(True) if x64 else contextlib.nullcontext()
    with cm:
        lowered = jax.jit(f).lower(*args)
        texts = [lowered.as_text(dialect="hlo")]
        if compiled:
            texts.append(lowered.compile().as_text())
    for text in texts:
        run_both(text, args)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ---- broadcast / reshape / transpose / reverse / slice -----------------------------------

def test_broadcast_reshape_transpose_reverse():
    x = f32(2, 3, 4)
    check(lambda x: (lax.broadcast_in_dim(x[0], (2, 3, 4, 2), (1, 2)),
                     lax.broadcast_in_dim(x[1, 2, 3], (2, 3), ()),
                     lax.broadcast_in_dim(x[:, :1, 0], (2, 5), (0, 1))), x)
    check(lambda x: (x.reshape(4, 6), jnp.transpose(x, (2, 0, 1)), lax.rev(x, (0, 2)),
                     x[::2, 1:, ::-2], lax.slice(x, (0, 1, 0), (2, 3, 4), (1, 1, 3))), x)


@pytest.mark.parametrize("dt", [np.int8, np.uint16, np.int64, np.bool_, np.float16,
                                np.float64, np.complex64])
def test_types(dt):
    x = (RNG.standard_normal((3, 2)) * 50).astype(dt)
    check(lambda x: (lax.broadcast_in_dim(x, (2, 3, 2), (1, 2)), x.T, x[::-1, 1:]), x,
          x64=True)


def test_layout_bitcasts_and_copies():
    # XLA:CPU's optimized HLO: transposes become copies/bitcasts with non-default layouts.
    x = f32(4, 3, 5)
    check(lambda x: (jnp.transpose(x, (1, 0, 2)).reshape(3, 20), x.reshape(12, 5).T), x,
          compiled=True)


# ---- dynamic slices (start indices read on the device, clamped) --------------------------

@pytest.mark.parametrize("starts", [(0, 0), (3, 5), (2 ** 32 - 1, 1)])
def test_dynamic_slice_unsigned(starts):
    x = f32(4, 6)
    i, j = (np.uint32(s) for s in starts)
    check(lambda x, i, j: lax.dynamic_slice(x, (i, j), (2, 3)), x, i, j)
    u = f32(2, 3)
    check(lambda x, u, i, j: lax.dynamic_update_slice(x, u, (i, j)), x, u, i, j)


def test_dynamic_slice_u64_and_vector_form():
    x = np.arange(10, dtype=np.float64)
    check(lambda x, i: (lax.dynamic_slice(x, (i,), (3,)),
                        lax.dynamic_update_slice(x, x[:2], (i,))), x, np.uint64(2 ** 63),
          x64=True)
    # the old form: one rank-1 start-index vector
    text = """HloModule m
ENTRY e {
  x = s32[3,4] parameter(0)
  i = s64[2] parameter(1)
  u = s32[2,2] parameter(2)
  ds = s32[2,2] dynamic-slice(x, i), dynamic_slice_sizes={2,2}
  dus = s32[3,4] dynamic-update-slice(x, u, i)
  ROOT t = (s32[2,2], s32[3,4]) tuple(ds, dus)
}
"""
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    u = -np.ones((2, 2), np.int32)
    for i in ([1, 3], [-4, 1], [7, -2]):
        run_both(text, [x, np.array(i, np.int64), u])


@pytest.mark.parametrize("starts", [(-1, 2), (3, -5), (2, 6)])
def test_dynamic_slice_signed(starts, elementwise):
    x = np.arange(24, dtype=np.int32).reshape(4, 6)
    i, j = (np.int32(s) for s in starts)
    check(lambda x, i, j: lax.dynamic_slice(x, (i, j), (3, 2)), x, i, j)
    u = -np.arange(6, dtype=np.int32).reshape(2, 3)
    check(lambda x, u, i, j: lax.dynamic_update_slice(x, u, (i, j)), x, u, i, j)


# ---- pad / concatenate / iota / misc -----------------------------------------------------

@pytest.mark.parametrize("cfg", [
    [(1, 2, 0), (0, 0, 0)],
    [(-1, 2, 1), (2, -3, 2)],
    [(-4, -3, 1), (0, 0, 3)],
    [(3, -9, 2), (-1, -1, 0)],
])
def test_pad(cfg):
    x = np.arange(1, 16, dtype=np.float32).reshape(5, 3)
    check(lambda x: lax.pad(x, np.float32(-1.5), cfg), x)


def test_pad_ints_concatenate():
    x = np.arange(12, dtype=np.int16).reshape(3, 4)
    check(lambda x: lax.pad(x, np.int16(7), [(1, -1, 1), (-1, 2, 2)]), x)
    a, b, c = f32(2, 3), f32(4, 3), f32(1, 3)
    check(lambda a, b, c: (jnp.concatenate([a, b, c], axis=0),
                           jnp.concatenate([a.T, b.T, a.T], axis=1)), a, b, c)


def test_iota():
    check(lambda: (lax.broadcasted_iota(jnp.int8, (2, 300), 1),
                   lax.broadcasted_iota(jnp.uint8, (2, 260), 1),
                   lax.broadcasted_iota(jnp.float16, (3, 2), 0),
                   lax.broadcasted_iota(jnp.complex64, (2, 3), 1),
                   lax.iota(jnp.int32, 5)))


def test_copy_dimension_size_and_async_copies():
    text = """HloModule m
ENTRY e {
  x = f32[2,3] parameter(0)
  c = f32[2,3] copy(x)
  t = (f32[2,3], f32[2,3]) tuple(x, c)
  tc = (f32[2,3], f32[2,3]) copy(t)
  cs = (f32[2,3], f32[2,3], u32[]) copy-start(x)
  cd = f32[2,3] copy-done(cs)
  g = s32[] get-dimension-size(x), dimensions={1}
  s = f32[2,3] set-dimension-size(x, g), dimensions={1}
  b = s32[6] bitcast(c)
  ROOT r = ((f32[2,3], f32[2,3]), f32[2,3], s32[], f32[2,3], f32[2,3]) tuple(tc, cd, g, s, c)
}
"""
    run_both(text, [f32(2, 3)])
    text = """HloModule m
ENTRY e {
  x = f32[2,3]{0,1} parameter(0)
  ROOT b = s32[3,2]{1,0} bitcast(x)
}
"""
    run_both(text, [f32(2, 3)])


# ---- gather ------------------------------------------------------------------------------

def test_gather():
    x = f32(5, 4)
    idx = np.array([3, 1, 4, 0, 3], np.int32)
    uidx = np.array([3, 1, 70, 0, 2 ** 32 - 1], np.uint32)
    check(lambda x, i: (x[i], jnp.take(x, i, axis=1, mode="clip")), x, idx)
    check(lambda x, i: (jnp.take(x, i, axis=0, mode="clip"), x[i[:2], 1]), x, uidx)
    # windows with clamped starts
    check(lambda x, i: lax.dynamic_slice(x, (i[0], i[2]), (2, 2)), x, uidx)


def test_gather_batching_dims():
    xb = f32(3, 5, 4)
    ib = RNG.integers(0, 5, (3, 2)).astype(np.int32)
    check(lambda x, i: jax.vmap(lambda a, j: a[j])(x, i), xb, ib)
    text = """HloModule m
ENTRY e {
  x = s32[2,4,3] parameter(0)
  i = s64[3,2,1] parameter(1)
  ROOT g = s32[3,2,2] gather(x, i), offset_dims={2}, collapsed_slice_dims={1}, start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={1}, index_vector_dim=2, slice_sizes={1,1,2}
}
"""
    x = np.arange(24, dtype=np.int32).reshape(2, 4, 3)
    i = np.array([[[0], [3]], [[9], [-2]], [[2], [1]]], np.int64)
    run_both(text, [x, i])


def test_gather_fill_mode(elementwise):
    x = f32(5, 4)
    idx = np.array([3, -1, 7, 0], np.int32)
    check(lambda x, i: (x.at[i].get(mode="fill", fill_value=-1), x[i]), x, idx)


# ---- scatter -----------------------------------------------------------------------------

def test_scatter_combiners():
    x = f32(5, 4)
    idx = np.array([3, 1, 4, 0, 3, 3], np.int32)
    upd = f32(6, 4)
    check(lambda x, i, u: (x.at[i].add(u), x.at[i].set(u), x.at[i].mul(u),
                           x.at[i].max(u)), x, idx, upd)
    oob = np.array([3, 1, 70, 0, 3, 2 ** 32 - 1], np.uint32)
    check(lambda x, i, u: (x.at[i].add(u, mode="drop"), x.at[i, 1:3].min(u[:, :2])),
          x, oob, upd)
    # no window dims (a 2-d index per scalar update); no scatter dims (one index vector)
    i2 = np.array([[0, 1], [4, 3], [0, 1], [5, 0]], np.int32)
    check(lambda x, i, u: (x.at[i[:, 0], i[:, 1]].add(u[:4, 0], mode="drop"),
                           x.at[i[1, 0]].mul(u[0]), x.at[3, 1].set(u[0, 0])), x, i2, upd)

    # a window partly out of bounds is skipped whole (row 4 of 5 with 2-row windows)
    dn = lax.ScatterDimensionNumbers(update_window_dims=(1, 2), inserted_window_dims=(),
                                     scatter_dims_to_operand_dims=(0,))
    wi = np.array([[4], [1], [3]], np.int32)
    check(lambda x, i, u: lax.scatter_add(x, i, u.reshape(3, 2, 4), dn, mode="drop"), x, wi, upd)


def test_scatter_batching_dims():
    xb = f32(3, 5, 4)
    ib = RNG.integers(0, 5, (3, 2)).astype(np.int32)
    check(lambda x, i: jax.vmap(lambda a, j: a.at[j].add(1.5))(x, i), xb, ib)


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


def test_scatter_non_commutative_and_variadic_order():
    x = np.arange(10, dtype=np.int32).reshape(5, 2)
    i = np.array([[2], [0], [2], [7]], np.int32)
    u = np.array([[1, 2], [3, 4], [5, 6], [7, 8]], np.int32)
    y, v = f32(5, 2), f32(4, 2)
    got = run_both(_SCATTER_ORDER, [x, i, u, y, v])
    # row 2 gets (x*3 + u0)*3 + u2 -- XLA's update order; row 7 is out of bounds: dropped
    np.testing.assert_array_equal(got[0][2], (x[2] * 3 + u[0]) * 3 + u[2])
