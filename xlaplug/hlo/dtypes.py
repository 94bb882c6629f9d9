"""XLA element types and their numpy dtypes.

Narrow floats and sub-byte integers come from ml_dtypes, the same package jax uses,
so bit patterns match XLA exactly.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

# XLA primitive type name -> numpy dtype.  `token` has no array representation.
ELEMENT_DTYPES: dict[str, np.dtype] = {
    "pred": np.dtype(np.bool_),
    "s1": np.dtype(ml_dtypes.int1), "s2": np.dtype(ml_dtypes.int2), "s4": np.dtype(ml_dtypes.int4),
    "s8": np.dtype(np.int8), "s16": np.dtype(np.int16), "s32": np.dtype(np.int32),
    "s64": np.dtype(np.int64),
    "u1": np.dtype(ml_dtypes.uint1), "u2": np.dtype(ml_dtypes.uint2), "u4": np.dtype(ml_dtypes.uint4),
    "u8": np.dtype(np.uint8), "u16": np.dtype(np.uint16), "u32": np.dtype(np.uint32),
    "u64": np.dtype(np.uint64),
    "f16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16),
    "f32": np.dtype(np.float32), "f64": np.dtype(np.float64),
    "f8e5m2": np.dtype(ml_dtypes.float8_e5m2), "f8e4m3": np.dtype(ml_dtypes.float8_e4m3),
    "f8e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "f8e4m3b11fnuz": np.dtype(ml_dtypes.float8_e4m3b11fnuz),
    "f8e3m4": np.dtype(ml_dtypes.float8_e3m4),
    "f8e5m2fnuz": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "f8e4m3fnuz": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "f4e2m1fn": np.dtype(ml_dtypes.float4_e2m1fn),
    "f8e8m0fnu": np.dtype(ml_dtypes.float8_e8m0fnu),
    "c64": np.dtype(np.complex64), "c128": np.dtype(np.complex128),
}
ELEMENT_TYPES = frozenset(ELEMENT_DTYPES) | {"token"}
# Opaque types XLA can print; they have no numpy representation.
OPAQUE_TYPES = frozenset({"token", "opaque"})

_DTYPE_TO_ELEMENT = {v: k for k, v in ELEMENT_DTYPES.items()}

FLOAT_TYPES = frozenset(k for k in ELEMENT_DTYPES if k[0] == "f" or k == "bf16")
COMPLEX_TYPES = frozenset({"c64", "c128"})
SIGNED_TYPES = frozenset(k for k in ELEMENT_DTYPES if k[0] == "s")
UNSIGNED_TYPES = frozenset(k for k in ELEMENT_DTYPES if k[0] == "u")
INTEGRAL_TYPES = SIGNED_TYPES | UNSIGNED_TYPES

BIT_WIDTHS = {
    "pred": 8, "s1": 1, "s2": 2, "s4": 4, "u1": 1, "u2": 2, "u4": 4,
    "f4e2m1fn": 4,
}


def bit_width(element_type: str) -> int:
    """Logical bit width (sub-byte types report their logical width, not numpy's byte)."""
    if element_type in BIT_WIDTHS:
        return BIT_WIDTHS[element_type]
    return ELEMENT_DTYPES[element_type].itemsize * 8


def to_dtype(element_type: str) -> np.dtype:
    try:
        return ELEMENT_DTYPES[element_type]
    except KeyError:
        raise ValueError(f"element type '{element_type}' has no array representation") from None


def from_dtype(dtype) -> str:
    dt = np.dtype(dtype)
    try:
        return _DTYPE_TO_ELEMENT[dt]
    except KeyError:
        raise ValueError(f"numpy dtype {dt} has no XLA element type") from None


def is_float(t: str) -> bool:
    return t in FLOAT_TYPES


def is_complex(t: str) -> bool:
    return t in COMPLEX_TYPES


def is_integral(t: str) -> bool:
    return t in INTEGRAL_TYPES


def is_signed(t: str) -> bool:
    """A signed integer type (s1 ... s64)."""
    return t in SIGNED_TYPES


def is_signed_or_float(t: str) -> bool:
    """XLA's ElementIsSigned (primitive_util.h): signed integers and floating point -- the
    types abs and sign are defined on."""
    return t in SIGNED_TYPES or t in FLOAT_TYPES


def is_unsigned(t: str) -> bool:
    return t in UNSIGNED_TYPES


def complex_component(t: str) -> str:
    """c64 -> f32, c128 -> f64 (the type of real/imag)."""
    return {"c64": "f32", "c128": "f64"}[t]
