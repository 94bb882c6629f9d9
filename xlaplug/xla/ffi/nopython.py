"""The call frame read in numba's nopython mode: the pieces the compiled handler is made of.

Two intrinsics reach what nopython code cannot say -- an integer as a pointer and back --
and the rest are @njit helpers over `numba.carray` views of
the ABI structs (offsets in abi.py).  Nothing here takes the GIL or allocates.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import carray, njit, types
from numba.extending import intrinsic

from . import abi

_I8P = ir.IntType(8).as_pointer()


@intrinsic
def as_ptr(typingctx, addr):
    """int64 -> void*."""
    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], _I8P)
    return types.voidptr(types.int64), codegen


@intrinsic
def as_int(typingctx, ptr):
    """void* -> int64."""
    def codegen(context, builder, sig, args):
        return builder.ptrtoint(args[0], ir.IntType(64))
    return types.int64(types.voidptr), codegen


@njit
def load_i64(addr, offset):
    return carray(as_ptr(addr + offset), 1, np.int64)[0]


@njit
def load_i32(addr, offset):
    return carray(as_ptr(addr + offset), 1, np.int32)[0]


@njit
def store_i32(addr, offset, value):
    carray(as_ptr(addr + offset), 1, np.int32)[0] = value


@njit
def answer_metadata(frame):
    """The registration-time query (see python_handler.answer_metadata): 1 when XLA's API
    version is not one this code was written for (the caller then answers with an error)."""
    api = load_i64(frame, abi.FRAME_API)
    if api != 0:
        major = load_i32(api, abi.API_MAJOR_AT)
        minor = load_i32(api, abi.API_MINOR_AT)
        if major != abi.API_MAJOR or minor < abi.API_MINOR:
            return 1
    ext = load_i64(frame, abi.FRAME_EXTENSION)
    if load_i32(ext, 8) == abi.EXTENSION_METADATA:
        meta = load_i64(ext, abi.METADATA_EXT_METADATA)
        store_i32(meta, abi.METADATA_MAJOR, abi.API_MAJOR)
        store_i32(meta, abi.METADATA_MINOR, abi.API_MINOR_REPORTED)
        store_i32(meta, abi.METADATA_TRAITS, 0)
    return 0


@njit
def buffer_addr(frame, k, nargs):
    """The XLA_FFI_Buffer* of operand k, or of result k - nargs."""
    if k < nargs:
        return load_i64(load_i64(frame, abi.FRAME_ARGS), 8 * k)
    return load_i64(load_i64(frame, abi.FRAME_RETS), 8 * (k - nargs))


@njit
def buffer_is(buf, dtype_code, rank):
    return load_i32(buf, abi.BUFFER_DTYPE) == dtype_code and \
        load_i64(buf, abi.BUFFER_RANK) == rank


@njit
def buffer_data(buf):
    return as_ptr(load_i64(buf, abi.BUFFER_DATA))


@njit
def buffer_dim(buf, i):
    return load_i64(load_i64(buf, abi.BUFFER_DIMS), 8 * i)


@njit
def find_attr(frame, name):
    """(type, address) of the attribute called `name` (a uint8 array); type 0 if absent."""
    n = load_i64(frame, abi.FRAME_ATTRS_SIZE)
    kinds = load_i64(frame, abi.FRAME_ATTRS_TYPES)
    names = load_i64(frame, abi.FRAME_ATTRS_NAMES)
    values = load_i64(frame, abi.FRAME_ATTRS)
    for i in range(n):
        span = load_i64(names, 8 * i)
        length = load_i64(span, abi.SPAN_LEN)
        if length != name.size:
            continue
        chars = carray(as_ptr(load_i64(span, abi.SPAN_PTR)), length, np.uint8)
        same = True
        for j in range(length):
            if chars[j] != name[j]:
                same = False
                break
        if same:
            return load_i32(kinds, 4 * i), load_i64(values, 8 * i)
    return 0, 0


@njit
def scalar_value(addr):
    """(ok, is_float, float64 value, int64 value) of an XLA_FFI_Scalar of a real, integer or
    boolean type (u64 and complex are left to the Python handler)."""
    code = load_i32(addr, abi.SCALAR_DTYPE)
    p = as_ptr(load_i64(addr, abi.SCALAR_VALUE))
    if code == 11 or code == 12:
        v = np.float64(carray(p, 1, np.float32)[0]) if code == 11 else carray(p, 1, np.float64)[0]
        return True, True, v, np.int64(0)
    if code == 1 or code == 6:
        i = np.int64(carray(p, 1, np.uint8)[0])
    elif code == 2:
        i = np.int64(carray(p, 1, np.int8)[0])
    elif code == 3:
        i = np.int64(carray(p, 1, np.int16)[0])
    elif code == 7:
        i = np.int64(carray(p, 1, np.uint16)[0])
    elif code == 4:
        i = np.int64(carray(p, 1, np.int32)[0])
    elif code == 8:
        i = np.int64(carray(p, 1, np.uint32)[0])
    elif code == 5:
        i = carray(p, 1, np.int64)[0]
    else:
        return False, False, 0.0, np.int64(0)
    return True, False, np.float64(i), i


@njit
def scalar_attr(frame, name, has_default, default_f, default_i):
    """(ok, is_float, float64, int64) of the scalar attribute `name`, or of the kernel's
    default when the call has no such attribute."""
    kind, at = find_attr(frame, name)
    if kind == abi.ATTR_SCALAR:
        return scalar_value(at)
    if kind == 0 and has_default:
        return True, False, default_f, default_i
    return False, False, 0.0, np.int64(0)


@njit
def array_is(addr, dtype_code):
    return load_i32(addr, abi.ARRAY_DTYPE) == dtype_code


@njit
def array_size(addr):
    return load_i64(addr, abi.ARRAY_SIZE)


@njit
def array_data(addr):
    return as_ptr(load_i64(addr, abi.ARRAY_DATA))
