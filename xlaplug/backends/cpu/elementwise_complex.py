"""Complex elementwise math, following XLA's elemental IR emitter formulas step by step.

Each function takes and returns complex numpy arrays (c64 or c128); real-valued results
(abs) are component-typed.  Component math uses the same real primitives as the real kernels.
"""
from __future__ import annotations

import numpy as np

from .elementwise import flush
from .elementwise import fma as _fma

F32 = np.dtype(np.float32)


def fma(a, b, c):
    return flush(_fma(a, b, c))


def _f(fn):
    def g(*xs):
        if xs[0].dtype == F32:
            return fn(*(x.astype(np.float64) for x in xs)).astype(F32)
        return fn(*xs)
    return g


exp, log, sin, cos, atan2, power = (_f(np.exp), _f(np.log), _f(np.sin), _f(np.cos),
                                    _f(np.arctan2), _f(np.power))
expm1 = _f(np.expm1)
log1p = _f(np.log1p)


def fmax(a, b):
    """XLA's NaN-propagating max (-0 < +0)."""
    r = np.where(a > b, a, b)
    r = np.where((a == b) & (a == 0), np.where(np.signbit(a), b, a), r)
    return np.where(np.isnan(a), a, np.where(np.isnan(b), b, r))


def fmin(a, b):
    r = np.where(a < b, a, b)
    r = np.where((a == b) & (a == 0), np.where(np.signbit(a), a, b), r)
    return np.where(np.isnan(a), a, np.where(np.isnan(b), b, r))


def _mk(re, im):
    out = np.empty(np.broadcast(re, im).shape, np.result_type(re.dtype, np.complex64))
    out.real, out.imag = re, im
    return out


def _abs_parts(re, im):
    ar, ai = np.abs(re), np.abs(im)
    mx, mn = fmax(ar, ai), fmin(ar, ai)
    div = flush(mn / mx)
    return mn, mx, fma(div, div, re.dtype.type(1))


def cabs(z):
    mn, mx, s = _abs_parts(z.real, z.imag)
    r = mx * np.sqrt(s)
    return np.where(np.isnan(r), mn, r)


def _sqrt_abs(re, im):
    mn, mx, s = _abs_parts(re, im)
    r = np.sqrt(mx) * power(s, np.full_like(s, 0.25))
    return np.where(np.isnan(r), mn, r)


def _rsqrt_abs(re, im):
    mn, mx, s = _abs_parts(re, im)
    one = re.dtype.type(1)
    r = (one / np.sqrt(mx)) * (one / np.sqrt(np.sqrt(s)))
    return np.where(np.isnan(r), one / np.sqrt(mn), r)


def cexp(z):
    e = exp(z.real)
    return _mk(e * cos(z.imag), e * sin(z.imag))


def clog(z):
    return _mk(log(cabs(z)), atan2(z.imag, z.real))


def csqrt(z):
    a, b = z.real, z.imag
    r = _sqrt_abs(a, b)
    t = atan2(b, a) * a.dtype.type(0.5)
    c, s = cos(t), sin(t)
    inf = a.dtype.type(np.inf)
    zero = a.dtype.type(0)
    babs = np.abs(b)
    re = np.where((babs == inf) | (a == inf), inf,
                  np.where((a == -inf) & (babs != inf), zero, r * c))
    im = np.where((babs == inf) | (a == -inf), np.copysign(inf, b),
                  np.where(np.isnan(r), a.dtype.type(np.nan), np.where(s == 0, s, r * s)))
    return np.where(r == 0, _mk(np.zeros_like(a), np.zeros_like(a)), _mk(re, im))


def crsqrt(z):
    a, b = z.real, z.imag
    r = _rsqrt_abs(a, b)
    t = atan2(b, a) * a.dtype.type(-0.5)
    re, im = r * cos(t), r * sin(t)
    inf, zero, nan = a.dtype.type(np.inf), a.dtype.type(0), a.dtype.type(np.nan)
    zz = (a == 0) & (b == 0)
    special = ((np.abs(b) == inf) & np.isnan(a)) | (np.abs(a) == inf)
    re = np.where(zz, inf, np.where(special, np.copysign(zero, a), re))
    im = np.where(zz, nan, np.where(special, -np.copysign(zero, b), im))
    return _mk(re, im)


def _cosm1(x):
    coeffs = (4.7377507964246204691685E-14, -1.1470284843425359765671E-11,
              2.0876754287081521758361E-9, -2.7557319214999787979814E-7,
              2.4801587301570552304991E-5, -1.3888888888888872993737E-3,
              4.1666666666666666609054E-2)
    xx = x * x
    p = np.zeros_like(x)
    for c in coeffs:
        p = p * xx + x.dtype.type(c)
    small = xx * xx * p + x.dtype.type(-0.5) * xx
    return np.where(xx > x.dtype.type(0.61685), cos(x) - x.dtype.type(1), small)


def cexpm1(z):
    a, b = z.real, z.imag
    em1 = expm1(a)
    cm1 = _cosm1(b)
    ea = em1 + a.dtype.type(1)
    return _mk(em1 * (cm1 + a.dtype.type(1)) + cm1, np.where(b == 0, a.dtype.type(0), ea * sin(b)))


def clog1p(z):
    a, b = z.real, z.imag
    one = a.dtype.type(1)
    a1 = a + one
    aa1, ab = np.abs(a1), np.abs(b)
    mx, mn = fmax(aa1, ab), fmin(aa1, ab)
    mx_m1 = np.where(a1 > ab, a, mx - one)
    ratio = mn / mx
    r = a.dtype.type(0.5) * log1p(ratio * ratio) + log1p(mx_m1)
    return _mk(np.where(np.isnan(r), mn, r), atan2(b, a1))


def _sincos(z, is_sin: bool):
    x, y = z.real, z.imag
    half = x.dtype.type(0.5)
    ey = exp(y)
    hp, hn = half * ey, half / ey
    sx, cx = sin(x), cos(x)
    sinh, cosh = hp - hn, hp + hn
    if is_sin:
        return _mk(sx * cosh, cx * sinh)
    return _mk(cx * cosh, -(sx * sinh))


def _tanh_parts(a, b):
    """tanh(a + bi) as XLA computes it (tan uses tanh(-y + xi) rotated)."""
    one, four = a.dtype.type(1), a.dtype.type(4)
    two_a = a + a
    e2m1, en2m1 = expm1(two_a), expm1(-two_a)
    real_num = e2m1 - en2m1
    cb, sb = cos(b), sin(b)
    imag_num = four * (cb * sb)
    exp_sum_m2 = e2m1 + en2m1
    denom = fma(flush(cb * cb), four, exp_sum_m2)
    inf = a.dtype.type(np.inf)
    re = np.where(exp_sum_m2 == inf, np.copysign(one, a), real_num / denom)
    im = imag_num / denom
    # Corner cases (finite a with b = +-inf or NaN -> NaN; a = +-inf -> +-1 with a signed
    # zero; NaN a with b == 0 -> (NaN, 0)).
    a_inf = np.abs(a) == inf
    nan = a.dtype.type(np.nan)
    bad_b = ~np.isfinite(b)
    re = np.where(bad_b & ~a_inf & ~np.isnan(a), nan, re)
    im = np.where(bad_b & ~a_inf, nan, im)
    im = np.where(a_inf & np.isnan(imag_num), np.copysign(a.dtype.type(0), b), im)
    im = np.where(np.isnan(a) & (b == 0), b, im)
    return re, im


def ctanh(z):
    return _mk(*_tanh_parts(z.real, z.imag))


def ctan(z):
    re, im = _tanh_parts(-z.imag, z.real)  # tan(x+yi) = -i * tanh(-y + xi)
    return _mk(im, -re)


def csign(z):
    r = cabs(z)
    with np.errstate(all="ignore"):
        q = _mk(z.real / r, z.imag / r)
    return np.where(r == 0, np.zeros_like(z), q)


def cmul(x, y):
    a, b, c, d = x.real, x.imag, y.real, y.imag
    return _mk(fma(a, c, -flush(b * d)), fma(b, c, flush(a * d)))


def cdiv(x, y):
    a_r, a_i, b_r, b_i = x.real, x.imag, y.real, y.imag
    t = a_r.dtype.type
    zero, one, inf = t(0), t(1), t(np.inf)
    rbi = flush(b_r / b_i)
    rbi_d = fma(rbi, b_r, b_i)
    ibr = flush(b_i / b_r)
    ibr_d = fma(ibr, b_i, b_r)
    br_abs, bi_abs = np.abs(b_r), np.abs(b_i)
    lt = br_abs < bi_abs
    c_r = np.where(lt, fma(rbi, a_r, a_i) / rbi_d, fma(ibr, a_i, a_r) / ibr_d)
    c_i = np.where(lt, fma(rbi, a_i, -a_r) / rbi_d, fma(-ibr, a_r, a_i) / ibr_d)
    # Corner cases when the result is (NaN, NaN).
    zero_den = (br_abs == 0) & (bi_abs == 0) & (~np.isnan(a_r) | ~np.isnan(a_i))
    inf_b = np.copysign(inf, b_r)
    zd_r, zd_i = inf_b * a_r, inf_b * a_i
    ar_abs, ai_abs = np.abs(a_r), np.abs(a_i)
    ar_inf, ai_inf = ar_abs == inf, ai_abs == inf
    inf_num = (ar_inf | ai_inf) & (br_abs != inf) & (bi_abs != inf) \
        & ~np.isnan(b_r) & ~np.isnan(b_i)
    ars = np.copysign(np.where(ar_inf, one, zero), a_r)
    ais = np.copysign(np.where(ai_inf, one, zero), a_i)
    in_r, in_i = inf * (ars * b_r + ais * b_i), inf * (ais * b_r - ars * b_i)
    br_inf, bi_inf = br_abs == inf, bi_abs == inf
    inf_den = (br_inf | bi_inf) & (ar_abs != inf) & (ai_abs != inf) \
        & ~np.isnan(a_r) & ~np.isnan(a_i)
    brs = np.copysign(np.where(br_inf, one, zero), b_r)
    bis = np.copysign(np.where(bi_inf, one, zero), b_i)
    id_r, id_i = zero * (a_r * brs + a_i * bis), zero * (a_i * brs - a_r * bis)
    nan = np.isnan(c_r) & np.isnan(c_i)
    r = np.where(nan & zero_den, zd_r, np.where(nan & inf_num, in_r,
                                                np.where(nan & inf_den, id_r, c_r)))
    i = np.where(nan & zero_den, zd_i, np.where(nan & inf_num, in_i,
                                                np.where(nan & inf_den, id_i, c_i)))
    return _mk(r, i)


def cpow(x, y):
    a, b, c, d = x.real, x.imag, y.real, y.imag
    t = a.dtype.type
    zero, one, inf = t(0), t(1), t(np.inf)
    ab = cabs(x)
    abs_to_c = power(ab, c)
    arg = atan2(b, a)
    coeff = abs_to_c * exp(-d * arg)
    q = fma(c, arg, flush(d * log(ab)))
    re, im = coeff * cos(q), coeff * sin(q)
    case0 = (ab == 0) & (d == 0) & (zero <= c)
    re = np.where(case0, np.where(c == 0, one, zero), re)
    im = np.where(case0, zero, im)
    case1 = (c == 0) & (d == 0)
    case2 = (a == one) & (b == 0)
    re = np.where(case1 | case2, one, re)
    im = np.where(case1 | case2, zero, im)
    case34 = (a == inf) & (b == 0) & (d == 0)
    re = np.where(case34 & (c > 0), inf, np.where(case34 & (c < 0), zero, re))
    im = np.where(case34 & (c != 0), zero, im)
    return _mk(re, im)


UNARY = {
    "exponential": cexp, "exponential-minus-one": cexpm1, "log": clog,
    "log-plus-one": clog1p, "sqrt": csqrt, "rsqrt": crsqrt,
    "sine": lambda z: _sincos(z, True), "cosine": lambda z: _sincos(z, False),
    "tanh": ctanh, "tan": ctan, "sign": csign,
}

BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": cmul, "divide": cdiv, "power": cpow,
}
