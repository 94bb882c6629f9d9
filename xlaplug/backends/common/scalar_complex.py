"""Complex helpers of the scalar op table (numba register_jitable): XLA:CPU's FMA-contracted
complex multiply and Smith division, and its |z| (the exact FMAs are in
scalar_float.py)."""
from __future__ import annotations

import math

import numpy as np
from numba.extending import register_jitable

from .scalar_float import _xfma32, _xfma64, _xftz32, _xftz64


@register_jitable
def _xfmaw(a, b, c, is32):
    if is32:  # f32 operands held as float64
        return np.float64(_xfma32(a, b, c))
    return _xfma64(a, b, c)


@register_jitable
def _xcflush64(z):
    return complex(_xftz32(np.float32(z.real)), _xftz32(np.float32(z.imag)))


@register_jitable
def _xcmul64(x, y):
    a, b, c, d = x.real, x.imag, y.real, y.imag
    re = _xftz32(_xfma32(a, c, -_xftz32(b * d)))
    im = _xftz32(_xfma32(b, c, _xftz32(a * d)))
    return np.complex64(complex(re, im))


@register_jitable
def _xcmul128(x, y):
    a, b, c, d = x.real, x.imag, y.real, y.imag
    re = _xftz64(_xfma64(a, c, -_xftz64(b * d)))
    im = _xftz64(_xfma64(b, c, _xftz64(a * d)))
    return complex(re, im)


@register_jitable
def _xcdiv(a_r, a_i, b_r, b_i, is32):
    """XLA's complex division: Smith's algorithm with FMAs, and its corner cases."""
    inf = np.inf
    rbi = np.float64(np.float32(b_r / b_i)) if is32 else b_r / b_i
    ibr = np.float64(np.float32(b_i / b_r)) if is32 else b_i / b_r
    if abs(b_r) < abs(b_i):
        den = _xfmaw(rbi, b_r, b_i, is32)
        c_r = _xfmaw(rbi, a_r, a_i, is32) / den
        c_i = _xfmaw(rbi, a_i, -a_r, is32) / den
    else:
        den = _xfmaw(ibr, b_i, b_r, is32)
        c_r = _xfmaw(ibr, a_i, a_r, is32) / den
        c_i = _xfmaw(-ibr, a_r, a_i, is32) / den
    if c_r == c_r or c_i == c_i:
        return c_r, c_i
    zero = 0.0
    br, bi, ar, ai = abs(b_r), abs(b_i), abs(a_r), abs(a_i)
    if br == 0 and bi == 0 and (a_r == a_r or a_i == a_i):
        s = math.copysign(inf, b_r)
        return s * a_r, s * a_i
    if (ar == inf or ai == inf) and br != inf and bi != inf and b_r == b_r and b_i == b_i:
        x = math.copysign(1.0 if ar == inf else 0.0, a_r)
        y = math.copysign(1.0 if ai == inf else 0.0, a_i)
        return inf * (x * b_r + y * b_i), inf * (y * b_r - x * b_i)
    if (br == inf or bi == inf) and ar != inf and ai != inf and a_r == a_r and a_i == a_i:
        x = math.copysign(1.0 if br == inf else 0.0, b_r)
        y = math.copysign(1.0 if bi == inf else 0.0, b_i)
        return zero * (a_r * x + a_i * y), zero * (a_i * x - a_r * y)
    return c_r, c_i


@register_jitable
def _xcdiv64(x, y):
    r, i = _xcdiv(np.float64(x.real), np.float64(x.imag), np.float64(y.real),
                  np.float64(y.imag), True)
    return np.complex64(complex(_xftz32(np.float32(r)), _xftz32(np.float32(i))))


@register_jitable
def _xcdiv128(x, y):
    r, i = _xcdiv(x.real, x.imag, y.real, y.imag, False)
    return complex(_xftz64(r), _xftz64(i))


@register_jitable
def _xcabs(re, im):
    """XLA's |z|: max * sqrt(1 + (min/max)^2), with min when that is NaN."""
    ar, ai = abs(re), abs(im)
    if ar != ar:
        return ar
    if ai != ai:
        return ai
    mx = ar if ar >= ai else ai
    mn = ai if ar >= ai else ar
    d = mn / mx if mx != 0 else np.nan
    r = mx * math.sqrt(d * d + 1.0)
    return mn if r != r else r
