"""XLA's complex functions as scalar helpers (exp, expm1, log, log1p, sqrt, rsqrt, sin, cos,
tan, tanh, sign, pow): the one formula of each, on (re, im) parts, with the conventions
and primitives of scalar_complex.py (its docstring says who calls them and how)."""
from __future__ import annotations

import math

import numpy as np
from numba.extending import register_jitable

from .scalar_complex import (_yabs_parts, _yatan2, _ycabs, _ycos, _yexp, _yexpm1, _yfl,
                             _yfma, _ylog, _ylog1p, _ypow, _yq, _ysin)
from .scalar_float_approx32 import _xexpm1_32, _xlog1p32, _xlog32
from .scalar_float_math import _xfmax, _xfmin
from .scalar_float_round import _xftz32

# cos(x) - 1 for |x|^2 <= 0.61685 (Cephes), as XLA evaluates it
_Y_C0 = 4.7377507964246204691685E-14
_Y_C1 = -1.1470284843425359765671E-11
_Y_C2 = 2.0876754287081521758361E-9
_Y_C3 = -2.7557319214999787979814E-7
_Y_C4 = 2.4801587301570552304991E-5
_Y_C5 = -1.3888888888888872993737E-3
_Y_C6 = 4.1666666666666666609054E-2


@register_jitable
def _ylogq(x, is32):
    """log of a component, rounded to its type: for c64 XLA's own f32 log (the f32 log
    op's helper; operands denormals-are-zero), for c128 libm's."""
    if is32:
        return np.float64(_xlog32(_xftz32(np.float32(x))))
    return _ylog(x)


@register_jitable
def _ylog1pq(x, is32):
    """log1p of a component: XLA's f32 log1p for c64, libm's for c128."""
    if is32:
        return np.float64(_xlog1p32(_xftz32(np.float32(x))))
    return _ylog1p(x)


@register_jitable
def _ycexp(a, b, is32):
    e = _yq(_yexp(a), is32)
    return _yq(e * _yq(_ycos(b), is32), is32), _yq(e * _yq(_ysin(b), is32), is32)


@register_jitable
def _yclog(a, b, is32):
    return _ylogq(_ycabs(a, b, is32), is32), _yq(_yatan2(b, a), is32)


@register_jitable
def _ycsqrt(a, b, is32):
    mn, mx, s = _yabs_parts(a, b, is32)
    r = _yq(_yq(np.sqrt(mx), is32) * _yq(_ypow(s, np.float64(0.25)), is32), is32)
    if r != r:
        r = mn
    t = _yq(_yq(_yatan2(b, a), is32) * np.float64(0.5), is32)
    c = _yq(_ycos(t), is32)
    sn = _yq(_ysin(t), is32)
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


@register_jitable
def _ycrsqrt(a, b, is32):
    mn, mx, s = _yabs_parts(a, b, is32)
    one = np.float64(1.0)
    r = _yq(_yq(one / _yq(np.sqrt(mx), is32), is32)
            * _yq(one / _yq(np.sqrt(_yq(np.sqrt(s), is32)), is32), is32), is32)
    if r != r:
        r = _yq(one / _yq(np.sqrt(mn), is32), is32)
    t = _yq(_yq(_yatan2(b, a), is32) * np.float64(-0.5), is32)
    re = _yq(r * _yq(_ycos(t), is32), is32)
    im = _yq(r * _yq(_ysin(t), is32), is32)
    inf = np.float64(np.inf)
    if a == 0 and b == 0:
        return inf, np.float64(np.nan)
    if (abs(b) == inf and a != a) or abs(a) == inf:
        return np.float64(math.copysign(0.0, a)), -np.float64(math.copysign(0.0, b))
    return re, im


@register_jitable
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
        return _yq(_yq(_ycos(x), is32) - np.float64(1.0), is32)
    return _yq(_yq(_yq(xx * xx, is32) * p, is32) + _yq(np.float64(-0.5) * xx, is32), is32)


@register_jitable
def _ycexpm1(a, b, is32):
    # XLA: expm1(a) * cos(b) + cosm1(b) (the multiply-add contracted into an FMA)
    # + i (expm1(a) + 1) sin(b).  For c64 expm1 is XLA's f32 one (the f32
    # exponential-minus-one op's helper, its own polynomials: the same bits on every
    # path); for c128 libm's, as the other c128 primitives (XLA's f64 expm1 goes through
    # exp and tanh, which numpy, numba and CUDA's libdevice round differently).
    em1 = np.float64(_xexpm1_32(np.float32(a))) if is32 else _yexpm1(a)
    cm1 = _ycosm1(b, is32)
    one = np.float64(1.0)
    ea = _yq(em1 + one, is32)
    re = _yfma(em1, _yq(cm1 + one, is32), cm1, is32)
    im = np.float64(0.0) if b == 0 else _yq(ea * _yq(_ysin(b), is32), is32)
    return re, im


@register_jitable
def _yclog1p(a, b, is32):
    one = np.float64(1.0)
    a1 = _yq(a + one, is32)
    aa1 = abs(a1)
    ab = abs(b)
    mx = _xfmax(aa1, ab)
    mn = _xfmin(aa1, ab)
    mx_m1 = a if a1 > ab else _yq(mx - one, is32)
    ratio = _yq(mn / mx, is32)
    r = _yq(_yq(np.float64(0.5) * _ylog1pq(_yq(ratio * ratio, is32), is32), is32)
            + _ylog1pq(mx_m1, is32), is32)
    if r != r:
        r = mn
    return r, _yq(_yatan2(b, a1), is32)


@register_jitable
def _ycsincos(x, y, is32, is_sin):
    half = np.float64(0.5)
    ey = _yq(_yexp(y), is32)
    hp = _yq(half * ey, is32)
    hn = _yq(half / ey, is32)
    sx = _yq(_ysin(x), is32)
    cx = _yq(_ycos(x), is32)
    sinh = _yq(hp - hn, is32)
    cosh = _yq(hp + hn, is32)
    if is_sin:
        return _yq(sx * cosh, is32), _yq(cx * sinh, is32)
    return _yq(cx * cosh, is32), -_yq(sx * sinh, is32)


@register_jitable
def _yctanh(a, b, is32):
    one = np.float64(1.0)
    four = np.float64(4.0)
    inf = np.float64(np.inf)
    two_a = _yq(a + a, is32)
    e2m1 = _yq(_yexpm1(two_a), is32)
    en2m1 = _yq(_yexpm1(-two_a), is32)
    real_num = _yq(e2m1 - en2m1, is32)
    cb = _yq(_ycos(b), is32)
    sb = _yq(_ysin(b), is32)
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


@register_jitable
def _yctan(a, b, is32):
    re, im = _yctanh(-b, a, is32)  # tan(x+yi) = -i * tanh(-y + xi)
    return im, -re


@register_jitable
def _ycsign(a, b, is32):
    r = _ycabs(a, b, is32)
    if r == 0:
        return np.float64(0.0), np.float64(0.0)
    return _yq(a / r, is32), _yq(b / r, is32)


@register_jitable
def _ycpow(a, b, c, d, is32):
    zero = np.float64(0.0)
    one = np.float64(1.0)
    inf = np.float64(np.inf)
    ab = _ycabs(a, b, is32)
    abs_to_c = _yq(_ypow(ab, c), is32)
    arg = _yq(_yatan2(b, a), is32)
    coeff = _yq(abs_to_c * _yq(_yexp(_yq(-d * arg, is32)), is32), is32)
    q = _yfma(c, arg, _yfl(_yq(d * _ylogq(ab, is32), is32), is32), is32)
    re = _yq(coeff * _yq(_ycos(q), is32), is32)
    im = _yq(coeff * _yq(_ysin(q), is32), is32)
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
