"""Binary arithmetic kernels (XLA:CPU semantics; see elementwise.py): add, subtract,
multiply, divide, remainder, power and atan2 on every element type.  The unary float
functions are elementwise_math.py's.

pow is C's pow (powf for f32 and the narrow floats widened to it), with XLA's reading of
subnormal bases; f32 atan2 is libm's atan2f, as XLA calls it.  Integer
divide/remainder/power run as numba loops over the SCALAR_OPS helpers (elementwise_loops.py),
which carry XLA's rules for zero divisors, INT_MIN / -1 and negative exponents.
"""
from __future__ import annotations

import math

import numpy as np

from ..registry import kernel
from .elementwise import (F32, F64, bits, et, fin, flush, fout, iin, iout, is_complex, is_int,
                          is_signed, result)
from . import elementwise_complex as C
from . import elementwise_loops as L


def _int_wide(x, t):
    """Integer values of type t widened to int64 (signed) / uint64 (unsigned)."""
    return iin(x, t).astype(np.int64 if is_signed(t) else np.uint64)


def _int_divide(a, b, t, rem: bool):
    """XLA: x / 0 = -1 (all ones), x % 0 = x, INT_MIN / -1 = INT_MIN, INT_MIN % -1 = 0;
    otherwise C's truncating division (numba loop over the SCALAR_OPS helpers)."""
    shape = np.shape(a)
    if is_signed(t):
        x, y = L.flat(iin(a, t), np.int64), L.flat(iin(b, t), np.int64)
        minv = np.int64(-(1 << (bits(t) - 1)))
        r = L.srem(x, y, minv) if rem else L.sdiv(x, y, minv)
    else:
        x, y = L.flat(iin(a, t), np.uint64), L.flat(iin(b, t), np.uint64)
        r = L.urem(x, y) if rem else L.udiv(x, y, np.uint64((1 << bits(t)) - 1))
    return r.reshape(shape)


def _int_power(a, e, t):
    """XLA: square-and-multiply over the exponent's low 6 bits; a negative exponent (its bits
    read as signed) gives 1 for base 1, +-1 for base -1, else 0."""
    w = bits(t)
    mask = np.uint64((1 << w) - 1)
    p = L.flat(iin(a, t), np.uint64) & mask
    q = L.flat(iin(e, t), np.uint64) & mask
    return L.ipow(p, q, mask, np.int64(w)).reshape(np.shape(a))  # iout wraps / sign-extends


def _pow(a, b):
    """XLA's pow reads subnormal exponents as they are and every nonzero subnormal base as
    +-2^-150 (f32) / +-2^-1075 (f64) -- its log2 of a subnormal; the result is flushed."""
    aw, bw = a.astype(F64), b.astype(F64)
    if a.dtype == F32:  # XLA: libm's powf (glibc's is not f64 pow rounded: 1 in 1,400 differ)
        r = L.fpow(L.flat(a, F32), L.flat(b, F32)).reshape(a.shape).astype(F64)
    else:
        r = L.fpow(L.flat(aw, F64), L.flat(bw, F64)).reshape(aw.shape)
    den = (a != 0) & (flush(a) == 0)
    if den.any():
        wide = np.float64 if a.dtype == F32 else np.longdouble
        mag = np.exp2(wide(-150.0 if a.dtype == F32 else -1075.0) * bw.astype(wide)).astype(F64)
        integral = np.floor(bw) == bw
        odd = integral & (np.abs(bw) < 2.0 ** 53) & (np.fmod(bw, 2.0) != 0)
        d = np.where(aw < 0, np.where(integral, np.where(odd, -mag, mag), np.nan), mag)
        r = np.where(den, d, r)
    return r.astype(a.dtype)


FLOAT_BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "atan2": lambda a, b: _atan2(a, b),
}


_ATAN2_LOOPS: dict = {}


def _atan2(a, b):
    """XLA:CPU calls libm's atan2f (f32) and atan2 (f64); numba's math.atan2 does the same
    per dtype (numpy's arctan2 is its own SIMD code: 1 in 12 f64 results differ)."""
    loop = _ATAN2_LOOPS.get("loop")
    if loop is None:
        from numba import njit

        @njit(nogil=True)
        def loop(a, b, out):
            for i in range(a.shape[0]):
                out[i] = math.atan2(a[i], b[i])
        _ATAN2_LOOPS["loop"] = loop
    a, b = np.broadcast_arrays(a, b)
    out = np.empty(a.size, a.dtype)
    loop(np.ascontiguousarray(a).reshape(-1), np.ascontiguousarray(b).reshape(-1), out)
    return out.reshape(a.shape)


@kernel("add", "subtract", "multiply", "divide", "remainder", "power", "atan2")
def _binary(ins, args, ctx):
    op = ins.opcode
    t = et(ins, 0)
    a, b = np.asarray(args[0]), np.asarray(args[1])
    with np.errstate(all="ignore"):
        if t == "pred":
            if op == "add":
                return result(ins, a | b)
            if op == "multiply":
                return result(ins, a & b)
            raise ValueError(f"{op} is not defined on pred")
        if is_int(t):
            if op in ("divide", "remainder"):
                return result(ins, iout(_int_divide(a, b, t, op == "remainder"), t))
            if op == "power":
                return result(ins, iout(_int_power(a, b, t), t))
            if op == "atan2":
                raise ValueError("atan2 is not defined on integers")
            fn = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply}[op]
            if a.dtype == b.dtype and a.dtype.itemsize * 8 == bits(t):  # numpy wraps
                return result(ins, fn(a, b))
            return result(ins, iout(fn(_int_wide(a, t), _int_wide(b, t)), t))
        if is_complex(t):
            return result(ins, C.apply(op, ins, [a, b]))
        if op == "remainder":  # exact fmod; only the divisor is read as zero when subnormal
            return result(ins, fout(np.fmod(fin(a, t, daz=False), fin(b, t)), t, ftz=False))
        if op == "power":
            return result(ins, fout(_pow(fin(a, t, daz=False), fin(b, t, daz=False)), t))
        return result(ins, fout(FLOAT_BINARY[op](fin(a, t), fin(b, t)), t))
