"""XLA:CPU's f32 exp, logistic, maximum and minimum as its own loops run them, for loops that
run under the MXCSR's FTZ and DAZ bits (hardware_flush.py binds `_xexp32`, `_xlogistic32`,
`_xfmaxd32` and `_xfmind32` to these forms in those loops' modules).

XLA expands exp inline (its polynomial approximation of `llvm.exp`, dumped with
`--xla_dump_to`): x clamped to [-87.8, 88.8] by selects that let a NaN through, m = floor(x
log2(e) + 1/2) clamped to [-127, 127], r = x - m ln2 in two multiply-adds (Cephes' split of
ln2), Eigen's degree-7 polynomial in r, times 2^m built from its bits.  Nothing else: a
result under the smallest normal is flushed by the FTZ bit (2^-127 is built as 0), one past
the largest overflows to inf in the last product, and a NaN flows through every step.

common/scalar_float_approx32._xexp32 gives the same bits without the FTZ bit (the loops
that flush in software, and plain Python): it decides the flushed, infinite and NaN cases
with selects of its own, about a dozen more vector instructions per element: one f32[2048,
2048] exp on one core took 2.4 ms against XLA's 1.3 (both with AVX2 code, 2026-12-06).
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from ..common.scalar_float_approx32 import _EXP_P32
from ..common.scalar_ops import GENERATED_NAMESPACE

# The helpers' njit twins, as generated loops call them (common/scalar_inline.py): spliced
# in untyped and typed once with the loop, not typed again at each call site.
_xhorner32 = GENERATED_NAMESPACE["_xhorner32"]
_xfrom_bits32 = GENERATED_NAMESPACE["_xfrom_bits32"]
_xfma32 = GENERATED_NAMESPACE["_xfma32"]

_LO = np.float32(-87.8)
_HI = np.float32(88.8)
_LOG2E = np.float32(1.44269504088896341)
_LN2_HI = np.float32(-0.693359375)
_LN2_LO = np.float32(2.12194440e-4)
_M_MAX = np.float32(127.0)


def _nan_passing(name: str):
    """llvm.maximum / llvm.minimum of two floats: a NaN operand gives a NaN, as XLA's clamps
    do.  Against a constant that is neither NaN nor 0 each is one vmaxps / vminps of the
    constant and x, x86's own NaN-passing order; the same clamp as two compares and selects
    is merged by LLVM's instcombine with the next one into compares and blends (four
    instructions where XLA has two, per clamp pair)."""
    @intrinsic
    def clamp(typingctx, a, b):
        if not (isinstance(a, types.Float) and a == b):
            return None

        def codegen(context, builder, sig, args):
            t = args[0].type
            return builder.call(builder.module.declare_intrinsic(
                name, [t], ir.FunctionType(t, [t, t])), args)
        return a(a, b), codegen
    return clamp


_maximum = _nan_passing("llvm.maximum")
_minimum = _nan_passing("llvm.minimum")


@njit(inline="always")
def xexp32_ftz(x):
    """f32 exp with XLA's bits, where the FTZ and DAZ bits are set (not without them)."""
    x = np.float32(x)
    xc = _minimum(_maximum(x, _LO), _HI)  # a NaN stays
    m = np.float32(np.floor(_xfma32(xc, _LOG2E, np.float32(0.5))))
    m = _minimum(_maximum(m, -_M_MAX), _M_MAX)
    r = _xfma32(m, _LN2_HI, xc)
    r = _xfma32(m, _LN2_LO, r)
    y = np.float32(_xfma32(_xhorner32(r, _EXP_P32), np.float32(r * r), r) + np.float32(1.0))
    scale = _xfrom_bits32((np.int32(m) + np.int32(127)) << np.int32(23))
    return np.float32(y * scale)


@njit(inline="always")
def xlogistic32_ftz(x):
    """XLA's f32 logistic, 1 / (1 + exp(-x)), where the bits are set: the exp above, and no
    flush in software (the FTZ bit flushes the quotient; 1 + e^-x is at least 1)."""
    one = np.float32(1.0)
    return one / (one + xexp32_ftz(-np.float32(x)))


# maximum and minimum: XLA's loops call llvm.maximum / llvm.minimum on the operands as they
# are (NaN if either is, -0 below +0), and DAZ reads a subnormal as its signed 0 in the
# instructions LLVM lowers them to.  The software form (common/scalar_float_math._xfmaxd32)
# flushes both operands and picks with compares and selects: about 25 instructions per
# 8 elements with AVX2 code, where XLA has 5.
@njit(inline="always")
def xmaximum32_ftz(a, b):
    return _maximum(np.float32(a), np.float32(b))


@njit(inline="always")
def xminimum32_ftz(a, b):
    return _minimum(np.float32(a), np.float32(b))
