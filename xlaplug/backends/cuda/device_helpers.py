"""Device versions of the few scalar helpers generated CUDA code cannot take from the common
scalar modules' source (scalar_cuda.py binds them in its namespace): Python source, one
version for a GPU (libdevice) and one for numba's simulator (numpy / Python's math).

* bit views (`_xbits32`, ...): numba.cuda has no np.empty/view;
* the libm primitives of the complex formulas (common/scalar_complex.LIBM_HELPERS):
  libdevice on a GPU; under the simulator Python's math -- the C library the CPU's numba
  code calls, so the simulator gives the CPU's bits -- with C's results where math raises.
"""
from __future__ import annotations

GPU_BITS = '''
def _xbits32(x):
    return libdevice.float_as_int(np.float32(x))


def _xfrom_bits32(i):
    return libdevice.int_as_float(np.int32(i))


def _xbits64(x):
    return libdevice.double_as_longlong(np.float64(x))


def _xfrom_bits64(i):
    return libdevice.longlong_as_double(np.int64(i))
'''

SIM_BITS = '''
def _xbits32(x):
    return np.array([x], np.float32).view(np.int32)[0]


def _xfrom_bits32(i):
    return np.array([i], np.int32).view(np.float32)[0]


def _xbits64(x):
    return np.array([x], np.float64).view(np.int64)[0]


def _xfrom_bits64(i):
    return np.array([i], np.int64).view(np.float64)[0]
'''
BIT_HELPERS = ("_xbits32", "_xfrom_bits32", "_xbits64", "_xfrom_bits64")

GPU_LIBM = """
def _yexp(x):
    return libdevice.exp(np.float64(x))


def _yexpm1(x):
    return libdevice.expm1(np.float64(x))


def _ylog(x):
    return libdevice.log(np.float64(x))


def _ylog1p(x):
    return libdevice.log1p(np.float64(x))


def _ysin(x):
    return libdevice.sin(np.float64(x))


def _ycos(x):
    return libdevice.cos(np.float64(x))


def _ypow(a, b):
    return libdevice.pow(np.float64(a), np.float64(b))


def _yatan2(a, b):
    return libdevice.atan2(np.float64(a), np.float64(b))


def _xatan2f(a, b):
    return libdevice.atan2f(np.float32(a), np.float32(b))
"""

SIM_LIBM = """
def _yexp(x):
    try:
        return np.float64(math.exp(x))
    except OverflowError:
        return np.float64(math.inf)


def _yexpm1(x):
    try:
        return np.float64(math.expm1(x))
    except OverflowError:
        return np.float64(math.inf)


def _ylog(x):
    if x == 0:
        return np.float64(-math.inf)
    if x < 0:
        return np.float64(math.nan)
    return np.float64(math.log(x))


def _ylog1p(x):
    if x == -1:
        return np.float64(-math.inf)
    if x < -1:
        return np.float64(math.nan)
    return np.float64(math.log1p(x))


def _ysin(x):
    return np.float64(math.nan) if math.isinf(x) else np.float64(math.sin(x))


def _ycos(x):
    return np.float64(math.nan) if math.isinf(x) else np.float64(math.cos(x))


def _ypow(a, b):
    odd = math.isfinite(b) and b == math.floor(b) and math.fmod(b, 2.0) != 0
    try:
        return np.float64(math.pow(a, b))
    except OverflowError:
        return np.float64(-math.inf if a < 0 and odd else math.inf)
    except ValueError:  # 0 ** negative, or a negative base to a non-integer power
        if a == 0:
            return np.float64(math.copysign(math.inf, a) if odd else math.inf)
        return np.float64(math.nan)


def _yatan2(a, b):
    return np.float64(math.atan2(a, b))


def _xatan2f(a, b):
    return np.float32(_LIBM_ATAN2F(float(a), float(b)))
"""
