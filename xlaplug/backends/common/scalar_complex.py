"""XLA's complex arithmetic as scalar helpers: the one formula every path uses.

The scalar op table's complex templates (scalar_ops.py) call these and the formulas of
scalar_complex_fn.py, so a complex op computes the same way everywhere: in the CPU's
array kernels (cpu/elementwise_complex.py: numba loops over the templates), in fused loops
and compiled reducers (scalar_codegen.py), and on CUDA (scalar_cuda.py re-defines the
helpers as device functions).  Each follows XLA's elemental IR emitter step by step.

Convention: components travel as float64; `is32` says the value is a c64 component, so
every arithmetic result is rounded to float32 (`_yq`) -- f32 add/sub/mul/div/sqrt computed
in f64 and rounded once equal IEEE f32 operations -- and transcendentals are computed in
f64 and rounded once, as the CPU computes f32 transcendentals.  Operands are read with
denormals-are-zero (`_yre`, `_yim`), helpers return (re, im) tuples of float64, and
`_ypack64` / `_ypack128` make the complex result, flushing subnormal parts as XLA:CPU does.

The transcendental primitives (`_yexp`, `_ylog`, ...) are C's libm functions here and in
CPU numba code; scalar_cuda.py binds them to libdevice on a GPU and to Python's `math`
(the same libm) under the simulator, so the simulator gives the CPU's bits.
"""
from __future__ import annotations

import math

import numpy as np
from numba.extending import register_jitable

from .scalar_float_math import _xfmax, _xfmin
from .scalar_float_round import _xfma32, _xfma64, _xftz32

_Y_TINY32 = 1.1754943508222875e-38
_Y_TINY64 = 2.2250738585072014e-308

# The libm primitives the formulas call (float64 in, float64 out); see the docstring.
LIBM_HELPERS = ("_yexp", "_yexpm1", "_ylog", "_ylog1p", "_ysin", "_ycos", "_ypow", "_yatan2")


@register_jitable
def _yexp(x):
    return np.exp(x)


@register_jitable
def _yexpm1(x):
    return np.expm1(x)


@register_jitable
def _ylog(x):
    return np.log(x)


@register_jitable
def _ylog1p(x):
    return np.log1p(x)


@register_jitable
def _ysin(x):
    return np.sin(x)


@register_jitable
def _ycos(x):
    return np.cos(x)


@register_jitable
def _ypow(a, b):
    return np.power(a, b)


@register_jitable
def _yatan2(a, b):
    return math.atan2(a, b)


@register_jitable
def _yq(x, is32):
    """Round to the component precision (float64 either way)."""
    if is32:
        return np.float64(np.float32(x))
    return np.float64(x)


@register_jitable
def _yfl(x, is32):
    """Flush a subnormal of the component precision to a signed zero."""
    tiny = _Y_TINY32 if is32 else _Y_TINY64
    if x != 0.0 and abs(x) < tiny:
        return x * np.float64(0.0)
    return x


@register_jitable
def _yfma(a, b, c, is32):
    """XLA's contracted a*b + c, rounded once and flushed."""
    if is32:
        return _yfl(np.float64(_xfma32(a, b, c)), True)
    return _yfl(np.float64(_xfma64(a, b, c)), False)


@register_jitable
def _yre(z, is32):
    """A complex operand's real part, read with denormals-are-zero."""
    return _yfl(np.float64(z.real), is32)


@register_jitable
def _yim(z, is32):
    return _yfl(np.float64(z.imag), is32)


@register_jitable
def _ypack64(p):
    return np.complex64(complex(_yfl(np.float64(np.float32(p[0])), True),
                                _yfl(np.float64(np.float32(p[1])), True)))


@register_jitable
def _ypack128(p):
    return np.complex128(complex(_yfl(np.float64(p[0]), False),
                                 _yfl(np.float64(p[1]), False)))


@register_jitable
def _xcflush64(z):
    """A c64 value with its subnormal parts flushed (compares read operands so)."""
    return complex(_xftz32(np.float32(z.real)), _xftz32(np.float32(z.imag)))


@register_jitable
def _ycadd(a, b, c, d, is32):
    return _yq(a + c, is32), _yq(b + d, is32)


@register_jitable
def _ycsub(a, b, c, d, is32):
    return _yq(a - c, is32), _yq(b - d, is32)


@register_jitable
def _ycmul(a, b, c, d, is32):
    """(a+bi)(c+di) with XLA's FMA contraction: re = fma(a, c, -bd), im = fma(b, c, ad)."""
    return (_yfma(a, c, -_yfl(_yq(b * d, is32), is32), is32),
            _yfma(b, c, _yfl(_yq(a * d, is32), is32), is32))


@register_jitable
def _ycdiv(a_r, a_i, b_r, b_i, is32):
    """XLA's complex division: Smith's algorithm with FMAs, then its corner cases when
    both parts are NaN (a zero divisor, an infinite dividend, an infinite divisor)."""
    inf = np.float64(np.inf)
    zero = np.float64(0.0)
    one = np.float64(1.0)
    if abs(b_r) < abs(b_i):
        rbi = _yfl(_yq(b_r / b_i, is32), is32)
        den = _yfma(rbi, b_r, b_i, is32)
        c_r = _yq(_yfma(rbi, a_r, a_i, is32) / den, is32)
        c_i = _yq(_yfma(rbi, a_i, -a_r, is32) / den, is32)
    else:
        ibr = _yfl(_yq(b_i / b_r, is32), is32)
        den = _yfma(ibr, b_i, b_r, is32)
        c_r = _yq(_yfma(ibr, a_i, a_r, is32) / den, is32)
        c_i = _yq(_yfma(-ibr, a_r, a_i, is32) / den, is32)
    if c_r == c_r or c_i == c_i:
        return c_r, c_i
    br, bi, ar, ai = abs(b_r), abs(b_i), abs(a_r), abs(a_i)
    if br == 0 and bi == 0 and (a_r == a_r or a_i == a_i):
        s = math.copysign(inf, b_r)
        return _yq(s * a_r, is32), _yq(s * a_i, is32)
    if (ar == inf or ai == inf) and br != inf and bi != inf and b_r == b_r and b_i == b_i:
        x = math.copysign(one if ar == inf else zero, a_r)
        y = math.copysign(one if ai == inf else zero, a_i)
        return (_yq(inf * _yq(_yq(x * b_r, is32) + _yq(y * b_i, is32), is32), is32),
                _yq(inf * _yq(_yq(y * b_r, is32) - _yq(x * b_i, is32), is32), is32))
    if (br == inf or bi == inf) and ar != inf and ai != inf and a_r == a_r and a_i == a_i:
        x = math.copysign(one if br == inf else zero, b_r)
        y = math.copysign(one if bi == inf else zero, b_i)
        return (_yq(zero * _yq(_yq(a_r * x, is32) + _yq(a_i * y, is32), is32), is32),
                _yq(zero * _yq(_yq(a_i * x, is32) - _yq(a_r * y, is32), is32), is32))
    return c_r, c_i


@register_jitable
def _yabs_parts(re, im, is32):
    ar = abs(re)
    ai = abs(im)
    mx = _xfmax(ar, ai)
    mn = _xfmin(ar, ai)
    div = _yfl(_yq(mn / mx, is32), is32)
    return mn, mx, _yfma(div, div, np.float64(1.0), is32)


@register_jitable
def _ycabs(re, im, is32):
    """XLA's |z|: max * sqrt(1 + (min/max)^2), with min when that is NaN."""
    mn, mx, s = _yabs_parts(re, im, is32)
    r = _yq(mx * _yq(np.sqrt(s), is32), is32)
    if r != r:
        return mn
    return r
