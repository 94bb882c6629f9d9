"""A call frame read from Python: buffers as zero-copy numpy views, attributes as the typed
keyword arguments the interpreter gives a kernel (xlaplug/plugin/attrs.py).

What XLA hands over for what jax's `ffi_call` (and HLO's backend_config) carries:
integer and float scalars keep their width (np.int32, np.float32, ...), booleans (i1)
become Python bools, strings str, dictionaries dict, and arrays -- `array<i64: ...>` or a
numpy array's dense elements -- a 1-D numpy array (XLA flattens them; the copy keeps the
kernel off memory XLA owns).
"""
from __future__ import annotations

import ctypes
import math

import numpy as np

from ...hlo.dtypes import to_dtype
from . import abi

_SUB_BYTE = {"s1", "s2", "s4", "u1", "u2", "u4", "f4e2m1fn"}


class DecodeError(Exception):
    """A call frame holding something the Python handler cannot give a kernel."""


def element_type(code: int) -> str:
    name = abi.DTYPE_NAMES.get(code)
    if name is None:
        raise DecodeError(f"FFI data type code {code} is not one xlaplug knows")
    return name


# code -> (numpy dtype, element type): filled on first sight of a code, so f32 calls never
# import ml_dtypes, and a call's dtypes cost one dict lookup each.
_DTYPES: dict[int, tuple[np.dtype, str]] = {}


def dtype_of(code: int) -> tuple[np.dtype, str]:
    known = _DTYPES.get(code)
    if known is not None:
        return known
    name = element_type(code)
    if name in _SUB_BYTE:
        raise DecodeError(f"{name} buffers are packed by XLA; xlaplug's FFI handlers do not "
                          "take them")
    return _DTYPES.setdefault(code, (to_dtype(name), name))


def view(addr: int | None, dtype: np.dtype, dims: tuple) -> np.ndarray:
    """The C-contiguous array at `addr`, not copied (writes go to XLA's buffer)."""
    count = math.prod(dims)
    if count == 0 or not addr:
        return np.empty(dims, dtype)
    raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(addr)
    return np.frombuffer(raw, dtype).reshape(dims)


def buffer(addr: int) -> tuple[np.ndarray, str]:
    """(view, HLO element type) of the XLA_FFI_Buffer at `addr`."""
    b = abi.Buffer.from_address(addr)
    dtype, name = dtype_of(b.dtype)
    return view(b.data, dtype, tuple(b.dims[:b.rank])), name


def buffers(args: abi.Args) -> tuple[list[np.ndarray], list[str]]:
    views, types = [], []
    n = args.size
    kinds, addrs = args.types[:n], args.args[:n]
    for i in range(n):
        if kinds[i] != 1:  # XLA_FFI_ArgType_BUFFER / XLA_FFI_RetType_BUFFER
            raise DecodeError(f"argument {i} has FFI type {kinds[i]}, not a buffer")
        v, t = buffer(addrs[i])
        views.append(v)
        types.append(t)
    return views, types


def _text(span: abi.ByteSpan) -> str:
    return ctypes.string_at(span.ptr, span.len).decode("utf-8") if span.len else ""


# Scalar attribute types read straight through ctypes (the others through a numpy view).
_CTYPES = {1: ctypes.c_bool, 2: ctypes.c_int8, 3: ctypes.c_int16, 4: ctypes.c_int32,
           5: ctypes.c_int64, 6: ctypes.c_uint8, 7: ctypes.c_uint16, 8: ctypes.c_uint32,
           9: ctypes.c_uint64, 11: ctypes.c_float, 12: ctypes.c_double}


def _scalar(addr: int):
    s = abi.Scalar.from_address(addr)
    code = s.dtype
    dt = dtype_of(code)[0]
    ctype = _CTYPES.get(code)
    if ctype is not None:
        value = ctype.from_address(s.value).value
        return value if code == 1 else dt.type(value)
    return view(s.value, dt, ())[()].copy()


def _array(addr: int) -> np.ndarray:
    a = abi.Array.from_address(addr)
    return view(a.data, dtype_of(a.dtype)[0], (a.size,)).copy()


def attributes(attrs: abi.Attrs) -> dict:
    """The attributes of a call frame (or of one dictionary attribute), by name."""
    out = {}
    n = attrs.size
    names, kinds, addrs = attrs.names[:n], attrs.types[:n], attrs.attrs[:n]
    for i in range(n):
        name = _text(names[i].contents)
        kind, addr = kinds[i], addrs[i]
        if kind == abi.ATTR_SCALAR:
            out[name] = _scalar(addr)
        elif kind == abi.ATTR_STRING:
            out[name] = _text(abi.ByteSpan.from_address(addr))
        elif kind == abi.ATTR_ARRAY:
            out[name] = _array(addr)
        elif kind == abi.ATTR_DICTIONARY:
            out[name] = attributes(abi.Attrs.from_address(addr))
        else:
            raise DecodeError(f"attribute '{name}' has FFI attribute type {kind}, which "
                              "xlaplug does not know")
    return out
