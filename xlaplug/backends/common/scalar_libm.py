"""f32 sine and cosine as XLA:CPU computes them: libm's sinf and cosf.

XLA:CPU emits `llvm.sin.f32` / `llvm.cos.f32` for an f32 sine or cosine -- scalar calls,
unrolled, that LLVM lowers to the process's libm (a sine and a cosine of one value become
one `sincosf` call); f16 and bf16 compute in f32 and round.  Computed in f64 and rounded
instead, 1 in 60-70 results is 1 ULP off XLA's (glibc's sinf is not correctly rounded);
computed as below, every result is XLA's (tests/test_libm32.py: 140,000 f32 inputs from
1e-45 to 3.4e38, inf and NaN; every f16 and bf16).  The conformance suite's
exp_complex64_20_20 (a complex exp written with f32 sine and cosine) then fails by 2 ULP in
2 of 400 elements, with XLA's bits, as XLA does.

Each helper is a plain function, what plain Python and CUDA run (cuda/scalar_cuda.py
re-executes its source: the f64 function of libdevice or the simulator, rounded -- within
1 ULP); numba on the CPU compiles the overload instead: numpy's f32 scalar function, which
numba lowers to llvm.sin.f32 / llvm.cos.f32 -- XLA's bits, and no conversion to f64 in an
f32 loop.  Subnormal inputs: sinf returns a tiny x unchanged (callers do not flush it);
cosf gives 1 for it as for 0.

(XLA's f32 tan is libm's tanf too, but tan stays f64 rounded -- within 1 ULP of XLA: tanf's
bits fail the conformance suite's tan_float32_20_20_chlo, as XLA does, which f64 passes.)
"""
from __future__ import annotations

import numpy as np
from numba.extending import overload


def _xsin32(x):
    return np.float32(np.sin(np.float64(x)))


def _xcos32(x):
    return np.float32(np.cos(np.float64(x)))


@overload(_xsin32)
def _sin32_libm(x):
    return lambda x: np.sin(np.float32(x))


@overload(_xcos32)
def _cos32_libm(x):
    return lambda x: np.cos(np.float32(x))
