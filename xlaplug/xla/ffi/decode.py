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


def dtype_of(code: int) -> np.dtype:
    name = element_type(code)
    if name in _SUB_BYTE:
        raise DecodeError(f"{name} buffers are packed by XLA; xlaplug's FFI handlers do not "
                          "take them")
    return to_dtype(name)


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
    dims = tuple(b.dims[i] for i in range(b.rank))
    return view(b.data, dtype_of(b.dtype), dims), element_type(b.dtype)


def buffers(args: abi.Args) -> tuple[list[np.ndarray], list[str]]:
    views, types = [], []
    for i in range(args.size):
        if args.types[i] != 1:  # XLA_FFI_ArgType_BUFFER / XLA_FFI_RetType_BUFFER
            raise DecodeError(f"argument {i} has FFI type {args.types[i]}, not a buffer")
        v, t = buffer(args.args[i])
        views.append(v)
        types.append(t)
    return views, types


def _text(span_addr: int) -> str:
    span = abi.ByteSpan.from_address(span_addr)
    return ctypes.string_at(span.ptr, span.len).decode("utf-8") if span.len else ""


def _scalar(addr: int):
    s = abi.Scalar.from_address(addr)
    dt = dtype_of(s.dtype)
    value = view(s.value, dt, ())[()].copy()
    return bool(value) if dt == np.bool_ else value


def _array(addr: int) -> np.ndarray:
    a = abi.Array.from_address(addr)
    return view(a.data, dtype_of(a.dtype), (a.size,)).copy()


def attributes(attrs: abi.Attrs) -> dict:
    """The attributes of a call frame (or of one dictionary attribute), by name."""
    out = {}
    for i in range(attrs.size):
        name = _text(ctypes.addressof(attrs.names[i].contents))
        kind, addr = attrs.types[i], attrs.attrs[i]
        if kind == abi.ATTR_SCALAR:
            out[name] = _scalar(addr)
        elif kind == abi.ATTR_STRING:
            out[name] = _text(addr)
        elif kind == abi.ATTR_ARRAY:
            out[name] = _array(addr)
        elif kind == abi.ATTR_DICTIONARY:
            out[name] = attributes(abi.Attrs.from_address(addr))
        else:
            raise DecodeError(f"attribute '{name}' has FFI attribute type {kind}, which "
                              "xlaplug does not know")
    return out
