"""f32 erf and pow give XLA:CPU's bits, in a fused loop and as one instruction.

XLA:CPU computes f32 erf by its own rational approximation (xla/codegen/intrinsic/erf.cc;
common/scalar_float_approx32._xerf32 writes it in f32 as selects, so the fused loop
vectorizes: tests/test_fused_vectorize.py) and f32 pow by calling libm's powf
(common/scalar_float_math._xpow32): f64 pow rounded to f32 differs from it in about 1 of 1,400
results.  f64 erf and pow are libm's on both sides.  The oracle is jax.jit of lax.erf /
lax.pow on the same inputs: bit patterns spread over the whole f32 range, dense samples where
the functions bend, and the edges (zeros, infinities, NaN, subnormals, huge values).
(Every 16th f32 bit pattern -- 2^28 inputs -- gave XLA's erf bits on both paths when this was
written; here every 4096th keeps the test short.)
"""
from __future__ import annotations

import jax
import numpy as np
import pytest
from jax import lax

from oracle import as_list, assert_same, float_edges, run_text
from xlaplug.backends.common.fusion_contents import loop_shape
from xlaplug.backends.cpu.fused_loop import compiled_loop_fn
from xlaplug.hlo import parse_module

pytestmark = pytest.mark.jax


def _fused_loop(op: str, n: int, arity: int):
    """The compiled fused loop of one f32[n] `op` on `arity` parameters."""
    params = "".join(f"  p{i} = f32[{n}] parameter({i})\n" for i in range(arity))
    args = ", ".join(f"p{i}" for i in range(arity))
    text = (f"HloModule m\n\nfused {{\n{params}  ROOT r = f32[{n}] {op}({args})\n}}\n\n"
            "ENTRY main {\n" + params.replace("  p", "  a") +
            f"  ROOT f = f32[{n}] fusion({args.replace('p', 'a')}), kind=kLoop, calls=fused\n}}\n")
    comp = next(c for c in parse_module(text).computations if c.name == "fused")
    return compiled_loop_fn(comp, tuple(loop_shape(comp)))


def _both_paths(op: str, fn, *xs):
    """(fused loop's, one instruction's, XLA's) results of `op` on f32 arrays xs."""
    n = xs[0].size
    out = np.empty(n, np.float32)
    _fused_loop(op, n, len(xs))(out, *xs)
    text = jax.jit(fn).lower(*xs).as_text(dialect="hlo")
    alone = as_list(run_text(text, *xs))[0]
    return out, alone, np.asarray(jax.jit(fn)(*xs))


def _erf_inputs() -> np.ndarray:
    g = np.random.default_rng(23)
    patterns = (np.arange(1 << 20, dtype=np.uint64) * 4096 + 7).astype(np.uint32)
    bends = g.uniform(-4.5, 4.5, 300_000).astype(np.float32)  # the polynomial's range, densely
    near_clamp = np.nextafter(np.float32(3.8325069), np.float32(0)) + \
        np.arange(-200, 200, dtype=np.float32) * np.float32(2.4e-7)
    return np.concatenate([patterns.view(np.float32), bends, near_clamp, -near_clamp,
                           float_edges("f32"), np.float32([1e-20, 1e-30, 3.4e38, -1e-38, 3.83])])


def test_f32_erf_is_xlas_bit_for_bit():
    x = _erf_inputs()
    fused, alone, xla = _both_paths("erf", lax.erf, x)
    assert xla[-1] > 1  # XLA's erf(3.83) is 1.0000001 (the interpolant's overshoot): kept
    assert_same(fused, xla, 0, "erf f32, fused loop")
    assert_same(alone, xla, 0, "erf f32, one instruction")


@pytest.mark.parametrize("t", ["bf16", "f16"])
def test_narrow_erf_is_xlas_bit_for_bit(t):
    """bf16/f16 erf: XLA's f32 approximation on the widened value, rounded back -- on every
    bit pattern."""
    from xlaplug.hlo import dtypes as D
    x = np.arange(1 << 16, dtype=np.uint16).view(D.to_dtype(t))
    text = jax.jit(lax.erf).lower(x).as_text(dialect="hlo")
    ours = as_list(run_text(text, x))[0]
    assert_same(ours, np.asarray(jax.jit(lax.erf)(x)), 0, f"erf {t}")


def _pow_inputs() -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(29)
    n = 200_000
    wide = g.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    near_one = (1 + g.standard_normal(n) * 0.01).astype(np.float32)
    bases = np.concatenate([wide, np.abs(g.standard_normal(n)).astype(np.float32) * 3,
                            -np.abs(g.standard_normal(n)).astype(np.float32) * 3, near_one])
    exps = np.concatenate([g.uniform(-3, 3, n), g.standard_normal(n) * 8,
                           g.integers(-30, 30, n), g.standard_normal(n) * 3000]).astype(np.float32)
    e = float_edges("f32")
    ea, eb = (v.reshape(-1) for v in np.meshgrid(e, e, indexing="ij"))
    return np.concatenate([bases, ea]), np.concatenate([exps, eb])


def test_f32_pow_is_xlas_bit_for_bit():
    """XLA calls libm's powf (0 of these differ); f64 pow rounded to f32 would differ in
    about 1 of 1,400, subnormal results and subnormal bases (XLA reads one as +-2^-150)
    aside -- the inputs have all three."""
    a, b = _pow_inputs()
    fused, alone, xla = _both_paths("power", lax.pow, a, b)
    with np.errstate(all="ignore"):
        rounded = np.power(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
    ok = np.isfinite(xla) & (np.abs(xla) >= np.finfo(np.float32).tiny)
    assert (rounded[ok].view(np.uint32) != xla[ok].view(np.uint32)).sum() > 50  # not f64 pow
    assert_same(fused, xla, 0, "power f32, fused loop")
    assert_same(alone, xla, 0, "power f32, one instruction")


@pytest.mark.parametrize("t", ["bf16", "f16"])
def test_narrow_pow_is_xlas_bit_for_bit(t):
    """bf16/f16 pow: XLA widens to f32 and calls powf; random base bit patterns and
    exponents."""
    from xlaplug.hlo import dtypes as D
    g = np.random.default_rng(37)
    a = g.integers(0, 1 << 16, 100_000, dtype=np.uint16).view(D.to_dtype(t))
    b = (g.standard_normal(100_000) * 4).astype(D.to_dtype(t))
    text = jax.jit(lax.pow).lower(a, b).as_text(dialect="hlo")
    assert_same(as_list(run_text(text, a, b))[0], np.asarray(jax.jit(lax.pow)(a, b)), 0,
                f"power {t}")
