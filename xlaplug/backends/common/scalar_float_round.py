"""Float rounding helpers of the scalar op table (numba register_jitable: callable from @njit
code and from plain Python): flush-to-zero of subnormals, int64/uint64 -> f64 rounded to odd,
rounding to a narrow format (bf16 with a branch-free overload), rounding to odd, and fused
multiply-adds rounded once (XLA:CPU contracts a multiply feeding an add into an FMA, so its
results are only matched with one)."""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir as llvm_ir
from numba.core import types
from numba.extending import intrinsic, overload, register_jitable

from .scalar_float_bits import _llvm_bitcast, _xbits64

_TINY32 = np.float32(np.finfo(np.float32).tiny)
_TINY64 = np.float64(np.finfo(np.float64).tiny)


def _xftz32(x):
    """A subnormal x -> its signed 0 (NaN, 0 and normal values as they are).  This body is
    what plain Python runs; numba compiles the `_ftz_llvm` overload below for an f32."""
    if x != 0 and abs(x) < _TINY32:
        return x * np.float32(0.0)
    return x


def _xftz64(x):
    """As _xftz32, for f64 (numba: `_ftz_llvm` for an f64)."""
    if x != 0 and abs(x) < _TINY64:
        return x * np.float64(0.0)
    return x


def _ftz_llvm(width: int, tiny):
    """The flush for numba: on a float of `width` bits, the exponent field tested in integer
    lanes -- zero: the sign bit alone (a signed 0) -- two integer operations and a select,
    where the float test (|x| < tiny and x != 0, then x * 0) took five: every element-loop
    operand and result is flushed, and the transformer block's GELU loop ran 30.7 -> 21.9
    us (f32[4,32,256], CPU time).  The same value for every input, NaN's bits included.
    Other types (an integer, the other width) take the plain body."""
    it, ft = (np.int32, np.float32) if width == 32 else (np.int64, np.float64)
    sign = it(np.iinfo(it).min)
    expo = it(0x7F800000) if width == 32 else it(0x7FF0000000000000)

    def typed(x):
        if isinstance(x, types.Float) and x.bitwidth == width:
            def ftz(x):
                b = _llvm_bitcast(x, it)
                z = _llvm_bitcast(it(b & sign), ft)
                return z if it(b & expo) == it(0) else x
            return ftz

        def plain(x):
            if x != 0 and abs(x) < tiny:
                return x * ft(0.0)
            return x
        return plain
    return typed


overload(_xftz32)(_ftz_llvm(32, _TINY32))
overload(_xftz64)(_ftz_llvm(64, _TINY64))


# A result's flush (scalar_base._fres: an op's value as XLA's FTZ leaves it) has a name of
# its own, apart from the operands' (denormals-are-zero): a loop that runs with the MXCSR's
# FTZ and DAZ bits set (cpu/hardware_flush.py) binds these two to `_xkeep` -- its float
# arithmetic flushes its results itself -- and keeps every other flush.
# An operand's flush where the op reads it only through float instructions (arithmetic,
# compares): under DAZ they read a subnormal as its signed 0 themselves, so those loops bind
# these to `_xkeep` too.  (An op that may pass an operand on as it is -- max, select, a bit
# view -- flushes it with _xftz32 in every loop.)
# Elsewhere each is `_xftz32` itself, not a wrapper: numba resolves a global by its value, so
# a call compiles to the same call of the flush's overload (the same machine code), where a
# register_jitable(inline="always") wrapper was inlined in numba's IR at every call site --
# a float op has two or three flushes, and that inlining (IR copied, retyped) took a fifth
# of a fused loop's cold compile (3.45 -> 2.70 s CPU for a complex conformance case).
_xftzr32 = _xftzd32 = _xftz32
_xftzr64 = _xftzd64 = _xftz64


@register_jitable
def _xkeep(x):
    """The identity, for the flushes a hardware-flushed loop leaves to the MXCSR (a call
    LLVM inlines away; not inlined in numba's IR, for the cost said above)."""
    return x


# Generated modules (cpu/jit_cache.py, scalar_ops.GENERATED_NAMESPACE) call the flushes
# above as intrinsics that emit the overload's instructions in place: a flush is almost
# every other call of a fused body (1,970 of a quarter of the conformance suite's cases'
# 2,401 statements), and numba types each call of an overload as a call of its compiled
# dispatcher, lowers it as a call with a status check and links the function in for LLVM to
# inline -- the same instructions in the end (the modules' assembly compared equal), at
# ~4% of their cold compile.  Plain Python and hand-written numba code keep the functions.
def _flush_ir(width: int, fn):
    """`fn` (_xftz32 / _xftz64) as an intrinsic: `_ftz_llvm`'s bit test and select on a
    float of `width` bits; any other type is typed and lowered as a call of `fn` itself."""
    it = llvm_ir.IntType(width)
    sign = llvm_ir.Constant(it, -(1 << (width - 1)))
    expo = llvm_ir.Constant(it, 0x7F800000 if width == 32 else 0x7FF0000000000000)

    @intrinsic
    def flush(typingctx, x):
        if isinstance(x, types.Float) and x.bitwidth == width:
            def codegen(context, builder, sig, args):
                b = builder.bitcast(args[0], it)
                z = builder.bitcast(builder.and_(b, sign), args[0].type)
                e = builder.icmp_unsigned("==", builder.and_(b, expo), it(0))
                return builder.select(e, z, args[0])
            return x(x), codegen
        fnty = typingctx.resolve_value_type(fn)
        sig = typingctx.resolve_function_type(fnty, (x,), {})
        if sig is None:
            return None

        def call(context, builder, sig_, args):
            return context.get_function(fnty, sig)(builder, args)
        return sig.return_type(x), call
    return flush


@intrinsic
def _keep_ir(typingctx, x):
    """_xkeep as an intrinsic: the value itself, no call."""
    return x(x), lambda context, builder, sig, args: args[0]


_FLUSH32, _FLUSH64 = _flush_ir(32, _xftz32), _flush_ir(64, _xftz64)
# {name in generated code: its intrinsic} (scalar_ops.GENERATED_NAMESPACE)
GENERATED_FLUSHES = {"_xftz32": _FLUSH32, "_xftzd32": _FLUSH32, "_xftzr32": _FLUSH32,
                     "_xftz64": _FLUSH64, "_xftzd64": _FLUSH64, "_xftzr64": _FLUSH64,
                     "_xkeep": _keep_ir}


@register_jitable
def _xu64_odd(a):
    """uint64 -> float64, exact below 2^53, else rounded to odd at bit 11 (elementwise_convert's
    int_to_f64_odd): a later rounding to a narrow float is then the correct one."""
    if a < np.uint64(9007199254740992):
        return np.float64(a)
    q = a >> np.uint64(11)
    if a & np.uint64(2047):
        q = q | np.uint64(1)
    return np.float64(q) * 2048.0


@register_jitable
def _xs64_odd(v):
    if v < 0:
        return -_xu64_odd(np.uint64(-(v + np.int64(1))) + np.uint64(1))
    return _xu64_odd(np.uint64(v))


@register_jitable
def _xround(x, mbits, emin, maxv, kind):
    """f32/f64 value -> nearest (ties to even) value of a narrow format, as float32."""
    v = np.float64(x)
    if v != v:
        if kind == 3:
            return np.float32(-0.0)
        return np.float32(v)
    a = abs(v)
    if a == np.inf:
        if kind == 0:
            return np.float32(v)
        if kind == 3:
            return np.float32(math.copysign(maxv, v))
        return np.float32(math.copysign(np.nan, v))  # no inf: NaN, its sign kept (as XLA)
    if a == 0.0:
        return np.float32(0.0) if kind == 2 else np.float32(v)
    m, e = math.frexp(a)
    ex = e - 1
    if ex < emin:
        ex = emin
    q = math.ldexp(1.0, ex - mbits)
    r = a / q
    n = np.floor(r)
    frac = r - n
    if frac > 0.5 or (frac == 0.5 and n % 2.0 == 1.0):
        n += 1.0
    res = n * q
    if res > maxv:
        if kind == 0:
            return np.float32(math.copysign(np.inf, v))
        if kind == 3:
            return np.float32(math.copysign(maxv, v))
        return np.float32(math.copysign(np.nan, v))
    if res == 0.0 and kind == 2:
        return np.float32(0.0)
    return np.float32(math.copysign(res, v))


_BF16_MAX = 3.3895313892515355e+38


def _xrbf16(x):
    """f32/f64 value -> the nearest bf16 (ties to even), as float32: `_xround` for bf16.  This
    body is what plain Python and CUDA run; numba on the CPU compiles the `_rbf16_llvm`
    overload below instead, which for a float32 rounds its bits in integer lanes (add
    0x7FFF plus the lowest kept bit, clear the low half: RNE, overflow carrying into inf,
    subnormals on bf16's grid; NaN kept) with no branch or call, so loops vectorize."""
    return _xround(x, 7, -126, _BF16_MAX, 0)


@overload(_xrbf16)
def _rbf16_llvm(x):
    if isinstance(x, types.Float) and x.bitwidth == 32:
        def rbf16(x):
            u = np.uint32(_llvm_bitcast(x, np.int32))
            u = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) \
                & np.uint32(0xFFFF0000)
            r = _llvm_bitcast(np.uint32(u), np.float32)
            return x if x != x else r
        return rbf16
    return lambda x: _xround(x, 7, -126, _BF16_MAX, 0)


@register_jitable
def _xround_odd(t, e):
    if e != 0 and t - t == 0 and (_xbits64(t) & 1) == 0:
        return np.nextafter(t, np.inf if e > 0 else -np.inf)
    return t


@register_jitable
def _xfma64(a, b, c):
    """a*b + c rounded once (Dekker two-product, two-sum, tail rounded to odd)."""
    p = a * b
    split = 134217729.0
    t = a * split
    ah = t - (t - a)
    al = a - ah
    t = b * split
    bh = t - (t - b)
    bl = b - bh
    err = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    s = p + c
    bb = s - p
    e2 = (p - (s - bb)) + (c - bb)
    tail = e2 + err
    bb = tail - e2
    e3 = (e2 - (tail - bb)) + (err - bb)
    r = s + _xround_odd(tail, e3)
    if r - r != 0.0:  # inf/NaN operands or overflow: the plain sum
        return s
    if r == 0.0:
        return p if (c == 0.0 and a != 0.0 and b != 0.0) else p + c
    return r


def _xfma32(a, b, c):
    """f32 a*b + c rounded once.  This body (the exact product in f64, the sum's error
    rounded to odd) is what plain Python and CUDA run; numba on the CPU compiles the
    `_fma32_llvm` overload below instead: LLVM's fma intrinsic, exact and ~100x faster."""
    p = np.float64(a) * np.float64(b)
    cv = np.float64(c)
    s = p + cv
    if s == 0.0 or s - s != 0.0:
        return np.float32(s)
    bb = s - p
    e = (p - (s - bb)) + (cv - bb)
    return np.float32(_xround_odd(s, e))


@intrinsic
def _llvm_fma_f32(typingctx, a, b, c):
    """llvm.fma.f32: one rounding (the hardware FMA, else libm's correctly rounded fmaf)."""
    if not all(isinstance(t, types.Float) and t.bitwidth == 32 for t in (a, b, c)):
        return None

    def codegen(context, builder, sig, args):
        flt = llvm_ir.FloatType()
        fn = builder.module.declare_intrinsic(
            "llvm.fma", [flt], fnty=llvm_ir.FunctionType(flt, [flt, flt, flt]))
        return builder.call(fn, args)
    return types.float32(types.float32, types.float32, types.float32), codegen


@overload(_xfma32)
def _fma32_llvm(a, b, c):
    return lambda a, b, c: _llvm_fma_f32(np.float32(a), np.float32(b), np.float32(c))
