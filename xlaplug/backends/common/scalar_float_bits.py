"""Float bit patterns for the scalar op table (numba register_jitable: callable from @njit
code and from plain Python): bit views of f32/f64 (an LLVM bitcast under numba, so loops
calling them vectorize), total-order keys (compare TOTALORDER), f16 bit patterns and XLA's
reduce-precision on a pattern.  The other float helpers build on the bit views; see
scalar_float_round.py, scalar_float_math.py and scalar_float_approx32.py."""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir as llvm_ir
from numba.core import types
from numba.extending import intrinsic, overload, register_jitable

from .scalar_inline import inlined, inlined_as


# Bit views.  These bodies (through a one-element array) are what plain Python runs (CUDA
# has its own, device_helpers.py); numba on the CPU compiles the overloads below instead: an
# LLVM bitcast, which -- unlike an array allocation -- lets a loop calling them vectorize.
def _xbits32(x):
    a = np.empty(1, np.float32)
    a[0] = x
    return a.view(np.int32)[0]


def _xfrom_bits32(i):
    a = np.empty(1, np.int32)
    a[0] = i
    return a.view(np.float32)[0]


def _xbits64(x):
    a = np.empty(1, np.float64)
    a[0] = x
    return a.view(np.int64)[0]


def _xfrom_bits64(i):
    a = np.empty(1, np.int64)
    a[0] = i
    return a.view(np.float64)[0]


_LLVM_FLOAT = {32: llvm_ir.FloatType(), 64: llvm_ir.DoubleType()}


@intrinsic
def _llvm_bitcast(typingctx, x, to):
    """x reinterpreted as the same-width type `to` (a numba type given as a typeref)."""
    dst = getattr(to, "instance_type", None)
    if not isinstance(dst, (types.Integer, types.Float)) or dst.bitwidth != x.bitwidth:
        return None
    if not isinstance(x, (types.Integer, types.Float)):
        return None

    def codegen(context, builder, sig, args):
        t = _LLVM_FLOAT[dst.bitwidth] if isinstance(dst, types.Float) else \
            llvm_ir.IntType(dst.bitwidth)
        return builder.bitcast(args[0], t)
    return dst(x, to), codegen


@overload(_xbits32)
def _bits32_llvm(x):
    return lambda x: _llvm_bitcast(np.float32(x), np.int32)


@overload(_xfrom_bits32)
def _from_bits32_llvm(i):
    return lambda i: _llvm_bitcast(np.int32(i), np.float32)


@overload(_xbits64)
def _bits64_llvm(x):
    return lambda x: _llvm_bitcast(np.float64(x), np.int64)


@overload(_xfrom_bits64)
def _from_bits64_llvm(i):
    return lambda i: _llvm_bitcast(np.int64(i), np.float64)


# bf16 in memory as its bits (uint16), for loops that read and write bf16 arrays directly
# instead of through f32 copies (cpu/fused_loop.py, cpu/row_loop.py), and for the array
# conversions (cpu/bf16_convert.py): the bit rules written once, in integer lanes with no
# branch or call, so that loops vectorize.
@inlined
def _bf16_round_bits(u):
    """The bf16 bits of the float32 bits `u` (uint32): NaN (|bits| > 0x7F800000) -> its
    sign | 0x7FC0 (ml_dtypes' quiet NaN); anything else rounded to nearest even on the bits
    (bits + 0x7FFF + the lowest kept bit, the high half): subnormals round on bf16's grid,
    overflow carries into infinity -- ml_dtypes' float_to_bfloat16_rtne."""
    if u & np.uint32(0x7FFFFFFF) > np.uint32(0x7F800000):
        return np.uint16(((u >> np.uint32(16)) & np.uint32(0x8000)) | np.uint32(0x7FC0))
    return np.uint16((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))
                     >> np.uint32(16))


@inlined
def _bf16_widen_bits(h):
    """The float32 bits of the bf16 bits `h` (exact: the high half)."""
    return np.uint32(np.uint32(h) << np.uint32(16))


def _xbf16_load(h):
    """bf16 bits -> the value as float32.  Plain Python; numba compiles the overload."""
    return np.array([_bf16_widen_bits(np.uint16(h))], np.uint32).view(np.float32)[0]


def _xbf16_store(x):
    """A float32 -> bf16 bits (_bf16_round_bits), the bits cpu/bf16_convert.to_bf16 gives,
    so a loop storing them writes what the f32 loop and a to_bf16 pass wrote.  Plain
    Python; numba compiles the overload."""
    return _bf16_round_bits(np.array([x], np.float32).view(np.uint32)[0])


@inlined_as("_xbf16_load")
def _bf16_load_numba(h):
    return _llvm_bitcast(_bf16_widen_bits(h), np.float32)


@inlined_as("_xbf16_store")
def _bf16_store_numba(x):
    return _bf16_round_bits(_llvm_bitcast(np.float32(x), np.uint32))


@overload(_xbf16_load, inline="always")
def _bf16_load_llvm(h):
    return _bf16_load_numba


@overload(_xbf16_store, inline="always")
def _bf16_store_llvm(x):
    return _bf16_store_numba


@register_jitable
def _xkey32(x):
    """Total-order key of a float32: -NaN < -inf < ... < -0 < +0 < ... < inf < NaN."""
    s = np.int64(_xbits32(x))
    if s < 0:
        s = s ^ np.int64(0x7FFFFFFF)
    return s


@register_jitable
def _xkey64(x):
    s = _xbits64(x)
    if s < 0:
        s = s ^ np.int64(0x7FFFFFFFFFFFFFFF)
    return s


@register_jitable
def _xf16_bits(x):
    """A float32 holding an f16 value -> its 16-bit pattern (uint64)."""
    v = np.float64(x)
    sign = np.uint64(0x8000) if math.copysign(1.0, v) < 0 else np.uint64(0)
    a = abs(v)
    if a != a:
        return sign | np.uint64(0x7E00)
    if a == np.inf:
        return sign | np.uint64(0x7C00)
    if a == 0.0:
        return sign
    m, e = math.frexp(a)
    ex = e - 1
    if ex < -14:  # subnormal: a = k * 2^-24
        return sign | np.uint64(int(a * 16777216.0))
    frac = np.uint64(int((m * 2.0 - 1.0) * 1024.0))
    return sign | (np.uint64(ex + 15) << np.uint64(10)) | frac


@register_jitable
def _xf16_value(h):
    """16-bit pattern (uint64) -> the f16 value as float32."""
    sign = -1.0 if (h >> np.uint64(15)) & np.uint64(1) else 1.0
    ex = np.int64((h >> np.uint64(10)) & np.uint64(0x1F))
    fr = np.float64(h & np.uint64(0x3FF))
    if ex == 31:
        if fr == 0.0:
            return np.float32(sign * np.inf)
        return np.float32(np.nan)
    if ex == 0:
        return np.float32(sign * fr * 5.960464477539063e-08)
    return np.float32(sign * math.ldexp(1.0 + fr / 1024.0, ex - 15))


@register_jitable
def _xreduce_prec(u, nbits, src_e, src_m, e_bits, m_bits):
    """XLA's ReducePrecision on an nbits-wide float pattern (uint64)."""
    one = np.uint64(1)
    full = (one << np.uint64(nbits)) - one if nbits < 64 else ~np.uint64(0)
    sign = one << np.uint64(nbits - 1)
    exp_mask = ((one << np.uint64(src_e)) - one) << np.uint64(src_m)
    is_nan = (u & ~sign & full) > exp_mask
    if is_nan:
        return u
    x = u
    if m_bits < src_m:
        sh = np.uint64(src_m - m_bits)
        last = one << sh
        last_bit = (x & last) >> sh
        x = ((x + last_bit + ((one << (sh - one)) - one)) & ~(last - one)) & full
    if e_bits < src_e:
        bias = (1 << (src_e - 1)) - 1
        rbias = (1 << (e_bits - 1)) - 1
        xe = x & exp_mask
        if xe > np.uint64((bias + rbias) << src_m):
            x = (x & sign) | exp_mask
        elif xe <= np.uint64((bias - rbias) << src_m):
            x = x & sign
    return x
