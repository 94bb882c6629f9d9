"""XLA:CPU's own f32 approximations of transcendentals for the scalar op table (numba
register_jitable: callable from @njit code and from plain Python), bit for bit: exp, log,
tanh and logistic (Eigen's / LLVM's polynomials, multiply-adds fused), and log1p/expm1
evaluated in f32 arithmetic.  numpy's and libm's f32 results differ from XLA's in the last
place, which these reproduce; f64 goes to libm (scalar_float_math.py for log1p/expm1)."""
from __future__ import annotations

import numpy as np
from numba.extending import register_jitable

from .scalar_inline import inlined

from .scalar_float_bits import _xbits32, _xfrom_bits32
from .scalar_float_round import _xfma32, _xftz32


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


@inlined
def _xlog1p32(x):
    """_xlog1p evaluated in f32 arithmetic, as XLA does for f32.  Both forms are computed and
    one is selected (no early return), and the function is inlined into its loop: a branch or
    a call left in the loop keeps it scalar (tests/test_fused_vectorize.py)."""
    x = np.float32(x)
    large = _xlog32(_xftz32(x + np.float32(1.0)))
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
    return x + small if abs(x) < np.float32(0.41421356237309504880) else large


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


@inlined
def _xhorner32(x, coeffs):
    """coeffs[0] x^n + ... + coeffs[n] by Horner's rule in f32, each step one FMA (the
    contracted form XLA's polynomials take)."""
    y = np.float32(coeffs[0])
    for k in range(1, len(coeffs)):
        y = _xfma32(x, y, np.float32(coeffs[k]))
    return y


@inlined
def _xtanh32(x):
    x = np.float32(x)
    if x != x or abs(x) < np.float32(0.0004):
        return x
    c = _TANH_CLAMP32
    xc = c if x > c else (-c if x < -c else x)
    x2 = np.float32(xc * xc)
    p = _xhorner32(x2, _TANH_P32)
    q = _xhorner32(x2, _TANH_Q32)
    return np.float32(np.float32(xc * p) / q)


# XLA:CPU's f32 exp (Eigen's pexp_float, its multiply-adds as FMAs): m = floor(x log2(e) +
# 1/2) at most 127, r = x - m ln2 in two steps (Cephes' split of ln2), a degree-7 polynomial
# in r, times 2^m; subnormal results flush to zero.  Above x = 88.376 m stays 127, so r
# runs past ln2/2 and the polynomial drifts (up to 6 ULP from the correctly rounded exp at
# the overflow): that drift is XLA's, and reproduced, bit for bit.  Written without
# branches or calls (selects; 2^m built from its bits) so that a loop calling it vectorizes
# in f32 lanes: every lane computes every case and picks its own.  y * 2^m is one f32
# product: exact for a normal result (an f32 times a power of two), inf past the overflow.
_EXP_P32 = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
            1.6666665459e-1, 5.0000001201e-1)
_EXP_LO32 = np.float32(-104.0)
_EXP_INF32 = np.float32(88.72283935546875)
_ONE_BELOW32 = np.float32(1.0 - 2.0 ** -24)  # the largest f32 below 1


@inlined
def _xexp32(x):
    x = np.float32(x)
    xc = x if x > _EXP_LO32 else _EXP_LO32  # (NaN takes the low clamp; picked out below)
    xc = xc if xc < _EXP_INF32 else _EXP_INF32
    m = np.float32(np.floor(_xfma32(xc, np.float32(1.44269504088896341), np.float32(0.5))))
    m = m if m < np.float32(127.0) else np.float32(127.0)
    r = _xfma32(m, np.float32(-0.693359375), xc)
    r = _xfma32(m, np.float32(2.12194440e-4), r)
    r2 = np.float32(r * r)
    y = _xhorner32(r, _EXP_P32)
    y = np.float32(_xfma32(y, r2, r) + np.float32(1.0))
    # m < -126: the result is below 2^-125.5, a subnormal: flushed.  y is in [0.70, 1.42]
    # there, so y 2^m is normal for m >= -125, and for m = -126 where y >= 1 - 2^-24 (the
    # product rounds to 2^-126 from there up): those are kept, and every other result is
    # 0 -- decided before the product, which then scales y = 1 instead of a flushed one:
    # a product whose result is subnormal takes the CPU's slow path (no FTZ in these loops),
    # and a causal softmax's masked half (-3.4e38, clamped to -104) took it at every
    # element: the transformer block's softmax loop 0.81 -> 0.53 ms on one core.
    mi = np.int32(m)
    e = mi if mi > np.int32(-126) else np.int32(-126)
    keep = (mi > np.int32(-126)) | ((mi == np.int32(-126)) & (y >= _ONE_BELOW32))
    y = y if keep else np.float32(1.0)
    res = np.float32(y * _xfrom_bits32((e + np.int32(127)) << np.int32(23)))
    res = res if keep else np.float32(0.0)
    res = np.float32(np.inf) if x > _EXP_INF32 else res
    return x if x != x else res


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


@inlined
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


# XLA:CPU's f32 erf (xla/codegen/intrinsic/erf.cc, Eigen's rational interpolant): x P(x^2) /
# Q(x^2), odd P of degree 9 and even Q of degree 12, Horner steps as FMAs, one f32 division;
# +-1 (copysign) from |x| >= 3.8325069 on (so erf(3.83) is 1.0000001, as XLA gives).  Bit for
# bit XLA's on f32 with the caller's DAZ/FTZ (every 16th f32 bit pattern, tests/test_erf_pow.py);
# a select, not a branch, so a loop calling it vectorizes (tests/test_fused_vectorize.py).
_ERF_P32 = (0.00022905065861350646, 0.0034082910107109506, 0.050955695062380861,
            0.18520832239976145, 1.128379143519084)
_ERF_Q32 = (-1.1791602954361697e-7, 0.000023547966471313185, 0.0010179625278914885,
            0.014070470171167667, 0.11098505178285362, 0.49746925110067538, 1.0)
_ERF_CLAMP32 = np.float32(3.832506856900711)


@inlined
def _xerf32(x):
    x = np.float32(x)
    x2 = np.float32(x * x)
    p = _xhorner32(x2, _ERF_P32)
    q = _xhorner32(x2, _ERF_Q32)
    r = np.float32(np.float32(x * p) / q)
    one = np.float32(1.0) if x >= np.float32(0.0) else np.float32(-1.0)  # copysign (x not NaN)
    return one if abs(x) >= _ERF_CLAMP32 else r
