"""XLA's semantics of float ops for the scalar op table (numba register_jitable: callable from
@njit code and from plain Python) where numpy's differ: sign, round-half-away-from-zero, cbrt,
pow (C99 zeros, XLA's reading of subnormal bases; f32 through libm's powf, as XLA),
NaN-propagating min/max with -0 < +0, f32 atan2 through libm's atan2f, and XLA's f64
log1p/expm1 formulas.  The f32 versions of the
transcendentals, which XLA:CPU computes by its own approximations, are in
scalar_float_approx32.py."""
from __future__ import annotations

import math

import numpy as np
from numba.extending import register_jitable

from .scalar_float_round import _xfma64, _xftz32, _xftz64


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
def _xpow32(a, b):
    """f32 pow as XLA:CPU computes it: libm's powf (llvm.pow.f32; glibc's, correctly rounded
    in most cases but not all: 1,403 of 2M f32 results of f64 pow rounded to f32 differ
    from XLA's), the subnormal base read as _xpow reads it.  numba compiles np.power of two
    float32 values to llvm.pow.f32 (plain Python gets numpy's powf: within 1 ULP).  One
    libm call per element, so a loop calling it stays scalar -- as XLA's own loop does: it
    emits llvm.pow.v8f32, which its backend splits into one powf call per lane.  XLA's bits
    are then those of the process's own powf (glibc 2.36's here, two lookup tables in f64;
    newer glibcs may round differently): calling the same powf keeps them on any machine,
    where a packed copy of one glibc's algorithm would not."""
    av = np.float32(a)
    bv = np.float32(b)
    if av != 0.0 and abs(av) < np.float32(1.1754943508222875e-38):
        return _xpow(av, bv, 1.1754943508222875e-38, -150.0)
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


# f32 maximum and minimum as a flushing loop computes them: each operand as DAZ reads it, its
# subnormals as their signed 0s (max and min pass an operand on as it is, so the flush is
# the operand's own).  Loops under the MXCSR's FTZ and DAZ bits bind these names to XLA's
# own instructions instead (cpu/ftz_forms.py), whose DAZ the hardware does.
@register_jitable
def _xfmaxd32(a, b):
    return _xfmax(_xftz32(a), _xftz32(b))


@register_jitable
def _xfmind32(a, b):
    return _xfmin(_xftz32(a), _xftz32(b))


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
def _xatan2f(a, b):
    """f32 atan2 as XLA:CPU computes it: it calls libm's atan2f (numba's math.atan2 on two
    float32 values does too; atan2 in f64 rounded to f32 differs in 1 of 6 results).
    CUDA gets its own version (device_helpers.py: libdevice's atan2f, libm's under the
    simulator)."""
    return math.atan2(np.float32(a), np.float32(b))
