"""Shared pieces of the scalar op table (see scalar_ops.py for the contract): the
signature type, compute types, narrow float formats, and the source-building utilities the
emitters share."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ...hlo import dtypes as D


class ScalarOpError(ValueError):
    """An op / element-type combination SCALAR_OPS cannot express."""


@dataclass(frozen=True)
class ScalarSig:
    result: str
    operands: tuple[str, ...]
    attrs: dict = field(default_factory=dict, hash=False, compare=False)


_SUB = {"s1": "int8", "s2": "int8", "s4": "int8", "u1": "uint8", "u2": "uint8", "u4": "uint8"}
SCALAR_COMPUTE_DTYPES: dict[str, np.dtype] = {}
for _t in D.ELEMENT_DTYPES:
    if _t in _SUB:
        SCALAR_COMPUTE_DTYPES[_t] = np.dtype(_SUB[_t])
    elif _t in D.FLOAT_TYPES and _t not in ("f32", "f64"):
        SCALAR_COMPUTE_DTYPES[_t] = np.dtype(np.float32)
    else:
        SCALAR_COMPUTE_DTYPES[_t] = D.ELEMENT_DTYPES[_t]

# Narrow float formats: (mantissa bits, min normal exponent, max finite, overflow kind)
# kind 0: IEEE-like (overflow -> inf), 1: no inf (overflow -> NaN), 2: fnuz (also no -0),
# 3: f4e2m1fn (saturates; NaN -> -0).
_FMT_KIND = {"f16": 0, "bf16": 0, "f8e5m2": 0, "f8e4m3": 0, "f8e3m4": 0, "f8e4m3fn": 1,
             "f8e4m3fnuz": 2, "f8e5m2fnuz": 2, "f8e4m3b11fnuz": 2, "f4e2m1fn": 3}


class _NarrowFormats(Mapping):
    """t -> (mantissa bits, min normal exponent, max finite, kind), read from ml_dtypes'
    finfo the first time a format is used (ml_dtypes is slow to import: see hlo/dtypes.py)."""

    def __init__(self):
        self._read: dict[str, tuple] = {}

    def __getitem__(self, t: str) -> tuple:
        v = self._read.get(t)
        if v is None:
            import ml_dtypes
            fi = ml_dtypes.finfo(D.ELEMENT_DTYPES[t])  # KeyError for a type not listed
            v = self._read[t] = (int(fi.nmant), int(fi.minexp), float(fi.max), _FMT_KIND[t])
        return v

    def __contains__(self, t) -> bool:
        return t in _FMT_KIND

    def __iter__(self):
        return iter(_FMT_KIND)

    def __len__(self) -> int:
        return len(_FMT_KIND)


NARROW_FORMATS: Mapping[str, tuple] = _NarrowFormats()


_NUMBA_KINDS = {np.dtype(t) for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8,
                                      np.uint16, np.uint32, np.uint64, np.float32, np.float64,
                                      np.complex64, np.complex128)}


def numba_dtype(dt) -> np.dtype:
    """The dtype a value of `dt` travels as inside numba code, on the CPU and in numba.cuda
    kernels alike (the compute types of SCALAR_COMPUTE_DTYPES, by numpy dtype)."""
    dt = np.dtype(dt)
    if dt in _NUMBA_KINDS:
        return dt
    name = D.from_dtype(dt)
    if D.is_float(name):
        return np.dtype(np.float32)
    if D.is_signed(name):
        return np.dtype(np.int8)
    if D.is_unsigned(name):
        return np.dtype(np.uint8)
    raise TypeError(f"element type {name} cannot be used in a compiled loop")


# ---- source-building utilities -----------------------------------------------------------

def _ct(t: str) -> str:
    """Numba/numpy constructor of t's compute type."""
    return "np." + SCALAR_COMPUTE_DTYPES[t].name


def _w(t: str) -> int:
    return D.bit_width(t)


def _mask(t: str) -> str:
    return f"np.uint64({(1 << _w(t)) - 1})"


def _wide(t: str, x: str) -> str:
    """An integer operand -> int64 (signed types) / uint64 pattern (unsigned)."""
    return f"np.int64({x})" if D.is_signed(t) else f"np.uint64({x})"


def _pat(t: str, x: str) -> str:
    """An integer operand -> its w-bit pattern as uint64."""
    return f"(np.uint64(np.int64({x})) & {_mask(t)})" if D.is_signed(t) else f"np.uint64({x})"


def _from_wide(t: str, x: str) -> str:
    """int64 / uint64 value -> t's compute type, wrapping to t's width."""
    w = _w(t)
    if D.is_signed(t):
        return f"{_ct(t)}(_xws(np.int64({x}), {w}))" if w < 8 else f"{_ct(t)}({x})"
    return f"{_ct(t)}(np.uint64({x}) & {_mask(t)})" if w < 8 else f"{_ct(t)}({x})"


def _from_pat(t: str, p: str) -> str:
    return _from_wide(t, f"_xsext({p}, {_w(t)})") if D.is_signed(t) else _from_wide(t, p)


def _fkind(t: str) -> str:
    if t in ("f32", "f64"):
        return t
    if t in D.FLOAT_TYPES:
        return "narrow"
    if t in D.COMPLEX_TYPES:
        return "complex"
    if t == "pred":
        return "pred"
    if t in D.INTEGRAL_TYPES:
        return "int"
    raise ScalarOpError(f"element type {t} has no scalar form")


def _daz(t: str, x: str) -> str:
    """A float operand as read by flushing arithmetic (compute type unchanged)."""
    if t == "f64":
        return f"_xftz64({x})"
    if t in ("f32", "bf16"):
        return f"_xftz32({x})"
    return x


def _dazfp(t: str, x: str) -> str:
    """A float operand the op reads only through float instructions (arithmetic, compares):
    its flush is `_xftzd32` (see scalar_float_round)."""
    return _daz(t, x).replace("_xftz", "_xftzd", 1)


def _fres(t: str, x: str) -> str:
    """A float result computed in f32/f64 -> t's compute value (FTZ, narrow rounding).  The
    flush is a result's (`_xftzr32`: see scalar_float_round)."""
    if t == "f64":
        return f"_xftzr64(np.float64({x}))"
    if t == "f32":
        return f"_xftzr32(np.float32({x}))"
    if t == "bf16":  # (inline: scalar_float_round._xrbf16)
        return f"_xrbf16(_xftzr32(np.float32({x})))"
    if t in NARROW_FORMATS:
        m, e, mx, k = NARROW_FORMATS[t]
        return f"_xround({x}, {m}, {e}, {mx!r}, {k})"
    raise ScalarOpError(f"float type {t} is not supported in compiled scalar code")


def _fres_norflush(t: str, x: str) -> str:
    if t == "bf16":
        return f"_xrbf16({x})"
    if t in NARROW_FORMATS:
        m, e, mx, k = NARROW_FORMATS[t]
        return f"_xround({x}, {m}, {e}, {mx!r}, {k})"
    if t == "f32":
        return f"np.float32({x})"
    if t == "f64":
        return f"np.float64({x})"
    raise ScalarOpError(f"conversion to {t} is not supported in compiled scalar code")
