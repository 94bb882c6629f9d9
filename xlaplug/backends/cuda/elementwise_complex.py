"""XLA's complex formulas as scalar helpers for generated CUDA code (`_y...` names).

These are cpu/elementwise_complex.py's array formulas, step by step, on one value: the same
operations in the same order, each rounded as the CPU's numpy arithmetic rounds it, and
flushed where the CPU flushes.  They are plain Python here; scalar_cuda.py re-defines them in
its CUDA namespace (where `np`/`math` are its float64 stand-ins and `_x...` are the
SCALAR_OPS helpers, as device functions) and makes them device functions.

Convention: components travel as float64; `is32` says the value is a c64 component, so every
arithmetic result is rounded to float32 (`_yq`) -- f32 add/sub/mul/div/sqrt computed in f64
and rounded once equal IEEE f32 operations -- and transcendentals are computed in f64 and
rounded once, as the CPU kernels compute f32 transcendentals.  Helpers return (re, im)
tuples of float64; `_ypack64` / `_ypack128` make the complex result, flushing subnormal
parts as XLA:CPU's output does.
"""
from __future__ import annotations

import math

import numpy as np

from ..common.scalar_float import _xfma32, _xfma64
from ..common.scalar_float import _xfmax, _xfmin

_Y_TINY32 = 1.1754943508222875e-38
_Y_TINY64 = 2.2250738585072014e-308

# cos(x) - 1 for |x|^2 <= 0.61685 (Cephes), as XLA evaluates it
_Y_C0 = 4.7377507964246204691685E-14
_Y_C1 = -1.1470284843425359765671E-11
_Y_C2 = 2.0876754287081521758361E-9
_Y_C3 = -2.7557319214999787979814E-7
_Y_C4 = 2.4801587301570552304991E-5
_Y_C5 = -1.3888888888888872993737E-3
_Y_C6 = 4.1666666666666666609054E-2


def _yq(x, is32):
    """Round to the component precision (float64 either way)."""
    if is32:
        return np.float64(np.float32(x))
    return np.float64(x)


def _yfl(x, is32):
    """Flush a subnormal of the component precision to a signed zero."""
    tiny = _Y_TINY32 if is32 else _Y_TINY64
    if x != 0.0 and abs(x) < tiny:
        return x * np.float64(0.0)
    return x


def _yfma(a, b, c, is32):
    """XLA's contracted a*b + c, rounded once and flushed."""
    if is32:
        return _yfl(np.float64(_xfma32(a, b, c)), True)
    return _yfl(np.float64(_xfma64(a, b, c)), False)


def _yin(z, is32):
    """A complex operand's parts, read with denormals-are-zero."""
    return _yfl(np.float64(z.real), is32), _yfl(np.float64(z.imag), is32)


def _ypack64(re, im):
    return np.complex64(complex(_yfl(np.float64(np.float32(re)), True),
                                _yfl(np.float64(np.float32(im)), True)))


def _ypack128(re, im):
    return np.complex128(complex(_yfl(np.float64(re), False), _yfl(np.float64(im), False)))


def _yabs_parts(re, im, is32):
    ar = abs(re)
    ai = abs(im)
    mx = _xfmax(ar, ai)
    mn = _xfmin(ar, ai)
    div = _yfl(_yq(mn / mx, is32), is32)
    return mn, mx, _yfma(div, div, np.float64(1.0), is32)


def _ycabs(re, im, is32):
    mn, mx, s = _yabs_parts(re, im, is32)
    r = _yq(mx * _yq(np.sqrt(s), is32), is32)
    if r != r:
        return mn
    return r


def _ycexp(a, b, is32):
    e = _yq(np.exp(a), is32)
    return _yq(e * _yq(np.cos(b), is32), is32), _yq(e * _yq(np.sin(b), is32), is32)


def _yclog(a, b, is32):
    return _yq(np.log(_ycabs(a, b, is32)), is32), _yq(math.atan2(b, a), is32)


def _ycsqrt(a, b, is32):
    mn, mx, s = _yabs_parts(a, b, is32)
    r = _yq(_yq(np.sqrt(mx), is32) * _yq(np.power(s, np.float64(0.25)), is32), is32)
    if r != r:
        r = mn
    t = _yq(_yq(math.atan2(b, a), is32) * np.float64(0.5), is32)
    c = _yq(np.cos(t), is32)
    sn = _yq(np.sin(t), is32)
    inf = np.float64(np.inf)
    babs = abs(b)
    if babs == inf or a == inf:
        re = inf
    elif a == -inf:
        re = np.float64(0.0)
    else:
        re = _yq(r * c, is32)
    if babs == inf or a == -inf:
        im = np.float64(math.copysign(inf, b))
    elif r != r:
        im = np.float64(np.nan)
    elif sn == 0:
        im = sn
    else:
        im = _yq(r * sn, is32)
    if r == 0:
        return np.float64(0.0), np.float64(0.0)
    return re, im


def _ycrsqrt(a, b, is32):
    mn, mx, s = _yabs_parts(a, b, is32)
    one = np.float64(1.0)
    r = _yq(_yq(one / _yq(np.sqrt(mx), is32), is32)
            * _yq(one / _yq(np.sqrt(_yq(np.sqrt(s), is32)), is32), is32), is32)
    if r != r:
        r = _yq(one / _yq(np.sqrt(mn), is32), is32)
    t = _yq(_yq(math.atan2(b, a), is32) * np.float64(-0.5), is32)
    re = _yq(r * _yq(np.cos(t), is32), is32)
    im = _yq(r * _yq(np.sin(t), is32), is32)
    inf = np.float64(np.inf)
    if a == 0 and b == 0:
        return inf, np.float64(np.nan)
    if (abs(b) == inf and a != a) or abs(a) == inf:
        return np.float64(math.copysign(0.0, a)), -np.float64(math.copysign(0.0, b))
    return re, im


def _ycosm1(x, is32):
    xx = _yq(x * x, is32)
    p = np.float64(0.0)
    p = _yq(_yq(p * xx, is32) + _Y_C0, is32)
    p = _yq(_yq(p * xx, is32) + _Y_C1, is32)
    p = _yq(_yq(p * xx, is32) + _Y_C2, is32)
    p = _yq(_yq(p * xx, is32) + _Y_C3, is32)
    p = _yq(_yq(p * xx, is32) + _Y_C4, is32)
    p = _yq(_yq(p * xx, is32) + _Y_C5, is32)
    p = _yq(_yq(p * xx, is32) + _Y_C6, is32)
    if xx > _yq(0.61685, is32):
        return _yq(_yq(np.cos(x), is32) - np.float64(1.0), is32)
    return _yq(_yq(_yq(xx * xx, is32) * p, is32) + _yq(np.float64(-0.5) * xx, is32), is32)


def _ycexpm1(a, b, is32):
    em1 = _yq(np.expm1(a), is32)
    cm1 = _ycosm1(b, is32)
    one = np.float64(1.0)
    ea = _yq(em1 + one, is32)
    re = _yq(_yq(em1 * _yq(cm1 + one, is32), is32) + cm1, is32)
    im = np.float64(0.0) if b == 0 else _yq(ea * _yq(np.sin(b), is32), is32)
    return re, im


def _yclog1p(a, b, is32):
    one = np.float64(1.0)
    a1 = _yq(a + one, is32)
    aa1 = abs(a1)
    ab = abs(b)
    mx = _xfmax(aa1, ab)
    mn = _xfmin(aa1, ab)
    mx_m1 = a if a1 > ab else _yq(mx - one, is32)
    ratio = _yq(mn / mx, is32)
    r = _yq(_yq(np.float64(0.5) * _yq(np.log1p(_yq(ratio * ratio, is32)), is32), is32)
            + _yq(np.log1p(mx_m1), is32), is32)
    if r != r:
        r = mn
    return r, _yq(math.atan2(b, a1), is32)


def _ycsincos(x, y, is32, is_sin):
    half = np.float64(0.5)
    ey = _yq(np.exp(y), is32)
    hp = _yq(half * ey, is32)
    hn = _yq(half / ey, is32)
    sx = _yq(np.sin(x), is32)
    cx = _yq(np.cos(x), is32)
    sinh = _yq(hp - hn, is32)
    cosh = _yq(hp + hn, is32)
    if is_sin:
        return _yq(sx * cosh, is32), _yq(cx * sinh, is32)
    return _yq(cx * cosh, is32), -_yq(sx * sinh, is32)


def _yctanh(a, b, is32):
    one = np.float64(1.0)
    four = np.float64(4.0)
    inf = np.float64(np.inf)
    two_a = _yq(a + a, is32)
    e2m1 = _yq(np.expm1(two_a), is32)
    en2m1 = _yq(np.expm1(-two_a), is32)
    real_num = _yq(e2m1 - en2m1, is32)
    cb = _yq(np.cos(b), is32)
    sb = _yq(np.sin(b), is32)
    imag_num = _yq(four * _yq(cb * sb, is32), is32)
    exp_sum_m2 = _yq(e2m1 + en2m1, is32)
    denom = _yfma(_yfl(_yq(cb * cb, is32), is32), four, exp_sum_m2, is32)
    if exp_sum_m2 == inf:
        re = np.float64(math.copysign(one, a))
    else:
        re = _yq(real_num / denom, is32)
    im = _yq(imag_num / denom, is32)
    a_inf = abs(a) == inf
    bad_b = not (abs(b) < inf)
    if bad_b and not a_inf and a == a:
        re = np.float64(np.nan)
    if bad_b and not a_inf:
        im = np.float64(np.nan)
    if a_inf and imag_num != imag_num:
        im = np.float64(math.copysign(0.0, b))
    if a != a and b == 0:
        im = b
    return re, im


def _yctan(a, b, is32):
    re, im = _yctanh(-b, a, is32)  # tan(x+yi) = -i * tanh(-y + xi)
    return im, -re


def _ycsign(a, b, is32):
    r = _ycabs(a, b, is32)
    if r == 0:
        return np.float64(0.0), np.float64(0.0)
    return _yq(a / r, is32), _yq(b / r, is32)


def _ycpow(a, b, c, d, is32):
    zero = np.float64(0.0)
    one = np.float64(1.0)
    inf = np.float64(np.inf)
    ab = _ycabs(a, b, is32)
    abs_to_c = _yq(np.power(ab, c), is32)
    arg = _yq(math.atan2(b, a), is32)
    coeff = _yq(abs_to_c * _yq(np.exp(_yq(-d * arg, is32)), is32), is32)
    q = _yfma(c, arg, _yfl(_yq(d * _yq(np.log(ab), is32), is32), is32), is32)
    re = _yq(coeff * _yq(np.cos(q), is32), is32)
    im = _yq(coeff * _yq(np.sin(q), is32), is32)
    if ab == 0 and d == 0 and zero <= c:
        re = one if c == 0 else zero
        im = zero
    if (c == 0 and d == 0) or (a == one and b == 0):
        re = one
        im = zero
    if a == inf and b == 0 and d == 0:
        if c > 0:
            re = inf
        elif c < 0:
            re = zero
        if c != 0:
            im = zero
    return re, im
