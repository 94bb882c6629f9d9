"""XLA's typed FFI C ABI (xla/ffi/api/c_api.h, shipped in jaxlib/include), as this package
reads it: struct layouts as ctypes Structures (the Python handler's view) and as byte
offsets (the compiled handler's view), the data-type and attribute-type codes, and the API
version the code was written for.

The layouts are those of the header at XLA_FFI_API_MAJOR 0; `check_header()` reads the
installed jaxlib's header and refuses a major version other than the one written for, so a
jaxlib whose ABI moved fails at registration, never inside a call.
"""
from __future__ import annotations

import ctypes
import os
import re

from ...hlo.errors import HloError

API_MAJOR = 0          # the header's XLA_FFI_API_MAJOR this code was written for
API_MINOR = 1          # the oldest minor version whose call frame and Api hold what we read
API_MINOR_REPORTED = 3  # what the metadata stage answers (the header these layouts match)

STAGE_EXECUTE = 3
EXTENSION_METADATA = 1
ATTR_ARRAY, ATTR_DICTIONARY, ATTR_SCALAR, ATTR_STRING = 1, 2, 3, 4
ERROR_INVALID_ARGUMENT, ERROR_INTERNAL, ERROR_UNIMPLEMENTED = 3, 13, 12

# XLA_FFI_DataType codes (the same numbers as XLA's PrimitiveType) -> HLO element types.
DTYPE_NAMES = {1: "pred", 2: "s8", 3: "s16", 4: "s32", 5: "s64", 6: "u8", 7: "u16", 8: "u32",
               9: "u64", 10: "f16", 11: "f32", 12: "f64", 15: "c64", 16: "bf16", 18: "c128",
               19: "f8e5m2", 20: "f8e4m3fn", 21: "s4", 22: "u4", 23: "f8e4m3b11fnuz",
               24: "f8e5m2fnuz", 25: "f8e4m3fnuz", 26: "s2", 27: "u2", 28: "f8e4m3",
               29: "f8e3m4", 30: "s1", 31: "u1", 32: "f4e2m1fn", 33: "f8e8m0fnu"}
DTYPE_CODES = {name: code for code, name in DTYPE_NAMES.items()}

# Byte offsets (x86-64 / aarch64 LP64) of the fields the compiled handler reads.
FRAME_EXTENSION, FRAME_API, FRAME_STAGE = 8, 16, 32
FRAME_ARGS_SIZE, FRAME_ARGS_TYPES, FRAME_ARGS = 56, 64, 72
FRAME_RETS_SIZE, FRAME_RETS = 96, 112
FRAME_ATTRS_SIZE, FRAME_ATTRS_TYPES, FRAME_ATTRS_NAMES, FRAME_ATTRS = 136, 144, 152, 160
BUFFER_DTYPE, BUFFER_DATA, BUFFER_RANK, BUFFER_DIMS = 16, 24, 32, 40
API_MAJOR_AT, API_MINOR_AT, API_ERROR_CREATE = 32, 36, 48
METADATA_EXT_METADATA = 24                  # XLA_FFI_Metadata_Extension.metadata
METADATA_MAJOR, METADATA_MINOR, METADATA_TRAITS = 24, 28, 32
SCALAR_DTYPE, SCALAR_VALUE = 0, 8
ARRAY_DTYPE, ARRAY_SIZE, ARRAY_DATA = 0, 8, 16
SPAN_PTR, SPAN_LEN = 0, 8
ERROR_ARGS_SIZE = 28                        # XLA_FFI_STRUCT_SIZE(Error_Create_Args, errc)


class ByteSpan(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class Buffer(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
                ("dtype", ctypes.c_int), ("data", ctypes.c_void_p), ("rank", ctypes.c_int64),
                ("dims", ctypes.POINTER(ctypes.c_int64))]


class Scalar(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("value", ctypes.c_void_p)]


class Array(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("size", ctypes.c_size_t), ("data", ctypes.c_void_p)]


class Args(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
                ("size", ctypes.c_int64), ("types", ctypes.POINTER(ctypes.c_int)),
                ("args", ctypes.POINTER(ctypes.c_void_p))]


class Attrs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
                ("size", ctypes.c_int64), ("types", ctypes.POINTER(ctypes.c_int)),
                ("names", ctypes.POINTER(ctypes.POINTER(ByteSpan))),
                ("attrs", ctypes.POINTER(ctypes.c_void_p))]


class CallFrame(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
                ("api", ctypes.c_void_p), ("ctx", ctypes.c_void_p), ("stage", ctypes.c_int),
                ("args", Args), ("rets", Args), ("attrs", Attrs)]


class ErrorCreateArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
                ("message", ctypes.c_char_p), ("errc", ctypes.c_int)]


ErrorCreate = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(ErrorCreateArgs))
HANDLER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)  # XLA_FFI_Handler


def _check_layout() -> None:
    # The offsets above are the Structures' own, so the two views cannot drift apart.
    f = CallFrame
    assert (f.extension_start.offset, f.api.offset, f.stage.offset) == \
        (FRAME_EXTENSION, FRAME_API, FRAME_STAGE)
    assert f.args.offset + Args.size.offset == FRAME_ARGS_SIZE
    assert f.rets.offset + Args.args.offset == FRAME_RETS
    assert f.attrs.offset + Attrs.attrs.offset == FRAME_ATTRS
    assert (Buffer.dtype.offset, Buffer.data.offset, Buffer.rank.offset,
            Buffer.dims.offset) == (BUFFER_DTYPE, BUFFER_DATA, BUFFER_RANK, BUFFER_DIMS)
    assert (Array.size.offset, Array.data.offset, Scalar.value.offset) == \
        (ARRAY_SIZE, ARRAY_DATA, SCALAR_VALUE)


_check_layout()


class FfiError(HloError):
    """Registration refused (one line)."""

    def headline(self) -> str:
        return f"error: {self.message}"

    def __str__(self) -> str:
        return self.headline()


def header_version(include_dir: str) -> tuple[int, int] | None:
    """(major, minor) of the installed jaxlib's c_api.h, or None when it is not shipped."""
    path = os.path.join(include_dir, "xla", "ffi", "api", "c_api.h")
    try:
        text = open(path, encoding="utf-8").read()
    except OSError:
        return None
    major = re.search(r"#define XLA_FFI_API_MAJOR (\d+)", text)
    minor = re.search(r"#define XLA_FFI_API_MINOR (\d+)", text)
    if not (major and minor):
        return None
    return int(major.group(1)), int(minor.group(1))


def check_version(version: tuple[int, int] | None, where: str) -> None:
    """Refuse an FFI API this code was not written for."""
    if version is None:
        return
    major, minor = version
    if major != API_MAJOR or minor < API_MINOR:
        raise FfiError(f"XLA FFI API version {major}.{minor} ({where}) is not one xlaplug's "
                       f"FFI handlers were written for ({API_MAJOR}.{API_MINOR} to "
                       f"{API_MAJOR}.x)")
