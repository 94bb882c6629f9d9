"""Reduction, window, sort and map kernels, checked against jax (the oracle).

Each program is lowered with jax, both as lowered HLO and as XLA:CPU's optimized HLO,
parsed, run by `run_module`, and compared with jax's own result: integers and booleans
exactly, floats to a tight tolerance (sums may add in another order than XLA's).
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

RNG = np.random.default_rng(20240611)


def check(f, *args, x64=False, modes=("lowered", "compiled"), rtol=1e-6, exact=False,
          expect_op=None):
    """Run f through jax and through run_module on both HLO forms (the optimized one without
    its stack-frame tables, debug metadata the kernels under test never read); compare the
    results."""
    def compare(got, want, mode):
        assert_leaves_close(got, want, mode, rtol, exact)
    check_against_jax(f, args, compare, x64=x64, modes=modes, keep_unused=True,
                      strip_tables=True, expect_op=expect_op)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def ints(*shape, dt=np.int32, lo=-50, hi=50):
    return RNG.integers(lo, hi, shape).astype(dt)


# ---- reduce ------------------------------------------------------------------------------

@pytest.mark.parametrize("fn", [jnp.sum, jnp.max, jnp.min, jnp.prod])
@pytest.mark.parametrize("axis", [None, 0, 1, (0, 2)])
def test_reduce_float(fn, axis):
    x = f32(3, 4, 5)
    check(lambda x: fn(x, axis=axis), x, rtol=1e-5, expect_op="reduce")


@pytest.mark.parametrize("dt", [np.int8, np.int32, np.uint16])
def test_reduce_int_wraps(dt):
    x = ints(4, 6, dt=dt, lo=0, hi=100)
    check(lambda x: (jnp.sum(x, axis=1, dtype=dt), jnp.prod(x, axis=0, dtype=dt),
                     jnp.max(x, axis=1), jnp.min(x)), x)


def test_reduce_bool_any_all():
    x = RNG.random((5, 7)) < 0.3
    check(lambda x: (jnp.any(x, axis=0), jnp.all(x, axis=1), jnp.any(x), jnp.all(~x)), x)


def test_reduce_f64_and_nan():
    x = RNG.standard_normal((6, 5))
    x[1, 2] = np.nan
    check(lambda x: (jnp.max(x, axis=1), jnp.min(x, axis=0), jnp.sum(x, axis=0)), x, x64=True,
          rtol=1e-12)


def test_reduce_bf16():
    x = f32(8, 16).astype(ml_dtypes.bfloat16)
    check(lambda x: (jnp.max(x, axis=1), jnp.sum(x, axis=0)), x, rtol=1e-2)


@pytest.mark.parametrize("fn", [jnp.argmax, jnp.argmin])
def test_variadic_argmax(fn):
    x = f32(5, 9)
    x[2, :] = x[2, 0]          # ties: the first index wins
    x[3, 4] = np.nan           # NaN wins
    check(lambda x: (fn(x, axis=1), fn(x, axis=0)), x, exact=True)


def test_variadic_lax_reduce():
    x, y = f32(4, 6), ints(4, 6)

    def f(x, y):
        def red(a, b):
            (av, ai), (bv, bi) = a, b
            take = av >= bv
            return jnp.where(take, av, bv), jnp.where(take, ai, bi) + 1
        return lax.reduce((x, y), (np.float32(-np.inf), np.int32(0)), red, (1,))
    check(f, x, y, modes=("lowered",), exact=True)


def test_variadic_reduce_three_operands():
    x, y, z = f32(4, 5, 3), ints(4, 5, 3, lo=0, hi=4), ints(4, 5, 3, dt=np.int8)

    def f(x, y, z):
        def red(a, b):
            (av, ak, an), (bv, bk, bn) = a, b
            take = (ak > bk) | ((ak == bk) & (av >= bv))
            return jnp.where(take, av, bv), jnp.where(take, ak, bk), an + bn
        return lax.reduce((x, y, z), (np.float32(-np.inf), np.int32(-1), np.int8(0)), red,
                          (0, 2))
    check(f, x, y, z, exact=True)


def test_reduce_complex():
    x = (f32(3, 4) + 1j * f32(3, 4)).astype(np.complex64)
    check(lambda x: (jnp.sum(x, axis=0), jnp.prod(x, axis=1)), x, rtol=1e-5)


def test_reduce_general_reducer():
    # An init value that is not the reducer's identity takes the compiled-loop path.
    x, y = ints(3, 5, 2), f32(6, 4)
    check(lambda x: lax.reduce(x, np.int32(7), lax.add, (0, 2)), x)
    check(lambda y: lax.reduce(y, np.float32(0.25), lax.max, (1,)), y, exact=True)
    check(lambda y: lax.reduce(y, np.float32(1.0), lambda a, b: a * b, (0,)), y, rtol=1e-5)


def test_reduce_empty():
    x = np.zeros((3, 0), np.float32)
    check(lambda x: (jnp.sum(x, axis=1), jnp.max(x, axis=1, initial=-1.0)), x)


# ---- reduce-window -----------------------------------------------------------------------

@pytest.mark.parametrize("cfg", [
    dict(window=(1, 3, 3, 1), strides=(1, 2, 2, 1), padding="SAME"),
    dict(window=(1, 2, 2, 1), strides=(1, 1, 1, 1), padding="VALID"),
    dict(window=(1, 3, 2, 1), strides=(1, 2, 1, 1), padding=((0, 0), (1, 2), (0, 1), (0, 0))),
])
def test_max_and_avg_pool(cfg):
    x = f32(2, 7, 6, 3)
    w, s, p = cfg["window"], cfg["strides"], cfg["padding"]
    check(lambda x: lax.reduce_window(x, -jnp.inf, lax.max, w, s, p), x, exact=True,
          expect_op="reduce-window")
    check(lambda x: lax.reduce_window(x, 0.0, lax.add, w, s, p) / np.prod(w), x, rtol=1e-5)


def test_reduce_window_dilations():
    x = f32(9, 8)
    kw = dict(window_dimensions=(3, 2), window_strides=(2, 1), padding=((1, 2), (2, 0)),
              base_dilation=(2, 1), window_dilation=(1, 3))
    check(lambda x: lax.reduce_window(x, -jnp.inf, lax.max, **kw), x, exact=True)
    check(lambda x: lax.reduce_window(x, 0.0, lax.add, **kw), x, rtol=1e-5)
    xi = ints(9, 8)
    check(lambda x: lax.reduce_window(x, np.int32(0), lax.add, **kw), xi)


def test_reduce_window_init_not_identity():
    # Padding and dilation holes are skipped, not folded in as the init value.
    xi = ints(6, 7)
    kw = dict(window_dimensions=(3, 3), window_strides=(1, 2), padding=((1, 1), (2, 1)),
              base_dilation=(1, 2), window_dilation=(2, 1))
    check(lambda x: lax.reduce_window(x, np.int32(3), lax.add, **kw), xi)
    x = f32(6, 7)
    check(lambda x: lax.reduce_window(x, np.float32(0.5), lax.max, **kw), x, exact=True)


def test_reduce_window_variadic():
    x, i = f32(6, 8), ints(6, 8)

    def f(x, i):
        def red(a, b):
            (av, ai), (bv, bi) = a, b
            take = av >= bv
            return jnp.where(take, av, bv), jnp.where(take, ai, bi)
        return lax.reduce_window((x, i), (np.float32(-np.inf), np.int32(-1)), red,
                                 (2, 3), (2, 1), ((0, 1), (1, 1)))
    check(f, x, i, exact=True, modes=("lowered",))


def test_cumsum_and_cummax():
    x = f32(5, 6)
    check(lambda x: (lax.cumsum(x, axis=1), lax.cummax(x, axis=0)), x, rtol=1e-5)


# ---- select-and-scatter -------------------------------------------------------------------

@pytest.mark.parametrize("padding", ["VALID", "SAME"])
def test_maxpool_grad(padding):
    x = f32(2, 7, 6, 2)
    x[0, :3, :3, 0] = 1.0  # ties inside a window: the first in row-major order is chosen

    def pool(x):
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), padding)

    def loss(x):
        y = pool(x)
        return jnp.sum(y * jnp.arange(y.size, dtype=y.dtype).reshape(y.shape))
    check(jax.grad(loss), x, rtol=1e-6, expect_op="select-and-scatter")


def test_minpool_grad_overlapping():
    x = f32(9, 8)

    def loss(x):
        y = lax.reduce_window(x, jnp.inf, lax.min, (3, 2), (1, 1), ((1, 1), (0, 1)))
        return jnp.sum(jnp.sin(y))
    check(jax.grad(loss), x, rtol=1e-6)


# ---- sort / top_k ------------------------------------------------------------------------

def _with_nans(*shape):
    x = f32(*shape)
    flat = x.reshape(-1)
    flat[::7] = np.nan
    flat[3::11] = -np.nan
    flat[1::13] = 0.0
    flat[2::13] = -0.0
    flat[5::17] = np.inf
    flat[6::17] = -np.inf
    return x


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_jnp_sort_and_argsort_nans(axis):
    x = _with_nans(6, 9)
    check(lambda x: (jnp.sort(x, axis=axis), jnp.argsort(x, axis=axis)), x, exact=True,
          expect_op="sort")


def test_sort_descending_and_stable_ties():
    x = ints(4, 20, lo=0, hi=5)
    check(lambda x: (jnp.argsort(x, axis=1, descending=True, stable=True),
                     jnp.sort(x, axis=0, descending=True)), x)


def test_sort_bool_and_uint():
    b = RNG.random((3, 10)) < 0.5
    u = ints(3, 10, dt=np.uint32, lo=0, hi=1 << 30)
    check(lambda b, u: (jnp.argsort(b, axis=1), jnp.sort(u, axis=1)), b, u)


def test_lax_sort_multiple_operands():
    k1 = ints(5, 12, lo=0, hi=3)
    k2 = f32(5, 12)
    v = ints(5, 12)
    check(lambda a, b, c: lax.sort((a, b, c), dimension=1, num_keys=1), k1, k2, v, exact=True)
    check(lambda a, b, c: lax.sort((a, b, c), dimension=1, num_keys=2), k1, k2, v, exact=True)
    check(lambda a, b, c: lax.sort((b, a, c), dimension=0, num_keys=2, is_stable=True),
          k1, k2, v, exact=True)


def test_sort_float_first_of_two_keys():
    x = _with_nans(4, 15)
    x[:, 1::4] = 0.5  # ties on the first key
    y = ints(4, 15)
    check(lambda x, y: lax.sort((x, y), dimension=1, num_keys=2), x, y, exact=True)


_SORT_SUM_HLO = """
HloModule sort_by_sum

cmp {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ac = s32[] add(a, c)
  bd = s32[] add(b, d)
  ROOT lt = pred[] compare(ac, bd), direction=LT
}

ENTRY main {
  x = s32[5,40]{1,0} parameter(0)
  y = s32[5,40]{1,0} parameter(1)
  ROOT s = (s32[5,40]{1,0}, s32[5,40]{1,0}) sort(x, y), dimensions={1}, is_stable=true, to_apply=cmp
}
"""


def test_sort_general_comparator():
    # A comparator over two operands at once is no key compare: the numba merge sort runs.
    x, y = ints(5, 40, lo=0, hi=6), ints(5, 40, lo=0, hi=6)
    order = np.asarray(jax.jit(lambda s: jnp.argsort(s, axis=1, stable=True))(x + y))
    want = (np.take_along_axis(x, order, 1), np.take_along_axis(y, order, 1))
    got = run_module(parse_module(_SORT_SUM_HLO), [x, y])
    assert_leaves_close(got, want, "merge sort", 0, exact=True)


def test_sort_f64_x64():
    x = RNG.standard_normal((3, 17))
    x[0, ::3] = np.nan
    check(lambda x: (jnp.sort(x, axis=1), jnp.argsort(x, axis=0)), x, x64=True, exact=True)


_SORT_GT_HLO = """
HloModule sort_gt

cmp {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  c = f32[] parameter(2)
  d = f32[] parameter(3)
  ROOT gt = pred[] compare(a, b), direction=GT
}

ENTRY main {
  k = s32[3,16]{1,0} parameter(0)
  v = f32[3,16]{1,0} parameter(1)
  ROOT s = (s32[3,16]{1,0}, f32[3,16]{1,0}) sort(k, v), dimensions={1}, is_stable=true, to_apply=cmp
}
"""


def test_sort_descending_comparator():
    # compare(..., direction=GT) of one key: a descending stable sort; ties keep their order.
    k, v = ints(3, 16, lo=0, hi=4), f32(3, 16)
    order = jax.jit(lambda k: jnp.argsort(k, axis=1, descending=True, stable=True))(k)
    want = (np.take_along_axis(k, np.asarray(order), 1),
            np.take_along_axis(v, np.asarray(order), 1))
    got = run_module(parse_module(_SORT_GT_HLO), [k, v])
    assert_leaves_close(got, want, "sort GT", 0, exact=True)


def test_top_k():
    x = _with_nans(4, 12)
    x[1, :6] = 2.0  # ties: lower index first
    check(lambda x: lax.top_k(x, 5), x, exact=True, modes=("lowered",), expect_op="topk")
    xi = ints(3, 4, 9, lo=0, hi=4)
    check(lambda x: lax.top_k(x, 3), xi, modes=("lowered",))
    check(lambda x: lax.top_k(-x, 9), xi, modes=("lowered",))


# ---- map -----------------------------------------------------------------------------------

_MAP_HLO = """
HloModule map_test, entry_computation_layout={(f32[3,4]{1,0}, f32[3,4]{1,0})->f32[3,4]{1,0}}

body {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  m = f32[] maximum(a, b)
  s = f32[] multiply(a, b)
  ROOT r = f32[] add(m, s)
}

ENTRY main {
  x = f32[3,4]{1,0} parameter(0)
  y = f32[3,4]{1,0} parameter(1)
  ROOT out = f32[3,4]{1,0} map(x, y), dimensions={0,1}, to_apply=body
}
"""


def test_map():
    x, y = f32(3, 4), f32(3, 4)
    want = jax.jit(lambda x, y: jnp.maximum(x, y) + x * y)(x, y)
    got = run_module(parse_module(_MAP_HLO), [x, y])
    assert_leaves_close(got, want, "map", 1e-6, exact=False)
