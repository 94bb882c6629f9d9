"""scalar_jit: HLO scalar computations compiled to numba, against XLA:CPU through jax.

Scalar programs are lowered from jax on scalar arguments; their entry computation is compiled
with compile_scalar_computation and evaluated element by element, and compared with jax
running the same function on arrays (jax.vmap).  Many ops share one computation (a tuple
root) so that numba compiles once per element type.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

jax.config.update("jax_enable_x64", True)

from oracle import assert_same, both, float_inputs, int_inputs, pairs, subnormal  # noqa: E402
from test_elementwise import ULP_BOUNDS  # noqa: E402
from xlaplug.backends.common.scalar_ops import SCALAR_COMPUTE_DTYPES  # noqa: E402
from xlaplug.backends.cpu.scalar_jit import (ScalarCompileError,  # noqa: E402
                                             compile_scalar_computation)
from xlaplug.hlo import dtypes as D  # noqa: E402
from xlaplug.hlo.text.parser import parse_module  # noqa: E402


def scalar_comp(f, *example):
    """The entry computation of f lowered on scalar arguments."""
    text = jax.jit(f, keep_unused=True).lower(*example).as_text(dialect="hlo")
    return parse_module(text).entry


def evaluate(fn, *cols, py=False):
    """Applies a compiled scalar function to columns of arguments (in compute types)."""
    cols = [np.asarray(c).astype(SCALAR_COMPUTE_DTYPES[D.from_dtype(np.asarray(c).dtype)])
            for c in cols]
    call = fn.py_func if py else fn
    outs = []
    with np.errstate(all="ignore"):
        for k in range(cols[0].size):
            r = call(*(c[k] for c in cols))
            outs.append(r if isinstance(r, tuple) else (r,))
    return [np.array([o[i] for o in outs], SCALAR_COMPUTE_DTYPES[t])
            for i, t in enumerate(fn.result_types)]


def check(f, cols, ulps=None, py_sample=0):
    """Compiles f's scalar computation and compares it, element by element, with jax's
    vmapped f on the columns."""
    comp = scalar_comp(f, *(c[0] for c in cols))
    fn = compile_scalar_computation(comp)
    ours = evaluate(fn, *cols)
    xla = jax.jit(jax.vmap(f))(*cols)
    xla = [np.asarray(x) for x in (xla if isinstance(xla, tuple) else (xla,))]
    for i, (o, j) in enumerate(zip(ours, xla)):
        o = o.astype(j.dtype)
        assert_same(o, j, (ulps or {}).get(i, 0), f"output {i} {fn.result_types[i]}")
    if py_sample:  # the plain Python function agrees with the compiled one (numpy's and
        # numba's transcendentals may differ in the last place: same bounds as against XLA)
        sub = [c[:py_sample] for c in cols]
        for i, (o, p) in enumerate(zip(evaluate(fn, *sub), evaluate(fn, *sub, py=True))):
            assert_same(p.astype(o.dtype), o, (ulps or {}).get(i, 0), f"py_func output {i}")
    return fn


ARITH = ["add", "sub", "mul", "div", "max", "min", "rem", "pow", "atan2", "eq", "lt", "ge",
         "ne", "select"]


def _arith(a, b):
    return (a + b, a - b, a * b, a / b, lax.max(a, b), lax.min(a, b), lax.rem(a, b),
            lax.pow(a, b), lax.atan2(a, b), a == b, a < b, a >= b, a != b,
            lax.select(a < b, a, b))


@pytest.mark.parametrize("t", ["f32", "f64", "bf16", "f16"])
def test_float_binary(t):
    a, b = pairs(float_inputs(t, 30))
    keep = ~subnormal(a) & ~subnormal(b)  # atan2: XLA:CPU mishandles subnormals
    a, b = a[keep], b[keep]
    bounds = ULP_BOUNDS.get(t, {})
    ulps = {i: bounds.get({"pow": "power"}.get(n, n), 0) for i, n in enumerate(ARITH)}
    ulps[8] = max(bounds.get("atan2", 0), 1)
    check(_arith, [a, b], ulps, py_sample=60)


UNARY = {"exp": lax.exp, "log": lax.log, "sqrt": lax.sqrt, "rsqrt": lax.rsqrt,
         "sin": lax.sin, "cos": lax.cos, "tanh": lax.tanh, "floor": lax.floor,
         "ceil": lax.ceil, "afz": lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
         "even": lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN),
         "sign": lax.sign, "abs": lax.abs, "neg": lax.neg, "isfinite": lax.is_finite,
         "expm1": lax.expm1, "log1p": lax.log1p, "cbrt": lax.cbrt, "tan": lax.tan}
UNARY_ULP = {"f32": {"exp": 1, "log": 1, "rsqrt": 1, "sin": 1, "cos": 1, "tanh": 4, "tan": 1,
                     "expm1": 5, "log1p": 1, "cbrt": 1},
             "f64": {"exp": 1, "log": 1, "rsqrt": 2, "tanh": 8, "tan": 1, "expm1": 4,
                     "log1p": 1, "cbrt": 3},
             "bf16": {"expm1": 1}, "f16": {"expm1": 2}}


@pytest.mark.parametrize("t", ["f32", "f64", "bf16", "f16"])
def test_float_unary(t):
    x = float_inputs(t, 400)
    x = x[~subnormal(x)]  # cbrt of subnormals: XLA:CPU returns garbage
    names = list(UNARY)
    ulps = {i: UNARY_ULP.get(t, {}).get(n, 0) for i, n in enumerate(names)}
    check(lambda x: tuple(UNARY[n](x) for n in names), [x], ulps, py_sample=40)


INT_OPS = ["add", "sub", "mul", "div", "rem", "max", "min", "and", "or", "xor", "shl", "sra",
           "srl", "lt", "ge", "eq"]


def _int_ops(a, b):
    return (a + b, a - b, a * b, lax.div(a, b), lax.rem(a, b), lax.max(a, b), lax.min(a, b),
            a & b, a | b, a ^ b, lax.shift_left(a, b), lax.shift_right_arithmetic(a, b),
            lax.shift_right_logical(a, b), a < b, a >= b, a == b, ~a, -a,
            lax.population_count(a), lax.clz(a), lax.sign(a))


@pytest.mark.parametrize("t", ["s8", "s32", "s64", "u8", "u32", "u64", "s4", "u4"])
def test_integer(t):
    a, b = pairs(int_inputs(t, 16))
    check(_int_ops, [a, b], py_sample=60)


def test_pred_logic():
    a, b = pairs(np.array([True, False]))
    check(lambda a, b: (a & b, a | b, a ^ b, ~a, a == b, a < b, lax.select(a, b, ~b)),
          [a, b], py_sample=4)


CONVERT_TYPES = ["pred", "s8", "s32", "s64", "u8", "u64", "s4", "f16", "bf16", "f32", "f64",
                 "f8e4m3fn", "f8e5m2", "f4e2m1fn"]


@pytest.mark.parametrize("f", ["s32", "u64", "f32", "f64", "bf16", "f16", "f8e4m3fn", "pred"])
def test_convert(f):
    if f == "pred":
        x = np.array([True, False])
    elif D.is_float(f):
        x = float_inputs(f, 60, 1e3)
        if f == "bf16":  # bf16 != 0 lowers to a compare XLA does not flush
            x = x[~subnormal(x)]
        with np.errstate(over="ignore"):  # (some of these are out of range: inf)
            extra = np.array([3e9, -3e9, 2147483648.0, 65520, 464, 480, 1e20, -0.7, 255.5],
                             np.float64).astype(x.dtype)
        x = np.concatenate([x, extra])
    else:
        x = np.concatenate([int_inputs(f, 30), np.array([2305, 2561, 2**53 + 1],
                                                        np.int64).astype(D.to_dtype(f))])
    targets = [t for t in CONVERT_TYPES if t != f]
    check(lambda v: tuple(lax.convert_element_type(v, D.to_dtype(t)) for t in targets), [x],
          py_sample=20)


def test_bitcast_and_reduce_precision():
    x = float_inputs("f32", 200, 1e3)
    check(lambda v: (lax.bitcast_convert_type(v, jnp.int32),
                     lax.bitcast_convert_type(v, jnp.uint32),
                     lax.reduce_precision(v, 5, 10), lax.reduce_precision(v, 8, 7),
                     lax.reduce_precision(v, 4, 3)), [x], py_sample=20)
    h = float_inputs("bf16", 100, 1e3)
    check(lambda v: (lax.bitcast_convert_type(v, jnp.int16), lax.reduce_precision(v, 5, 2),
                     lax.bitcast_convert_type(lax.bitcast_convert_type(v, jnp.uint16),
                                              jnp.bfloat16)), [h])
    g = float_inputs("f16", 100, 1e3)
    check(lambda v: (lax.bitcast_convert_type(v, jnp.int16), lax.reduce_precision(v, 5, 2),
                     lax.reduce_precision(v, 4, 3)), [g])


def test_complex():
    r = np.random.default_rng(5).standard_normal((2, 60)) * 3
    z = (r[0] + 1j * r[1]).astype(np.complex64)
    a, b = pairs(z[:12])
    check(lambda a, b: (a + b, a - b, a * b, a / b, a == b, lax.abs(a), lax.real(a),
                        lax.imag(b), lax.complex(lax.real(a), lax.imag(b))), [a, b],
          {5: 2}, py_sample=10)


def test_total_order_comparator():
    """The comparator jnp.sort / lax.sort give a float key (NaNs, zeros, infinities)."""
    e = float_inputs("f32", 10)
    a, b = pairs(e)
    text = jax.jit(lambda v: lax.sort(v)).lower(e).as_text(dialect="hlo")
    mod = parse_module(text)
    comps = [c for c in mod.computations if c is not mod.entry]
    fn = compile_scalar_computation(comps[0])
    ours = evaluate(fn, a, b)[0]
    # XLA's own comparison: a stable sort of every pair [a, b] keeps the order iff not b < a
    pair_sorted = np.asarray(jax.jit(jax.vmap(lambda x, y: lax.sort(jnp.stack([y, x]))))(a, b))
    xla_lt = (pair_sorted[:, 0].view(np.uint32) == a.view(np.uint32)) & \
        (pair_sorted[:, 1].view(np.uint32) == b.view(np.uint32)) & \
        (a.view(np.uint32) != b.view(np.uint32))
    assert np.array_equal(ours, xla_lt)


def test_variadic_reducer_and_nested_call():
    """A tuple-returning argmax reducer, and a computation with a nested call."""
    def argmax_reducer(x, i, y, j):
        keep = (x > y) | ((x == y) & (i < j))
        return lax.select(keep, x, y), lax.select(keep, i, j)
    x, y = pairs(float_inputs("f32", 12))
    i = np.arange(x.size, dtype=np.int32) % 7
    j = np.arange(x.size, dtype=np.int32) % 5
    fn = check(argmax_reducer, [x, i, y, j])
    assert fn.result_types == ("f32", "s32")

    inner = jax.jit(lambda a, b: (a * b + 1, a - b))

    def outer(a, b):
        p, q = inner(a, b)
        return p * q - a
    a, b = pairs(float_inputs("f32", 20))
    fn = check(outer, [a, b], py_sample=20)
    assert "_c0(" in fn.source and "_c1(" in fn.source


def test_fma_contraction_matches_xla():
    """XLA:CPU fuses a multiply whose only user is an add into an FMA; so do we."""
    rng = np.random.default_rng(7)
    a, b, c = (rng.standard_normal(3000).astype(np.float32) for _ in range(3))
    fn = check(lambda a, b, c: (a * b + c, c - a * b, a * b - c), [a, b, c])
    assert "_xfma32" in fn.source
    a64, b64, c64 = (rng.standard_normal(3000) for _ in range(3))
    check(lambda a, b, c: a * b + c, [a64, b64, c64])
    # through a real reduce (the interpreter's reduce kernel calls the compiled reducer)
    x = rng.standard_normal((2000, 3)).astype(np.float32)
    ours, xla = both(lambda x, z: lax.reduce(x, z, lambda s, v: s + v * v, (1,)), x,
                     np.float32(0))
    assert_same(ours[0], xla[0])


def test_cache_and_errors():
    f = lambda a, b: lax.max(a, b)  # noqa: E731
    c1 = scalar_comp(f, np.float32(1), np.float32(2))
    c2 = scalar_comp(f, np.float32(3), np.float32(4))
    assert c1 is not c2
    assert compile_scalar_computation(c1) is compile_scalar_computation(c2)
    bad = scalar_comp(lambda a: jnp.arange(3, dtype=jnp.float32) * a, np.float32(2))
    with pytest.raises(ScalarCompileError, match="not on scalars|cannot be compiled"):
        compile_scalar_computation(bad)
    assert issubclass(ScalarCompileError, ValueError)
    dotc = parse_module("""HloModule m
ENTRY e {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT d = f32[] dot(a, b), lhs_contracting_dims={}, rhs_contracting_dims={}
}
""").entry
    with pytest.raises(ScalarCompileError, match="'dot'"):
        compile_scalar_computation(dotc)
