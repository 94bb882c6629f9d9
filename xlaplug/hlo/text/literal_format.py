"""Constant literals printed as XLA prints them: floats exact to the bit (-0, the sign of
NaN, NaN payloads as `nan(0x..)`), f8 types without an infinity or a signed NaN as XLA
writes them, nested braces for rank >= 2."""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..ir import Shape
from .literals import _PAYLOAD_TYPES


_UNSIGNED_NAN = frozenset({"f8e4m3fnuz", "f8e5m2fnuz", "f8e4m3b11fnuz", "f8e8m0fnu"})


def _fmt_nan(v, etype: str) -> str:
    if etype in _UNSIGNED_NAN:
        return "nan"
    sign = "-" if np.signbit(v) else ""
    mant = _PAYLOAD_TYPES.get(etype)
    if mant is not None:
        dt = dtypes.ELEMENT_DTYPES[etype]
        bits = int(np.asarray(v, dtype=dt).reshape(1).view(f"u{dt.itemsize}")[0])
        payload = bits & ((1 << mant) - 1)
        if payload != 1 << (mant - 1):  # not the plain quiet NaN: XLA prints the payload
            return f"{sign}nan(0x{payload:x})"
    return sign + "nan"


def _fmt_float(v, etype: str) -> str:
    """The shortest text that reads back to exactly `v` (a numpy scalar of etype's dtype)."""
    f = float(v)
    if f != f:
        return _fmt_nan(v, etype)
    if f in (np.inf, -np.inf):
        return "inf" if f > 0 else "-inf"
    if f == 0:
        return "-0" if np.signbit(f) else "0"
    if f.is_integer() and abs(f) < 1e6:  # small integers in full (f16's 65504, not 6.55e+04)
        return str(int(f))
    if etype == "f64":
        s = repr(f)
    elif etype == "f16":
        s = str(np.float16(f))
    else:  # f32 and the narrow floats: shortest float32 repr of the exact value
        s = str(np.float32(f))
    return s[:-2] if s.endswith(".0") else s


def format_scalar(v, etype: str) -> str:
    if etype == "pred":
        return "true" if bool(v) else "false"
    if dtypes.is_complex(etype):
        part = "f64" if etype == "c128" else "f32"
        return f"({_fmt_float(v.real, part)}, {_fmt_float(v.imag, part)})"
    if dtypes.is_float(etype):
        return _fmt_float(v, etype)
    return str(int(v))


def format_literal(value, shape: Shape) -> str:
    if shape.is_tuple:
        return "(" + ", ".join(format_literal(v, s) for v, s in zip(value, shape.tuple_shapes)) + ")"
    etype = shape.element_type
    arr = np.asarray(value)
    if shape.rank == 0:
        return format_scalar(arr.reshape(())[()], etype)
    if etype == "pred":
        items = np.where(arr.reshape(-1), "true", "false").tolist()
    elif dtypes.is_integral(etype):
        items = [str(x) for x in arr.reshape(-1).astype(object if etype == "u64" else np.int64).tolist()]
    else:
        items = [format_scalar(x, etype) for x in arr.reshape(-1)]
    return _nest(items, shape.dims)


def _nest(items: list[str], dims) -> str:
    if len(dims) == 1:
        return "{" + ", ".join(items) + "}"
    if dims[0] == 0:
        return "{}"
    inner = 1
    for d in dims[1:]:
        inner *= d
    groups = [_nest(items[i * inner:(i + 1) * inner], dims[1:]) for i in range(dims[0])]
    return "{ " + ", ".join(groups) + " }"
