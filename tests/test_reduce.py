"""Reduction, window, select-and-scatter, sort, topk and map kernels on every device
(tests/devices.py), one case table.

Each program is lowered with jax, both as lowered HLO and as XLA:CPU's optimized HLO (or
written as HLO text for what jax does not emit: map, custom comparators and reducers),
parsed and run by `run_module`.  On cpu it is compared with jax's own result, on cuda with
the cpu's: integers, booleans, sorts and max/min exactly; float sums and products to a
tight tolerance -- the CPU kernel's fast path adds in numpy's pairwise order, the CUDA
reduce folds serially in XLA's (HloEvaluator's) order or, for long reductions, by a
chunked tree.
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
from xlaplug.runtime.executor import run_module  # noqa: E402
from xlaplug.hlo.text.parser import parse_module  # noqa: E402

pytestmark = pytest.mark.jax
RNG = np.random.default_rng(20240611)


def check(device, f, *args, x64=False, modes=("lowered", "compiled"), rtol=1e-6, exact=False,
          expect_op=None):
    """Run f through jax and through run_module on both HLO forms (the optimized one without
    its stack-frame tables, debug metadata the kernels under test never read); compare the
    results."""
    def compare(got, want, mode):
        assert_leaves_close(got, want, mode, rtol, exact)
    check_on(device, f, args, compare, x64=x64, modes=modes, keep_unused=True,
             strip_tables=True, expect_op=expect_op, cuda_compare=compare)


def run_on(device, text, args, want=None, rtol=0.0):
    """HLO text: on cpu against `want()` (jax) when given, on cuda against the cpu.  Returns
    the device's result."""
    if device == "cuda":
        return cuda_against_cpu(text, args, lambda g, w, what: assert_leaves_close(
            g, w, what, rtol, exact=rtol == 0))
    got = run_module(parse_module(text), list(args))
    if want is not None:
        assert_leaves_close(got, want(), text.splitlines()[1][:40], rtol, exact=rtol == 0)
    return got


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _keep_larger(a, b, bump=0):
    """A variadic reducer of (value, index) pairs: the larger value (the left one on ties)
    with its index, plus `bump` -- which makes it non-associative, so XLA's order shows."""
    (av, ai), (bv, bi) = a, b
    take = av >= bv
    idx = jnp.where(take, ai, bi)
    return jnp.where(take, av, bv), (idx + bump if bump else idx)


def ints(*shape, dt=np.int32, lo=-50, hi=50):
    return RNG.integers(lo, hi, shape).astype(dt)


# ---- reduce ------------------------------------------------------------------------------

@pytest.mark.parametrize("fn", [jnp.sum, jnp.max, jnp.min, jnp.prod])
@pytest.mark.parametrize("axis", [None, 0, 1, (0, 2), ()])
@on_each_device
def test_reduce_float(device, fn, axis):
    x = f32(3, 4, 5)
    # (axis=() reduces nothing: jax emits no reduce)
    check(device, lambda x: fn(x, axis=axis), x, rtol=1e-5,
          expect_op="reduce" if axis != () else None)


@pytest.mark.parametrize("dt", [np.int8, np.int32, np.uint16])
@on_each_device
def test_reduce_int_wraps(device, dt):
    x = ints(4, 6, dt=dt, lo=0, hi=100)
    check(device, lambda x: (jnp.sum(x, axis=1, dtype=dt), jnp.prod(x, axis=0, dtype=dt),
                             jnp.max(x, axis=1), jnp.min(x)), x)


@on_each_device
def test_reduce_bool_any_all(device):
    x = RNG.random((5, 7)) < 0.3
    check(device, lambda x: (jnp.any(x, axis=0), jnp.all(x, axis=1), jnp.any(x), jnp.all(~x)), x)


@on_each_device
def test_reduce_f64_and_nan(device):
    x = RNG.standard_normal((6, 5))
    x[1, 2] = np.nan
    check(device, lambda x: (jnp.max(x, axis=1), jnp.min(x, axis=0), jnp.sum(x, axis=0)), x,
          x64=True,
          rtol=1e-12)


@pytest.mark.parametrize("dt,rtol", [(ml_dtypes.bfloat16, 1e-2), (np.float16, 1e-3)],
                         ids=["bf16", "f16"])
@on_each_device
def test_reduce_narrow_floats(device, dt, rtol):
    x = f32(8, 16).astype(dt)
    check(device, lambda x: (jnp.max(x, axis=1), jnp.sum(x, axis=0)), x, rtol=rtol)


@pytest.mark.parametrize("fn", [jnp.argmax, jnp.argmin])
@on_each_device
def test_variadic_argmax(device, fn):
    x = f32(5, 9)
    x[2, :] = x[2, 0]          # ties: the first index wins
    x[3, 4] = np.nan           # NaN wins
    check(device, lambda x: (fn(x, axis=1), fn(x, axis=0)), x, exact=True)


@on_each_device
def test_variadic_lax_reduce(device):
    x, y = f32(4, 6), ints(4, 6)

    def f(x, y):
        return lax.reduce((x, y), (np.float32(-np.inf), np.int32(0)),
                          lambda a, b: _keep_larger(a, b, bump=1), (1,))
    check(device, f, x, y, modes=("lowered",), exact=True)


@on_each_device
def test_variadic_reduce_three_operands(device):
    x, y, z = f32(4, 5, 3), ints(4, 5, 3, lo=0, hi=4), ints(4, 5, 3, dt=np.int8)

    def f(x, y, z):
        def red(a, b):
            (av, ak, an), (bv, bk, bn) = a, b
            take = (ak > bk) | ((ak == bk) & (av >= bv))
            return jnp.where(take, av, bv), jnp.where(take, ak, bk), an + bn
        return lax.reduce((x, y, z), (np.float32(-np.inf), np.int32(-1), np.int8(0)), red,
                          (0, 2))
    check(device, f, x, y, z, exact=True)


@on_each_device
def test_reduce_complex(device):
    x = (f32(3, 4) + 1j * f32(3, 4)).astype(np.complex64)
    check(device, lambda x: (jnp.sum(x, axis=0), jnp.prod(x, axis=1)), x, rtol=1e-5)
    y = RNG.standard_normal((4, 3)) + 1j * RNG.standard_normal((4, 3))
    check(device, lambda y: (jnp.sum(y, axis=0), jnp.max(y.real, axis=1)), y, rtol=1e-12, x64=True)


@pytest.mark.parametrize("dt", [np.complex64, np.complex128])
@on_each_device
def test_complex_products_give_xla_bits(device, dt):
    # XLA's complex multiply contracts into FMAs inside its reduce and reduce-window
    # (cumprod) loops; a numpy product (no FMA) is 1-160 ULP off XLA's bits.
    x = (RNG.standard_normal((3, 7)) + 1j * RNG.standard_normal((3, 7))).astype(dt)
    x[2, 3] = complex(np.inf, 1.0)

    def f(x):
        return jnp.prod(x, axis=0), jnp.prod(x[:2], axis=1), jnp.cumprod(x, axis=1)
    with np.errstate(all="ignore"):
        check(device, f, x, x64=dt == np.complex128, exact=True)


@on_each_device
def test_reduce_general_reducer(device):
    # An init value that is not the reducer's identity takes the compiled-loop path.
    x, y = ints(3, 5, 2), f32(6, 4)
    check(device, lambda x: lax.reduce(x, np.int32(7), lax.add, (0, 2)), x)
    check(device, lambda y: lax.reduce(y, np.float32(0.25), lax.max, (1,)), y, exact=True)
    check(device, lambda y: lax.reduce(y, np.float32(1.0), lambda a, b: a * b, (0,)), y, rtol=1e-5)


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


@on_each_device
def test_reduce_non_associative_reducer_keeps_xla_order(device):
    """A reducer that is neither associative nor commutative folds the elements in order,
    from the init value (XLA's HloEvaluator)."""
    x, y = ints(3, 4, lo=-5, hi=5), f32(3, 4)
    got = run_on(device, _SERIAL_REDUCER, [x, y])
    np.testing.assert_array_equal(got[0], ((1 * 3 + x[0]) * 3 + x[1]) * 3 + x[2])
    np.testing.assert_array_equal(got[1], ((np.float32(0.5) - y[0]) - y[1]) - y[2])


@on_each_device
def test_reduce_empty(device):
    x = np.zeros((3, 0), np.float32)
    check(device, lambda x: (jnp.sum(x, axis=1), jnp.max(x, axis=1, initial=-1.0)), x)


# ---- reduce-window -----------------------------------------------------------------------

@pytest.mark.parametrize("cfg", [
    dict(window=(1, 3, 3, 1), strides=(1, 2, 2, 1), padding="SAME"),
    dict(window=(1, 2, 2, 1), strides=(1, 1, 1, 1), padding="VALID"),
    dict(window=(1, 3, 2, 1), strides=(1, 2, 1, 1), padding=((0, 0), (1, 2), (0, 1), (0, 0))),
])
@on_each_device
def test_max_and_avg_pool(device, cfg):
    x = f32(2, 7, 6, 3)
    w, s, p = cfg["window"], cfg["strides"], cfg["padding"]
    check(device, lambda x: lax.reduce_window(x, -jnp.inf, lax.max, w, s, p), x, exact=True,
          expect_op="reduce-window")
    check(device, lambda x: lax.reduce_window(x, 0.0, lax.add, w, s, p) / np.prod(w), x, rtol=1e-5)


@on_each_device
def test_reduce_window_dilations(device):
    x = f32(9, 8)
    kw = dict(window_dimensions=(3, 2), window_strides=(2, 1), padding=((1, 2), (2, 0)),
              base_dilation=(2, 1), window_dilation=(1, 3))
    check(device, lambda x: lax.reduce_window(x, -jnp.inf, lax.max, **kw), x, exact=True)
    check(device, lambda x: lax.reduce_window(x, 0.0, lax.add, **kw), x, rtol=1e-5)
    xi = ints(9, 8)
    check(device, lambda x: lax.reduce_window(x, np.int32(0), lax.add, **kw), xi)


@on_each_device
def test_reduce_window_init_not_identity(device):
    # Padding and dilation holes are skipped, not folded in as the init value.
    xi = ints(6, 7)
    kw = dict(window_dimensions=(3, 3), window_strides=(1, 2), padding=((1, 1), (2, 1)),
              base_dilation=(1, 2), window_dilation=(2, 1))
    check(device, lambda x: lax.reduce_window(x, np.int32(3), lax.add, **kw), xi)
    x = f32(6, 7)
    check(device, lambda x: lax.reduce_window(x, np.float32(0.5), lax.max, **kw), x, exact=True)


@on_each_device
def test_reduce_window_variadic(device):
    x, i = f32(6, 8), ints(6, 8)

    def f(x, i):
        return lax.reduce_window((x, i), (np.float32(-np.inf), np.int32(-1)), _keep_larger,
                                 (2, 3), (2, 1), ((0, 1), (1, 1)))
    check(device, f, x, i, exact=True, modes=("lowered",))
    x2, i2 = f32(4, 5), ints(4, 5)

    def argmax_pool(x, i):
        def red(a, b):
            take = (a[0] > b[0]) | ((a[0] == b[0]) & (a[1] < b[1]))
            return (jnp.where(take, a[0], b[0]), jnp.where(take, a[1], b[1]))
        # Typed inits: another test module may have turned jax's x64 mode on.
        return lax.reduce_window((x, i), (np.float32(-np.inf), i.dtype.type(0)), red, (2, 2),
                                 (1, 1), "SAME")
    check(device, argmax_pool, x2, i2, exact=True, modes=("lowered",))


@on_each_device
def test_reduce_window_3d_and_product(device):
    x = f32(3, 4, 5)
    check(device, lambda x: lax.reduce_window(x, np.float32(-np.inf), lax.max, (2, 2, 2),
                                              (1, 2, 1), [(0, 1), (1, 0), (1, 1)]),
          x, exact=True)
    check(device, lambda x: lax.reduce_window(x, np.float32(0), lax.add, (2, 2, 1), (1, 1, 1),
                                              "SAME", base_dilation=(2, 1, 1),
                                              window_dilation=(1, 2, 1)),
          x, rtol=1e-6)
    xi = ints(4, 5)
    check(device, lambda x: lax.reduce_window(x, xi.dtype.type(1), lax.mul, (2, 3), (2, 1),
                                              [(1, -1), (0, 2)]), xi)


@on_each_device
def test_cumsum_and_cummax(device):
    x = f32(5, 6)
    check(device, lambda x: (lax.cumsum(x, axis=1), lax.cummax(x, axis=0)), x, rtol=1e-5)


# ---- select-and-scatter -------------------------------------------------------------------

@pytest.mark.parametrize("padding", ["VALID", "SAME"])
@on_each_device
def test_maxpool_grad(device, padding):
    x = f32(2, 7, 6, 2)
    x[0, :3, :3, 0] = 1.0  # ties inside a window: the first in row-major order is chosen

    def pool(x):
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), padding)

    def loss(x):
        y = pool(x)
        return jnp.sum(y * jnp.arange(y.size, dtype=y.dtype).reshape(y.shape))
    check(device, jax.grad(loss), x, rtol=1e-6, expect_op="select-and-scatter")


@on_each_device
def test_minpool_grad_overlapping(device):
    x = f32(9, 8)

    def loss(x):
        y = lax.reduce_window(x, jnp.inf, lax.min, (3, 2), (1, 1), ((1, 1), (0, 1)))
        return jnp.sum(jnp.sin(y))
    check(device, jax.grad(loss), x, rtol=1e-6)


@on_each_device
def test_select_and_scatter_3d(device):
    x = f32(2, 4, 6)
    check(device, lambda x: jax.grad(lambda x: lax.reduce_window(
        x, -jnp.inf, lax.max, (1, 2, 2), (1, 2, 2), "VALID").sum())(x), x,
        expect_op="select-and-scatter")
    # overlapping windows and padding: several sources add into one element, in order
    check(device, lambda x: jax.grad(lambda x: (lax.reduce_window(
        x, -jnp.inf, lax.max, (2, 3, 3), (1, 1, 2), [(0, 0), (1, 1), (1, 1)]) ** 2).sum())(x),
        x, rtol=1e-6)




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
@on_each_device
def test_jnp_sort_and_argsort_nans(device, axis):
    x = _with_nans(6, 9)
    check(device, lambda x: (jnp.sort(x, axis=axis), jnp.argsort(x, axis=axis)), x, exact=True,
          expect_op="sort")


@on_each_device
def test_sort_descending_and_stable_ties(device):
    x = ints(4, 20, lo=0, hi=5)
    check(device, lambda x: (jnp.argsort(x, axis=1, descending=True, stable=True),
                             jnp.sort(x, axis=0, descending=True)), x)


@on_each_device
def test_sort_bool_and_uint(device):
    b = RNG.random((3, 10)) < 0.5
    u = ints(3, 10, dt=np.uint32, lo=0, hi=1 << 30)
    check(device, lambda b, u: (jnp.argsort(b, axis=1), jnp.sort(u, axis=1)), b, u)


@on_each_device
def test_lax_sort_multiple_operands(device):
    k1 = ints(5, 12, lo=0, hi=3)
    k2 = f32(5, 12)
    v = ints(5, 12)
    check(device, lambda a, b, c: lax.sort((a, b, c), dimension=1, num_keys=1), k1, k2, v,
          exact=True)
    check(device, lambda a, b, c: lax.sort((a, b, c), dimension=1, num_keys=2), k1, k2, v,
          exact=True)
    check(device, lambda a, b, c: lax.sort((b, a, c), dimension=0, num_keys=2, is_stable=True),
          k1, k2, v, exact=True)


@on_each_device
def test_sort_float_first_of_two_keys(device):
    x = _with_nans(4, 15)
    x[:, 1::4] = 0.5  # ties on the first key
    y = ints(4, 15)
    check(device, lambda x, y: lax.sort((x, y), dimension=1, num_keys=2), x, y, exact=True)


def _sort_pair_hlo(key_t: str, val_t: str, shape, cmp_body: str) -> str:
    """HLO sorting (key, value) arrays of `shape` along dimension 1, stably, with a comparator
    of scalar parameters a, b (keys) and c, d (values) whose body (ROOT last) is `cmp_body`."""
    dims = ",".join(str(d) for d in shape)
    return f"""HloModule sort_pair
cmp {{
  a = {key_t}[] parameter(0)
  b = {key_t}[] parameter(1)
  c = {val_t}[] parameter(2)
  d = {val_t}[] parameter(3)
{cmp_body}
}}
ENTRY main {{
  k = {key_t}[{dims}] parameter(0)
  v = {val_t}[{dims}] parameter(1)
  ROOT s = ({key_t}[{dims}], {val_t}[{dims}]) sort(k, v), dimensions={{1}}, is_stable=true,
    to_apply=cmp
}}
"""


def _run_sort_pair(device, text, k, v, order):
    """Runs `text` on (k, v): on cpu against both taken in jax's `order` along dimension 1,
    on cuda against the cpu; returns the device's result."""
    return run_on(device, text, [k, v],
                  lambda: (np.take_along_axis(k, order, 1), np.take_along_axis(v, order, 1)))


@on_each_device
def test_sort_general_comparator(device):
    # A comparator over two operands at once is no key compare: the numba merge sort runs.
    x, y = ints(5, 40, lo=0, hi=6), ints(5, 40, lo=0, hi=6)
    order = np.asarray(jax.jit(lambda s: jnp.argsort(s, axis=1, stable=True))(x + y))
    _run_sort_pair(device, _sort_pair_hlo("s32", "s32", (5, 40), """\
  ac = s32[] add(a, c)
  bd = s32[] add(b, d)
  ROOT lt = pred[] compare(ac, bd), direction=LT"""), x, y, order)


@on_each_device
def test_sort_f64_x64(device):
    x = RNG.standard_normal((3, 17))
    x[0, ::3] = np.nan
    check(device, lambda x: (jnp.sort(x, axis=1), jnp.argsort(x, axis=0)), x, x64=True, exact=True)


@on_each_device
def test_sort_descending_comparator(device):
    # compare(..., direction=GT) of one key: a descending stable sort; ties keep their order.
    k, v = ints(3, 16, lo=0, hi=4), f32(3, 16)
    order = np.asarray(jax.jit(lambda k: jnp.argsort(k, axis=1, descending=True,
                                                     stable=True))(k))
    _run_sort_pair(device, _sort_pair_hlo("s32", "f32", (3, 16),
                                          "  ROOT gt = pred[] compare(a, b), direction=GT"),
                   k, v, order)


@on_each_device
def test_sort_mixed_cases(device):
    x = f32(3, 7)
    x[0, 1], x[1, 2], x[1, 3], x[2, :3] = np.nan, -0.0, 0.0, 1.0
    check(device, lambda x: (jnp.sort(x, axis=1), jnp.sort(x, axis=0), jnp.argsort(x, axis=1)), x,
          exact=True)
    xi = ints(4, 9, lo=-3, hi=3)
    check(device, lambda x: (jnp.argsort(x, axis=0, stable=True), jnp.argsort(-x, axis=1)), xi)
    check(device, lambda x: lax.sort((x, -x, jnp.arange(x.size).reshape(x.shape)), dimension=1,
                             num_keys=2), xi)


@on_each_device
def test_sort_custom_comparator_is_stable(device):
    x = np.arange(22, dtype=np.int32).reshape(2, 11)
    y = f32(2, 11)
    order = np.asarray(jax.jit(lambda k: jnp.argsort(-(k % 3), axis=1, stable=True))(x))
    got = _run_sort_pair(device, _sort_pair_hlo("s32", "f32", (2, 11), """\
  three = s32[] constant(3)
  ma = s32[] remainder(a, three)
  mb = s32[] remainder(b, three)
  ROOT lt = pred[] compare(ma, mb), direction=GT"""), x, y, order)
    assert list(got[0][0]) == [2, 5, 8, 1, 4, 7, 10, 0, 3, 6, 9]


@on_each_device
def test_top_k(device):
    x = _with_nans(4, 12)
    x[1, :6] = 2.0  # ties: lower index first
    check(device, lambda x: lax.top_k(x, 5), x, exact=True, modes=("lowered",), expect_op="topk")
    xi = ints(3, 4, 9, lo=0, hi=4)
    check(device, lambda x: lax.top_k(x, 3), xi, modes=("lowered",))
    check(device, lambda x: lax.top_k(-x, 9), xi, modes=("lowered",))
    y = f32(3, 7)
    y[0, 1], y[1, 2], y[1, 3], y[2, :3] = np.nan, -0.0, 0.0, 1.0
    check(device, lambda x: (lax.top_k(x, 3), lax.top_k(-x.astype(jnp.float16), 2)), y, exact=True,
          modes=("lowered",))
    check(device, lambda x: lax.top_k(x, 4), ints(2, 6, lo=-3, hi=3), modes=("lowered",))


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


_MAP_CONVERT = """HloModule m
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


@on_each_device
def test_map(device):
    x, y = f32(3, 4), f32(3, 4)
    run_on(device, _MAP_HLO, [x, y], lambda: jax.jit(lambda x, y: jnp.maximum(x, y) + x * y)(
        x, y), rtol=1e-6)
    a, b = f32(2, 3), ints(2, 3)
    run_on(device, _MAP_CONVERT, [a, b],
           lambda: jax.jit(lambda a, b: a * b.astype(jnp.float32) + a)(a, b))


@pytest.mark.cuda
def test_reduce_tree_path_on_cuda(monkeypatch):
    """Long reductions take the CUDA reduce's chunked tree (forced here on short ones)."""
    from xlaplug.backends.cuda import reductions as cuda_reductions
    monkeypatch.setattr(cuda_reductions, "TREE_MIN_K", 8)
    x = f32(2, 20, 3)
    xi = ints(2, 20, 3)
    check("cuda", lambda x: (jnp.sum(x, axis=(1, 2)), jnp.argmax(x.reshape(2, 60), axis=1)), x,
          rtol=1e-5, modes=("lowered",))
    check("cuda", lambda x: (jnp.sum(x, axis=(0, 1)), jnp.min(x, axis=1)), xi,
          modes=("lowered",))
