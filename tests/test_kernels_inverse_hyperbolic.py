"""acos, acosh, asin, asinh, atanh, cosh, sinh and scaled-dot: parsed, shaped, and (the seven
elementwise ones) run on CPU and CUDA.

XLA:CPU does not compile HLO using these seven opcodes (it reports UNIMPLEMENTED); what XLA
computes is jax's jnp.arccosh etc., which it expands from chlo before HLO.  So the reference
here is jax: our kernels run that expansion through our base kernels.  The bounds are what
was measured (the base ops' own distance from XLA's, e.g. f64 exp, and XLA contracting the
expansion's a*b+c into FMAs): f16 and bf16 exact, f32 within 2 ULP, f64 within 4.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from oracle import cuda_and_cpu, run_text, ulp_distance
from xlaplug.backends.common.errors import ExecutionError
from xlaplug.hlo import parse_module
from xlaplug.hlo.errors import HloError
from xlaplug.hlo.verifier import verify_module

JAX = {"acos": jnp.arccos, "acosh": jnp.arccosh, "asin": jnp.arcsin, "asinh": jnp.arcsinh,
       "atanh": jnp.arctanh, "cosh": jnp.cosh, "sinh": jnp.sinh}
DTYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "f64": np.float64}
MAX_ULP = {"f16": 0, "bf16": 0, "f32": 2, "f64": 4}


def inputs(t: str) -> np.ndarray:
    r = np.random.default_rng(7)
    x = np.concatenate([r.uniform(-1.2, 1.2, 200), r.uniform(-30, 30, 100),
                        10.0 ** r.uniform(-40, 38, 100) * r.choice([-1, 1], 100),
                        [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-42]])
    with np.errstate(over="ignore"):
        return x.astype(DTYPES[t])


def module(op: str, t: str, n: int) -> str:
    return (f"HloModule m\nENTRY e {{\n  p = {t}[{n}] parameter(0)\n"
            f"  ROOT r = {t}[{n}] {op}(p)\n}}\n")


@pytest.mark.parametrize("t", sorted(DTYPES))
@pytest.mark.parametrize("op", sorted(JAX))
def test_against_jax(op, t):
    x = inputs(t)
    with jax.enable_x64(t == "f64"):
        want = np.asarray(jax.jit(JAX[op])(x))
    ours = np.asarray(run_text(module(op, t, x.size), x))
    assert ours.dtype == want.dtype
    d = ulp_distance(ours, want)
    assert int(d.max()) <= MAX_ULP[t], (op, t, x[np.argmax(d)], ours[np.argmax(d)],
                                        want[np.argmax(d)])


@pytest.mark.parametrize("op", sorted(JAX))
def test_cuda_matches_cpu(op):
    x = inputs("f32")[:64]
    m = parse_module(module(op, "f32", x.size))
    gpu, cpu = cuda_and_cpu(m, [x])
    np.testing.assert_array_equal(np.asarray(gpu), np.asarray(cpu))


def test_inferred_shape_and_types_checked():
    m = parse_module("HloModule m\nENTRY e {\n  p = f32[3] parameter(0)\n  ROOT r = acosh(p)\n}\n")
    assert str(m.entry.root.shape) == "f32[3]"
    bad = parse_module("HloModule m\nENTRY e {\n  p = s32[3] parameter(0)\n"
                       "  ROOT r = s32[3] sinh(p)\n}\n")
    with pytest.raises(HloError, match="sinh"):
        verify_module(bad)


def test_complex_is_a_clear_error():
    x = np.ones(2, np.complex64)
    with pytest.raises(ExecutionError, match="acos on c64 is not supported"):
        run_text(module("acos", "c64", 2), x)


_SCALED = """HloModule m
ENTRY e {
  l = f8e4m3fn[8,32] parameter(0)
  ls = f8e8m0fnu[8,1] parameter(1)
  r = f8e4m3fn[32,16] parameter(2)
  rs = f8e8m0fnu[1,16] parameter(3)
  ROOT sd = bf16[8,16] scaled-dot(l, ls, r, rs), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


def test_scaled_dot_parses_and_verifies():
    m = parse_module(_SCALED)
    verify_module(m)
    assert str(m.entry.root.shape) == "bf16[8,16]"
    bad = parse_module(_SCALED.replace("bf16[8,16]", "bf16[8,17]"))
    with pytest.raises(HloError, match="inferred shape"):
        verify_module(bad)


def test_scaled_dot_run_says_not_supported():
    m = parse_module(_SCALED)
    args = [np.zeros((8, 32), ml_dtypes.float8_e4m3fn), np.ones((8, 1), ml_dtypes.float8_e8m0fnu),
            np.zeros((32, 16), ml_dtypes.float8_e4m3fn), np.ones((1, 16), ml_dtypes.float8_e8m0fnu)]
    from xlaplug.runtime.executor import run_module
    with pytest.raises(Exception, match="scaled-dot"):
        run_module(m, args)
