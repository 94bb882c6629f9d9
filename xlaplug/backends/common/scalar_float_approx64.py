"""XLA:CPU's own f64 approximations of exp and tanh for the scalar op table (numba
register_jitable: callable from @njit code and from plain Python), bit for bit.

XLA:CPU emits these two inline (xla/codegen/intrinsic/exp.cc and tanh.cc, Eigen's forms) in
8 lanes; its other f64 transcendentals -- log, sin, cos, tan, erf, pow -- are libm calls, one
per element, which numba's math/np calls reproduce.  Its LLVM backend contracts every
multiply whose product has one use into the add after it (FMAs), so these do too; written
as selects, without branches or calls, so that a loop calling them vectorizes
(tests/test_fused_vectorize.py).  Checked against jax.jit on 5M inputs each (random bit
patterns, dense samples of the working range, the edges): tests/test_elementwise.py.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir as llvm_ir
from numba.core import types
from numba.extending import intrinsic, overload, register_jitable

from .scalar_float_bits import _xfrom_bits64
from .scalar_float_round import _xfma64


def _xfma64v(a, b, c):
    """a*b + c rounded once, as scalar_float_round._xfma64 (its body runs in plain Python and
    on CUDA); numba on the CPU compiles the overload below: llvm.fma.f64, one instruction
    that vectorizes, where _xfma64's exact-arithmetic body has branches."""
    return _xfma64(np.float64(a), np.float64(b), np.float64(c))


@intrinsic
def _llvm_fma_f64(typingctx, a, b, c):
    if not all(isinstance(t, types.Float) and t.bitwidth == 64 for t in (a, b, c)):
        return None

    def codegen(context, builder, sig, args):
        dbl = llvm_ir.DoubleType()
        fn = builder.module.declare_intrinsic(
            "llvm.fma", [dbl], fnty=llvm_ir.FunctionType(dbl, [dbl, dbl, dbl]))
        return builder.call(fn, args)
    return types.float64(types.float64, types.float64, types.float64), codegen


@overload(_xfma64v)
def _fma64_llvm(a, b, c):
    return lambda a, b, c: _llvm_fma_f64(np.float64(a), np.float64(b), np.float64(c))

# exp: x clamped to [lo, hi]; n = floor(x log2(e) + 1/2); g = x - n ln2 (ln2 in two parts);
# exp(g) = 1 + 2 g P(g^2) / (Q(g^2) - g P(g^2)) (Cephes' Pade form); times 2^n in two
# exact steps (Eigen's ldexp: 2^b three times, b = n >> 2, then 2^(n - 3b)); 0 below lo,
# inf above hi, NaN kept.
_EXP_HI64 = 709.782712893384
_EXP_LO64 = -708.3964185322641
_EXP_P64 = (1.26177193074810590878e-4, 3.02994407707441961300e-2, 9.99999999999999999910e-1)
_EXP_Q64 = (3.00198505138664455042e-6, 2.52448340349684104192e-3, 2.27265548208155028766e-1,
            2.00000000000000000009e0)


@register_jitable(inline="always")
def _xexp64(x):
    x = np.float64(x)
    xc = x if x < _EXP_HI64 else _EXP_HI64  # (NaN takes hi: n stays an integer; picked out below)
    xc = xc if xc > _EXP_LO64 else _EXP_LO64
    n = np.floor(_xfma64v(xc, 1.4426950408889634073599, 0.5))
    g = _xfma64v(-n, 0.693145751953125, xc)
    g = _xfma64v(-n, 1.42860682030941723212e-6, g)
    g2 = g * g
    p = _xfma64v(g2, _EXP_P64[0], _EXP_P64[1])
    p = _xfma64v(p, g2, _EXP_P64[2]) * g  # (its product has two uses: not contracted)
    q = _xfma64v(g2, _EXP_Q64[0], _EXP_Q64[1])
    q = _xfma64v(q, g2, _EXP_Q64[2])
    q = _xfma64v(q, g2, _EXP_Q64[3])
    y = _xfma64v(p / (q - p), 2.0, 1.0)
    e = np.int64(n)
    b = e >> np.int64(2)
    c = _xfrom_bits64((b + np.int64(1023)) << np.int64(52))
    r = y * c * c * c * _xfrom_bits64((e - np.int64(3) * b + np.int64(1023)) << np.int64(52))
    r = 0.0 if x < _EXP_LO64 else r
    r = np.inf if x > _EXP_HI64 else r
    return x if x != x else r


# tanh: x clamped to +-17.714196154005176 (where the approximation is exactly +-1 without
# FMAs, as XLA's f64 form is chosen), x P(x^2) / Q(x^2) with P and Q of degree 18, Horner
# steps as FMAs; +-1 (copysign) from |x| >= 20.  No small-x shortcut (f32's has one).
_TANH_CLAMP64 = 17.714196154005176
_TANH_P64 = (2.6158007860482230e-23, 7.6534862268749319e-19, 3.1309488231386680e-15,
             4.2303918148209176e-12, 2.4618379131293676e-09, 6.8644367682497074e-07,
             9.3839087674268880e-05, 5.9809711724441161e-03, 1.5184719640284322e-01, 1.0)
_TANH_Q64 = (6.463747022670968018e-21, 5.782506856739003571e-17, 1.293019623712687916e-13,
             1.123643448069621992e-10, 4.492975677839633985e-08, 8.785185266237658698e-06,
             8.295161192716231542e-04, 3.437448108450402717e-02, 4.851805297361760360e-01, 1.0)


@register_jitable(inline="always")
def _xtanh64(x):
    x = np.float64(x)
    c = _TANH_CLAMP64
    xc = x if not x < -c else -c  # NaN passes through both, as XLA's fast min/max
    xc = xc if not xc > c else c
    x2 = xc * xc
    p = _TANH_P64[0]
    for k in range(1, 10):
        p = _xfma64v(x2, p, _TANH_P64[k])
    q = _TANH_Q64[0]
    for k in range(1, 10):
        q = _xfma64v(x2, q, _TANH_Q64[k])
    r = (xc * p) / q
    one = 1.0 if x >= 0.0 else -1.0  # copysign (x not NaN where it is picked)
    return one if abs(x) >= 20.0 else r
