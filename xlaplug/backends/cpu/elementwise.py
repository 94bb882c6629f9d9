"""Elementwise CPU kernels with XLA:CPU's semantics -- shared machinery and the scalar table.

The kernels live in elementwise_arith.py (binary arithmetic), elementwise_math.py (unary:
transcendental, rounding, sign, abs, negate; complex ops of both in elementwise_complex.py,
from the scalar table's one formula each), elementwise_logic.py (compare, select, clamp,
min/max, bit ops, shifts, popcnt, clz) and elementwise_convert.py (convert, bitcast-convert,
reduce-precision, stochastic-convert, real/imag/complex).  `copy` is data_movement.py's.

SCALAR_OPS (re-exported here, defined in common/scalar_ops.py, whose docstring is the full
contract) maps an opcode to `emit(ScalarSig(result, operands, attrs)) -> str`: a Python
expression template over `{0}`, `{1}`, ... (operand values in SCALAR_COMPUTE_DTYPES) with the
array kernels' exact semantics, for code generators to inline into numba loops; the names it
uses are in SCALAR_NAMESPACE.  common/scalar_codegen.py is its first user.

Semantics shared by all kernels, checked against XLA:CPU through jax:

* Denormals.  XLA:CPU runs with flush-to-zero and denormals-are-zero: f32, f64, bf16 (computed
  in f32) and complex arithmetic -- including compares, min/max, rounding, sign and
  float<->float converts -- reads subnormal inputs as a zero of the same sign and writes
  subnormal results as a signed zero (`flush`).  Not flushed: abs, negate, select,
  bitcast-convert, reduce-precision, is-finite, f32->bf16 and bf16->f32 converts, the
  dividend of remainder (an exact fmod whose divisor is flushed), and sine/tan/f32 tanh/expm1
  of a subnormal (XLA returns x itself).  pow reads a subnormal base as +-2^-150 / 2^-1075.
  f16 and the 8/4-bit floats are normal in f32, so they are never flushed.
* Narrow floats (f16, bf16, f8*, f4e2m1fn) are computed in f32 and rounded back to nearest
  even after each op (XLA evaluates f16 expm1 and logistic in f16 steps, as here).
* Sub-byte integers (s1/s2/s4, u1/u2/u4) are computed in 8 bits and wrapped to their width.
* XLA:CPU contracts a multiply whose only user is an add/subtract into an FMA (`fma` here):
  complex multiply and divide do so inside one op.  Across HLO ops the interpreter cannot see
  it; scalar_jit and fused code generators should contract as XLA does.
"""
from __future__ import annotations

import numpy as np

from ...hlo import dtypes as D
from ...hlo.dtypes import is_signed  # noqa: F401 - the kernels' import point
from .bf16_convert import to_bf16, to_f32

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
F16 = np.dtype(np.float16)

# Float types computed in f32 and rounded back.
NARROW_FLOATS = frozenset(t for t in D.FLOAT_TYPES if t not in ("f32", "f64"))
# Float types whose arithmetic XLA:CPU flushes (FTZ/DAZ).
FLUSHED = frozenset({"f32", "f64", "bf16", "c64", "c128"})
SUB_BYTE_INTS = frozenset({"s1", "s2", "s4", "u1", "u2", "u4"})


def et(ins, i: int | None = None) -> str:
    """Element type of the result (i is None) or of operand i."""
    return (ins.shape if i is None else ins.operands[i].shape).element_type


def is_float(t: str) -> bool:
    return t in D.FLOAT_TYPES


def is_complex(t: str) -> bool:
    return t in D.COMPLEX_TYPES


def is_int(t: str) -> bool:
    return t in D.INTEGRAL_TYPES


def bits(t: str) -> int:
    return D.bit_width(t)


# ---- denormal flushing -------------------------------------------------------------------

def flush(a):
    """Subnormal elements -> zero of the same sign (float or complex arrays; others as is)."""
    a = np.asarray(a)
    if a.dtype.kind == "c":
        re, im = flush(a.real), flush(a.imag)
        if re is a.real and im is a.imag:
            return a
        out = np.empty(a.shape, a.dtype)
        out.real, out.imag = re, im
        return out
    if a.dtype not in (F32, F64):
        return a
    m = np.abs(a) < np.finfo(a.dtype).tiny
    if not m.any():
        return a
    return np.where(m, np.copysign(a.dtype.type(0), a), a)


def _two_sum(x, y):
    s = x + y
    bb = s - x
    return s, (x - (s - bb)) + (y - bb)


def _round_odd(t, e):
    """t + e (t = RN(t + e), e its exact error) rounded to odd: a later rounding to fewer
    bits is then correct (no double rounding)."""
    odd = (t.view(np.int64) & 1) != 0
    return np.where((e != 0) & ~odd & np.isfinite(t), np.nextafter(t, np.where(e > 0, np.inf,
                                                                                 -np.inf)), t)


def fma(a, b, c):
    """a*b + c rounded once, for f32 or f64 arrays (XLA:CPU contracts a multiply whose only
    user is an add/subtract into an FMA).  f32: exact product in f64, the sum rounded to odd,
    then to f32.  f64: Dekker's two-product, two-sum, tail rounded to odd."""
    a, b, c = np.asarray(a), np.asarray(b), np.asarray(c)
    with np.errstate(all="ignore"):
        if a.dtype != F64:
            p = a.astype(F64) * b.astype(F64)
            s, e = _two_sum(p, c.astype(F64))
            r = _round_odd(s, np.where(np.isfinite(s), e, 0.0)).astype(a.dtype)
            return np.where(s == 0, (p + c.astype(F64)).astype(a.dtype), r)
        p = a * b
        split = 134217729.0  # 2^27 + 1
        t = a * split
        ah = t - (t - a)
        al = a - ah
        t = b * split
        bh = t - (t - b)
        bl = b - bh
        err = ((ah * bh - p) + ah * bl + al * bh) + al * bl
        s, e2 = _two_sum(p, c)
        tail, e3 = _two_sum(e2, err)
        tail = _round_odd(tail, np.where(np.isfinite(tail), e3, 0.0))
        r = s + tail
        r = np.where(np.isfinite(r), r, s)  # inf/NaN operands or overflow: the plain sum
        # zero results: a nonzero product that underflowed keeps its sign when c is zero
        return np.where(r == 0, np.where((c == 0) & (a != 0) & (b != 0), p, p + c), r)


# ---- float compute / round-back ---------------------------------------------------------

def fin(x, t: str, daz: bool = True):
    """A float/complex operand of type t -> its compute array (f32 for narrow floats), with
    denormals-are-zero applied where XLA:CPU applies it."""
    x = np.asarray(x)
    if t in ("f32", "f64", "c64", "c128"):
        return flush(x) if daz else x
    if t == "bf16":
        x = to_f32(x)
        return flush(x) if daz else x
    return x.astype(F32)


def fout(r, t: str, ftz: bool = True) -> np.ndarray:
    """A compute result -> an array of element type t (rounding narrow floats, FTZ)."""
    r = np.asarray(r)
    if t in ("f32", "f64", "c64", "c128"):
        r = r.astype(D.to_dtype(t), copy=False)
        return flush(r) if ftz else r
    if t == "bf16":
        r = r.astype(F32, copy=False)
        return to_bf16(flush(r) if ftz else r)
    return to_narrow_float(r, t)


def to_narrow_float(r, t: str) -> np.ndarray:
    """f32/f64 array -> a narrow float type, rounding as XLA:CPU's convert does."""
    r = np.asarray(r)
    dt = D.to_dtype(t)
    with np.errstate(all="ignore"):
        out = r.astype(dt)
    if t == "f4e2m1fn":  # no NaN: XLA writes NaN as -0 (0x8); ml_dtypes writes +0
        nan = np.isnan(r)
        if nan.any():
            out = np.where(nan, np.array(-0.0, dt), out)
    return out


# ---- integers ----------------------------------------------------------------------------

def int_compute_dtype(t: str) -> np.dtype:
    """Numpy dtype integer arithmetic on t runs in (sub-byte types run in 8 bits)."""
    if t in SUB_BYTE_INTS:
        return np.dtype(np.int8 if t[0] == "s" else np.uint8)
    if t == "pred":
        return np.dtype(np.bool_)
    return D.to_dtype(t)


def iin(x, t: str) -> np.ndarray:
    x = np.asarray(x)
    return x.astype(int_compute_dtype(t), copy=False)


def iout(r, t: str) -> np.ndarray:
    """Integer compute result -> element type t, wrapping to the type's width."""
    r = np.asarray(r)
    if t in SUB_BYTE_INTS:
        w = bits(t)
        r = r.astype(np.int64) & ((1 << w) - 1)
        if t[0] == "s":
            r = r - ((r >> (w - 1)) << w)
    return r.astype(D.to_dtype(t))


def result(ins, r) -> np.ndarray:
    """Shape a kernel's value to exactly ins.shape (dtype and dims)."""
    r = np.asarray(r)
    dt = ins.shape.dtype
    if r.dtype != dt:
        r = r.astype(dt)
    dims = tuple(ins.shape.dims)
    if r.shape != dims:
        n = int(np.prod(dims)) if dims else 1
        # Same size: a reshape (np.ascontiguousarray makes 0-d arrays 1-d); a single value
        # for a larger result: a broadcast.
        r = r.reshape(dims) if r.size == n else np.broadcast_to(r.reshape(()), dims).copy()
    return r


from ..common.scalar_ops import (SCALAR_COMPUTE_DTYPES, SCALAR_NAMESPACE,  # noqa: E402
                                 SCALAR_OPS, ScalarOpError, ScalarSig)

__all__ = ["SCALAR_OPS", "SCALAR_NAMESPACE", "SCALAR_COMPUTE_DTYPES", "ScalarOpError",
           "ScalarSig", "fma", "flush", "fin", "fout", "iin", "iout", "result", "to_narrow_float"]
