"""Float helpers of the scalar op table (numba register_jitable: callable from @njit code and
from plain Python): flushing, narrow-format rounding, XLA's sign/round/pow/min/max/log1p/expm1,
bit views, total-order keys, reduce-precision."""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir as llvm_ir
from numba.core import types
from numba.extending import intrinsic, overload, register_jitable

_TINY32 = np.float32(np.finfo(np.float32).tiny)
_TINY64 = np.float64(np.finfo(np.float64).tiny)


@register_jitable
def _xftz32(x):
    if x != 0 and abs(x) < _TINY32:
        return x * np.float32(0.0)
    return x


@register_jitable
def _xftz64(x):
    if x != 0 and abs(x) < _TINY64:
        return x * np.float64(0.0)
    return x


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
def _xsign(x):
    if x != x or x == 0:
        return x
    return np.float32(1.0) if x > 0 else np.float32(-1.0)


@register_jitable
def _xsign64(x):
    if x != x or x == 0:
        return x
    return 1.0 if x > 0 else -1.0


@register_jitable
def _xround_afz(x):
    t = np.trunc(x)
    if abs(x - t) >= 0.5:
        t += math.copysign(1.0, x)
    return t


@register_jitable
def _xcbrt(x):
    """Cube root, correctly rounded in practice (a Newton step on pow)."""
    v = np.float64(x)
    if v == 0.0 or v != v or abs(v) == np.inf:
        return v
    a = abs(v)
    y = a ** (1.0 / 3.0)
    y = y - (y * y * y - a) / (3.0 * y * y)
    return math.copysign(y, v)


@register_jitable
def _xpow(a, b, tiny, log2den):
    """pow in f64; XLA reads a nonzero subnormal base as +-2^log2den (its log2 of it)."""
    av = np.float64(a)
    bv = np.float64(b)
    if log2den != 0.0 and av != 0.0 and abs(av) < tiny:
        if av < 0.0 and np.floor(bv) != bv:
            return np.nan
        mag = np.exp2(log2den * bv)
        odd = abs(bv) < 9007199254740992.0 and np.floor(bv) == bv and np.fmod(bv, 2.0) != 0.0
        return -mag if (av < 0.0 and odd) else mag
    if av == 0.0 and bv == bv and bv != 0.0:  # C99 pow of zeros (numpy scalars differ)
        odd = abs(bv) < 9007199254740992.0 and np.floor(bv) == bv and np.fmod(bv, 2.0) != 0.0
        if bv > 0.0:
            return av if odd else 0.0
        return math.copysign(np.inf, av) if odd else np.inf
    return np.power(av, bv)


@register_jitable
def _xfmax(a, b):
    if a != a:
        return a
    if b != b:
        return b
    if a == b:
        return b if math.copysign(1.0, a) < 0 else a
    return a if a > b else b


@register_jitable
def _xfmin(a, b):
    if a != a:
        return a
    if b != b:
        return b
    if a == b:
        return a if math.copysign(1.0, a) < 0 else b
    return a if a < b else b


@register_jitable
def _xpoly(x, c0, c1, c2, c3, c4, c5, c6):
    # XLA's EvaluatePolynomial: Horner steps acc * x + c, which XLA:CPU contracts into FMAs
    acc = 0.0
    acc = _xftz64(_xfma64(acc, x, c0))
    acc = _xftz64(_xfma64(acc, x, c1))
    acc = _xftz64(_xfma64(acc, x, c2))
    acc = _xftz64(_xfma64(acc, x, c3))
    acc = _xftz64(_xfma64(acc, x, c4))
    acc = _xftz64(_xfma64(acc, x, c5))
    return _xftz64(_xfma64(acc, x, c6))


@register_jitable
def _xlog1p(x):
    """XLA's log1p: a Cephes rational approximation for |x| < sqrt(2)-1, else log(1+x)."""
    if not abs(x) < 0.41421356237309504880:
        return np.log(_xftz64(x + 1.0))
    xx = _xftz64(x * x)
    p = _xpoly(x, 4.5270000862445199635215E-5, 4.9854102823193375972212E-1,
               6.5787325942061044846969E0, 2.9911919328553073277375E1,
               6.0949667980987787057556E1, 5.7112963590585538103336E1,
               2.0039553499201281259648E1)
    q = _xpoly(x, 1., 1.5062909083469192043167E1, 8.3047565967967209469434E1,
               2.2176239823732856465394E2, 3.0909872225312059774938E2,
               2.1642788614495947685003E2, 6.0118660497603843919306E1)
    small = _xftz64(_xftz64(x * xx) * _xftz64(p / q))
    small = _xftz64(-0.5 * xx + small)
    return x + small


@register_jitable
def _xexpm1(x):
    """XLA's expm1: x when x/2 flushes to 0, exp(x)-1 for |x| > 0.5, else
    tanh(x/2) * (exp(x) + 1)."""
    if _xftz64(x * 0.5) == 0.0:
        return x
    e = _xftz64(np.exp(x))
    if abs(x) > 0.5:
        return e - 1.0
    return _xftz64(_xftz64(np.tanh(_xftz64(x * 0.5))) * _xftz64(e + 1.0))


@register_jitable
def _xpoly32(x, c0, c1, c2, c3, c4, c5, c6):
    # as _xpoly, in f32 (the FMAs matter: 63 of 4,000 log1p results differed without them)
    acc = np.float32(0.0)
    acc = _xftz32(_xfma32(acc, x, np.float32(c0)))
    acc = _xftz32(_xfma32(acc, x, np.float32(c1)))
    acc = _xftz32(_xfma32(acc, x, np.float32(c2)))
    acc = _xftz32(_xfma32(acc, x, np.float32(c3)))
    acc = _xftz32(_xfma32(acc, x, np.float32(c4)))
    acc = _xftz32(_xfma32(acc, x, np.float32(c5)))
    return _xftz32(_xfma32(acc, x, np.float32(c6)))


@register_jitable
def _xlog1p32(x):
    """_xlog1p evaluated in f32 arithmetic, as XLA does for f32."""
    x = np.float32(x)
    if not abs(x) < np.float32(0.41421356237309504880):
        return _xlog32(_xftz32(x + np.float32(1.0)))
    xx = _xftz32(x * x)
    p = _xpoly32(x, 4.5270000862445199635215E-5, 4.9854102823193375972212E-1,
                 6.5787325942061044846969E0, 2.9911919328553073277375E1,
                 6.0949667980987787057556E1, 5.7112963590585538103336E1,
                 2.0039553499201281259648E1)
    q = _xpoly32(x, 1., 1.5062909083469192043167E1, 8.3047565967967209469434E1,
                 2.2176239823732856465394E2, 3.0909872225312059774938E2,
                 2.1642788614495947685003E2, 6.0118660497603843919306E1)
    small = _xftz32(_xftz32(x * xx) * _xftz32(p / q))
    small = _xftz32(np.float32(-0.5) * xx + small)
    return x + small


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


# XLA:CPU's f32 tanh (llvm_ir::EmitFastTanh): x itself below 4e-4 in magnitude, else a
# [13/6] odd rational approximation of the input clamped to +-7.99881172..., its Horner
# steps contracted into FMAs (the clamp at which the approximation is exactly +-1 with FMA).
# Bit for bit XLA's on f32 (tests/test_elementwise.py), f16 and bf16 too (upcast).
_TANH_CLAMP32 = np.float32(7.99881172180175781)
_TANH_P32 = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
             5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
             4.89352455891786e-03)
_TANH_Q32 = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
             4.89352518554385e-03)


@register_jitable(inline="always")
def _xtanh32(x):
    x = np.float32(x)
    if x != x or abs(x) < np.float32(0.0004):
        return x
    c = _TANH_CLAMP32
    xc = c if x > c else (-c if x < -c else x)
    x2 = np.float32(xc * xc)
    p = np.float32(_TANH_P32[0])
    for k in range(1, 7):
        p = _xfma32(x2, p, np.float32(_TANH_P32[k]))
    q = np.float32(_TANH_Q32[0])
    for k in range(1, 4):
        q = _xfma32(x2, q, np.float32(_TANH_Q32[k]))
    return np.float32(np.float32(xc * p) / q)


# XLA:CPU's f32 exp (Eigen's pexp_float, its multiply-adds as FMAs): m = floor(x log2(e) +
# 1/2), r = x - m ln2 in two steps (Cephes' split of ln2), a degree-7 polynomial in r, times
# 2^m; subnormal results flush to zero.  Bit for bit XLA's below x = 88.3763 (0 mismatches
# in 400k inputs over [-120, 88.37]); in the last 0.35 before overflow XLA rounds
# differently (1 ULP) and the correctly rounded value is used there (_xexp32_edge).
# Written without branches or calls (selects, 2^m built from its bits) so that a loop
# calling it vectorizes: every lane computes every case and picks its own.
_EXP_P32 = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
            1.6666665459e-1, 5.0000001201e-1)
_EXP885 = np.float64(np.exp(np.float64(88.5)))
_EXP_LO32 = np.float32(-104.0)
_EXP_HI32 = np.float32(88.3762626647950)
_EXP_INF32 = np.float32(88.72283935546875)


@register_jitable
def _xexp32_edge(x):
    """exp(x) in f64 for f32 x in [88.37, 88.73]: e^88.5 times a degree-12 Taylor
    polynomial of x - 88.5 (relative error ~3e-16; rounded to f32 it equals the correctly
    rounded exp on every f32 input of [88, 89], checked exhaustively)."""
    t = np.float64(x) - 88.5
    p = 1.0 / 479001600.0
    p = p * t + 1.0 / 39916800.0
    p = p * t + 1.0 / 3628800.0
    p = p * t + 1.0 / 362880.0
    p = p * t + 1.0 / 40320.0
    p = p * t + 1.0 / 5040.0
    p = p * t + 1.0 / 720.0
    p = p * t + 1.0 / 120.0
    p = p * t + 1.0 / 24.0
    p = p * t + 1.0 / 6.0
    p = p * t + 0.5
    p = p * t + 1.0
    p = p * t + 1.0
    return p * _EXP885


@register_jitable(inline="always")
def _xexp32(x):
    x = np.float32(x)
    xc = x if x > _EXP_LO32 else _EXP_LO32  # (NaN takes the low clamp; picked out below)
    xc = xc if xc < _EXP_HI32 else _EXP_HI32
    m = np.float32(np.floor(_xfma32(xc, np.float32(1.44269504088896341), np.float32(0.5))))
    r = _xfma32(m, np.float32(-0.693359375), xc)
    r = _xfma32(m, np.float32(2.12194440e-4), r)
    r2 = np.float32(r * r)
    y = np.float32(_EXP_P32[0])
    for k in range(1, 6):
        y = _xfma32(y, r, np.float32(_EXP_P32[k]))
    y = np.float32(_xfma32(y, r2, r) + np.float32(1.0))
    # y * 2^m in f64 (exact; m in [-150, 128]), rounded once to f32
    res = np.float32(np.float64(y) * _xfrom_bits64((np.int64(m) + np.int64(1023)) << np.int64(52)))
    res = res if res >= _TINY32 else np.float32(0.0)
    res = np.float32(_xexp32_edge(x)) if x > _EXP_HI32 else res
    res = np.float32(np.inf) if x > _EXP_INF32 else res
    return x if x != x else res


@register_jitable
def _xatan2f(a, b):
    """f32 atan2 as XLA:CPU computes it: it calls libm's atan2f (numba's math.atan2 on two
    float32 values does too; atan2 in f64 rounded to f32 differs in 1 of 6 results).
    CUDA gets its own version (device_helpers.py: libdevice's atan2f, libm's under the
    simulator)."""
    return math.atan2(np.float32(a), np.float32(b))


# XLA:CPU's f32 log is Cephes' logf as Eigen evaluates it: log(m) for the mantissa
# m - 1 in [sqrt(1/2) - 1, sqrt(2) - 1) by a degree-8 polynomial split in three parts (for
# instruction-level parallelism), multiply-adds fused; log(2) enters in two parts.
_LOG_P32 = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
            1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
            3.3333331174e-1)


@register_jitable
def _xlog32(x):
    """XLA:CPU's f32 log, bit for bit (checked against XLA through jax on 5,000 inputs
    over the whole range).  Subnormal inputs arrive flushed (the caller's DAZ)."""
    x = np.float32(x)
    if x != x or x < 0:
        return np.float32(np.nan)
    if x == 0:
        return np.float32(-np.inf)
    if x == np.float32(np.inf):
        return x
    one = np.float32(1.0)
    bits = _xbits32(x)
    e = np.float32((bits >> 23) - 126)  # x = m 2^e, m in [0.5, 1)
    m = _xfrom_bits32((bits & 0x007FFFFF) | 0x3F000000)
    if m < np.float32(0.707106781186547524):  # to [sqrt(1/2), sqrt(2)): m += m, e -= 1
        e = e - one
        r = np.float32(np.float32(m - one) + m)
    else:
        r = np.float32(m - one)
    r2 = np.float32(r * r)
    r3 = np.float32(r2 * r)
    p = _LOG_P32
    y0 = _xfma32(np.float32(p[0]), r, np.float32(p[1]))
    y1 = _xfma32(np.float32(p[3]), r, np.float32(p[4]))
    y2 = _xfma32(np.float32(p[6]), r, np.float32(p[7]))
    y0 = _xfma32(y0, r, np.float32(p[2]))
    y1 = _xfma32(y1, r, np.float32(p[5]))
    y2 = _xfma32(y2, r, np.float32(p[8]))
    y = _xfma32(y0, r3, y1)
    y = _xfma32(y, r3, y2)
    y = _xfma32(y, r3, np.float32(np.float32(-2.12194440e-4) * e))
    r = _xfma32(np.float32(-0.5), r2, r)
    r = np.float32(r + y)
    return _xfma32(np.float32(0.693359375), e, r)


@register_jitable(inline="always")
def _xlogistic32(x):
    """XLA's logistic in f32 steps: 1 / (1 + exp(-x)), each step flushed."""
    one = np.float32(1.0)
    return one / _xftz32(one + _xftz32(_xexp32(-np.float32(x))))


@register_jitable
def _xexpm1_32(x):
    """_xexpm1 evaluated in f32 arithmetic, as XLA does for f32."""
    x = np.float32(x)
    half = np.float32(0.5)
    if _xftz32(x * half) == 0:
        return x
    e = _xftz32(_xexp32(x))
    if abs(x) > half:
        return e - np.float32(1.0)
    t = _xftz32(_xtanh32(_xftz32(x * half)))
    return _xftz32(t * _xftz32(e + np.float32(1.0)))


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
