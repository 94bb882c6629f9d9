"""f32 sine, cosine and tangent as XLA:CPU computes them: libm's sinf, cosf and tanf.

XLA:CPU emits `llvm.sin.f32` / `llvm.cos.f32` (and tan) for an f32 sine, cosine or tan --
scalar calls, unrolled, that LLVM lowers to the process's libm (a sine and a cosine of one
value become one `sincosf` call).  f16 and bf16 compute in f32 and round.  Computed in f64
and rounded instead, 1 in 60-70 results is 1 ULP off XLA's (glibc's sinf is not correctly
rounded); computed as below, every f32, f16 and bf16 result is XLA's
(tests/test_libm32.py: millions of inputs from 1e-45 to 3.4e38, inf, NaN, every f16/bf16).

Each helper is a plain function, what plain Python and CUDA run (cuda/scalar_cuda.py
re-executes its source: the f64 function of libdevice or the simulator, rounded -- within
1 ULP); numba on the CPU compiles the overload instead: numpy's f32 scalar function, which
numba lowers to llvm.sin.f32 / llvm.cos.f32 and a call of tanf -- XLA's bits, and no
conversion to f64 in an f32 loop.  Subnormal inputs: XLA's sinf and tanf return a tiny x
unchanged (callers do not flush it); cosf gives 1 for it as for 0.
"""
from __future__ import annotations

import numpy as np
from numba.extending import overload


def _xsin32(x):
    return np.float32(np.sin(np.float64(x)))


def _xcos32(x):
    return np.float32(np.cos(np.float64(x)))


def _xtan32(x):
    return np.float32(np.tan(np.float64(x)))


@overload(_xsin32)
def _sin32_libm(x):
    return lambda x: np.sin(np.float32(x))


@overload(_xcos32)
def _cos32_libm(x):
    return lambda x: np.cos(np.float32(x))


@overload(_xtan32)
def _tan32_libm(x):
    return lambda x: np.tan(np.float32(x))
