"""CUDA reduce, reduce-window, select-and-scatter, map, sort and topk, checked against the
CPU backend.

Programs are lowered by jax (or written as HLO text for what jax does not emit: map,
custom comparators and reducers), parsed, and run by `run_module` on device="cuda" (numba's
simulator, set by tests/conftest.py) and device="cpu" (verified against XLA).  Integers,
booleans, sorts and max/min are compared exactly.  Float sums and products may differ in
the last bits: the CUDA reduce folds serially in XLA's (HloEvaluator's) order or, for long
reductions, by a chunked tree, while the CPU kernel's fast path adds in numpy's pairwise
order -- they are compared to a tight tolerance.  Shapes are tiny (simulator).
"""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

import jax
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from xlaplug.backends.cuda import reductions as cuda_reductions  # noqa: E402
from xlaplug.backends.executor import run_module  # noqa: E402
from xlaplug.hlo.parser import parse_module  # noqa: E402
from oracle import leaves  # noqa: E402

RNG = np.random.default_rng(11)


def close(got, want, rtol=None, what=""):
    g, w = leaves(got), leaves(want)
    assert len(g) == len(w), what
    for i, (a, b) in enumerate(zip(g, w)):
        assert a.dtype == b.dtype, f"{what}[{i}]: dtype {a.dtype} != {b.dtype}"
        assert a.shape == b.shape, f"{what}[{i}]: shape {a.shape} != {b.shape}"
        if rtol is not None and a.dtype.kind in "fc":
            np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol, err_msg=f"{what}[{i}]")
        else:
            np.testing.assert_array_equal(a, b, err_msg=f"{what}[{i}]")


def run_both(text, args, rtol=None):
    want = run_module(parse_module(text), list(args), device="cpu")
    got = run_module(parse_module(text), list(args), device="cuda")
    close(got, want, rtol, text.splitlines()[0][:60])
    return got


def check(f, *args, rtol=None, x64=False, expect_op=None):
    cm = jax.enable_x64(True) if x64 else contextlib.nullcontext()
    with cm:
        text = jax.jit(f).lower(*args).as_text(dialect="hlo")
    if expect_op is not None:
        assert f" {expect_op}(" in text, f"no {expect_op} in the lowered HLO"
    return run_both(text, args, rtol)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def ints(*shape, dt=np.int32, lo=-50, hi=50):
    return RNG.integers(lo, hi, shape).astype(dt)


# ---- reduce ------------------------------------------------------------------------------

def test_reduce_float():
    x = f32(3, 4, 5)
    check(lambda x: (jnp.sum(x, axis=(0, 2)), jnp.max(x, axis=1), jnp.min(x),
                     jnp.prod(x, axis=0), jnp.sum(x, axis=())), x, rtol=1e-5,
          expect_op="reduce")


def test_reduce_ints_bools_wrap():
    x = ints(4, 6, dt=np.int8, lo=0, hi=100)
    check(lambda x: (jnp.sum(x, axis=1, dtype=jnp.int8), jnp.prod(x, axis=0, dtype=jnp.int8),
                     jnp.max(x, axis=1)), x)
    b = RNG.random((5, 7)) < 0.3
    check(lambda b: (jnp.any(b, axis=0), jnp.all(b, axis=1)), b)


def test_reduce_variadic_argmax_and_types():
    x = f32(3, 6)
    x[1, 2] = x[1, 4] = 9.0  # ties pick the first index
    check(lambda x: (jnp.argmax(x, axis=1), jnp.argmin(x, axis=0)), x)
    y = RNG.standard_normal((4, 3)) + 1j * RNG.standard_normal((4, 3))
    check(lambda y: (jnp.sum(y, axis=0), jnp.max(y.real, axis=1)), y, rtol=1e-12, x64=True)
    h = f32(4, 5).astype(np.float16)
    check(lambda h: (jnp.sum(h, axis=1), jnp.max(h, axis=0)), h, rtol=1e-3)


_SERIAL_REDUCER = """HloModule m
r {
  a = s32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = f32[] parameter(3)
  three = s32[] constant(3)
  m = s32[] multiply(a, three)
  s = s32[] add(m, c)
  t = f32[] subtract(b, d)
  ROOT out = (s32[], f32[]) tuple(s, t)
}
ENTRY e {
  x = s32[3,4] parameter(0)
  y = f32[3,4] parameter(1)
  i = s32[] constant(1)
  j = f32[] constant(0.5)
  ROOT red = (s32[4], f32[4]) reduce(x, y, i, j), dimensions={0}, to_apply=r
}
"""


def test_reduce_non_associative_reducer_keeps_xla_order():
    x, y = ints(3, 4, lo=-5, hi=5), f32(3, 4)
    got = run_both(_SERIAL_REDUCER, [x, y])
    np.testing.assert_array_equal(got[0], ((1 * 3 + x[0]) * 3 + x[1]) * 3 + x[2])


def test_reduce_tree_path(monkeypatch):
    monkeypatch.setattr(cuda_reductions, "TREE_MIN_K", 8)
    x = f32(2, 20, 3)
    xi = ints(2, 20, 3)
    check(lambda x: (jnp.sum(x, axis=(1, 2)), jnp.argmax(x.reshape(2, 60), axis=1)), x,
          rtol=1e-5)
    check(lambda x: (jnp.sum(x, axis=(0, 1)), jnp.min(x, axis=1)), xi)


# ---- reduce-window / select-and-scatter --------------------------------------------------

def test_reduce_window():
    x = f32(3, 4, 5)
    check(lambda x: lax.reduce_window(x, np.float32(-np.inf), lax.max, (2, 2, 2), (1, 2, 1),
                                      [(0, 1), (1, 0), (1, 1)]), x, expect_op="reduce-window")
    check(lambda x: lax.reduce_window(x, np.float32(0), lax.add, (2, 2, 1), (1, 1, 1), "SAME",
                                      base_dilation=(2, 1, 1), window_dilation=(1, 2, 1)),
          x, rtol=1e-6)
    xi = ints(4, 5)
    check(lambda x: lax.reduce_window(x, xi.dtype.type(1), lax.mul, (2, 3), (2, 1), [(1, -1), (0, 2)]), xi)


def test_reduce_window_variadic():
    x, i = f32(4, 5), ints(4, 5)

    def argmax_pool(x, i):
        def red(a, b):
            take = (a[0] > b[0]) | ((a[0] == b[0]) & (a[1] < b[1]))
            return (jnp.where(take, a[0], b[0]), jnp.where(take, a[1], b[1]))
        # Typed inits: another test module may have turned jax's x64 mode on.
        return lax.reduce_window((x, i), (np.float32(-np.inf), i.dtype.type(0)), red, (2, 2),
                                 (1, 1), "SAME")
    check(argmax_pool, x, i)


def test_select_and_scatter():
    x = f32(2, 4, 6)
    check(lambda x: jax.grad(lambda x: lax.reduce_window(
        x, -jnp.inf, lax.max, (1, 2, 2), (1, 2, 2), "VALID").sum())(x), x,
        expect_op="select-and-scatter")
    # overlapping windows and padding: several sources add into one element, in order
    check(lambda x: jax.grad(lambda x: (lax.reduce_window(
        x, -jnp.inf, lax.max, (2, 3, 3), (1, 1, 2), [(0, 0), (1, 1), (1, 1)]) ** 2).sum())(x),
        x, rtol=1e-6)


# ---- map ---------------------------------------------------------------------------------

_MAP = """HloModule m
f {
  a = f32[] parameter(0)
  b = s32[] parameter(1)
  c = f32[] convert(b)
  m = f32[] multiply(a, c)
  ROOT r = f32[] add(m, a)
}
ENTRY e {
  x = f32[2,3] parameter(0)
  y = s32[2,3] parameter(1)
  ROOT r = f32[2,3] map(x, y), dimensions={0,1}, to_apply=f
}
"""


def test_map():
    run_both(_MAP, [f32(2, 3), ints(2, 3)])


# ---- sort / topk -------------------------------------------------------------------------

def test_sort():
    x = f32(3, 7)
    x[0, 1], x[1, 2], x[1, 3], x[2, :3] = np.nan, -0.0, 0.0, 1.0
    check(lambda x: (jnp.sort(x, axis=1), jnp.sort(x, axis=0), jnp.argsort(x, axis=1)), x,
          expect_op="sort")
    xi = ints(4, 9, lo=-3, hi=3)
    check(lambda x: (jnp.argsort(x, axis=0, stable=True), jnp.argsort(-x, axis=1)), xi)
    check(lambda x: lax.sort((x, -x, jnp.arange(x.size).reshape(x.shape)), dimension=1,
                             num_keys=2), xi)


_SORT_CUSTOM = """HloModule m
cmp {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  c = f32[] parameter(2)
  d = f32[] parameter(3)
  three = s32[] constant(3)
  ma = s32[] remainder(a, three)
  mb = s32[] remainder(b, three)
  ROOT lt = pred[] compare(ma, mb), direction=GT
}
ENTRY e {
  x = s32[2,11] parameter(0)
  y = f32[2,11] parameter(1)
  ROOT s = (s32[2,11], f32[2,11]) sort(x, y), dimensions={1}, is_stable=true, to_apply=cmp
}
"""


def test_sort_custom_comparator_is_stable():
    x = np.arange(22, dtype=np.int32).reshape(2, 11)
    got = run_both(_SORT_CUSTOM, [x, f32(2, 11)])
    assert list(got[0][0]) == [2, 5, 8, 1, 4, 7, 10, 0, 3, 6, 9]


def test_topk():
    x = f32(3, 7)
    x[0, 1], x[1, 2], x[1, 3], x[2, :3] = np.nan, -0.0, 0.0, 1.0
    check(lambda x: (lax.top_k(x, 3), lax.top_k(-x.astype(jnp.float16), 2)), x,
          expect_op="topk")
    check(lambda x: lax.top_k(x, 4), ints(2, 6, lo=-3, hi=3))
