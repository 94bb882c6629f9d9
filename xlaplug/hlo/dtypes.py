"""XLA element types and their numpy dtypes.

Narrow floats and sub-byte integers come from ml_dtypes, the same package jax uses,
so bit patterns match XLA exactly.
"""
from __future__ import annotations

import sys
from collections.abc import Mapping

import numpy as np

# XLA primitive type name -> numpy dtype.  `token` has no array representation.
_NUMPY_DTYPES: dict[str, np.dtype] = {
    "pred": np.dtype(np.bool_),
    "s8": np.dtype(np.int8), "s16": np.dtype(np.int16), "s32": np.dtype(np.int32),
    "s64": np.dtype(np.int64),
    "u8": np.dtype(np.uint8), "u16": np.dtype(np.uint16), "u32": np.dtype(np.uint32),
    "u64": np.dtype(np.uint64),
    "f16": np.dtype(np.float16), "f32": np.dtype(np.float32), "f64": np.dtype(np.float64),
    "c64": np.dtype(np.complex64), "c128": np.dtype(np.complex128),
}
# Types numpy lacks: ml_dtypes' names for them.  ml_dtypes takes 0.5-0.8 s of CPU to
# import, so it is imported the first time one of these types is asked for (a module of
# f32 only never pays it).
_ML_NAMES = {
    "s1": "int1", "s2": "int2", "s4": "int4", "u1": "uint1", "u2": "uint2", "u4": "uint4",
    "bf16": "bfloat16", "f8e5m2": "float8_e5m2", "f8e4m3": "float8_e4m3",
    "f8e4m3fn": "float8_e4m3fn", "f8e4m3b11fnuz": "float8_e4m3b11fnuz",
    "f8e3m4": "float8_e3m4", "f8e5m2fnuz": "float8_e5m2fnuz", "f8e4m3fnuz": "float8_e4m3fnuz",
    "f4e2m1fn": "float4_e2m1fn", "f8e8m0fnu": "float8_e8m0fnu",
}
_ORDER = ("pred", "s1", "s2", "s4", "s8", "s16", "s32", "s64", "u1", "u2", "u4", "u8", "u16",
          "u32", "u64", "f16", "bf16", "f32", "f64", "f8e5m2", "f8e4m3", "f8e4m3fn",
          "f8e4m3b11fnuz", "f8e3m4", "f8e5m2fnuz", "f8e4m3fnuz", "f4e2m1fn", "f8e8m0fnu",
          "c64", "c128")


def _ml_dtypes() -> dict[str, np.dtype]:
    """The narrow types' dtypes (imports ml_dtypes; Python caches the import)."""
    import ml_dtypes
    return {t: np.dtype(getattr(ml_dtypes, n)) for t, n in _ML_NAMES.items()}


class _ElementDtypes(Mapping):
    """Element type -> numpy dtype; the narrow types' values import ml_dtypes when read."""

    def __getitem__(self, t: str) -> np.dtype:
        dt = _NUMPY_DTYPES.get(t)
        if dt is None:
            if t not in _ML_NAMES:
                raise KeyError(t)
            import ml_dtypes
            return np.dtype(getattr(ml_dtypes, _ML_NAMES[t]))
        return dt

    def __contains__(self, t) -> bool:
        return t in _NUMPY_DTYPES or t in _ML_NAMES

    def __iter__(self):
        return iter(_ORDER)

    def __len__(self) -> int:
        return len(_ORDER)


class _DtypeElements(Mapping):
    """numpy dtype -> element type.  A dtype from ml_dtypes means ml_dtypes is imported
    already; any other dtype is looked up without importing it."""

    def __init__(self):
        self._numpy = {v: k for k, v in _NUMPY_DTYPES.items()}
        self._narrow_table: dict | None = None  # filled once ml_dtypes is in use

    def _narrow(self) -> dict:
        if self._narrow_table is None:
            self._narrow_table = {v: k for k, v in _ml_dtypes().items()}
        return self._narrow_table

    def __getitem__(self, dt) -> str:
        try:
            return self._numpy[dt]
        except (KeyError, TypeError):
            pass
        if "ml_dtypes" in sys.modules:
            return self._narrow()[dt]
        raise KeyError(dt)

    def __contains__(self, dt) -> bool:
        try:
            self[dt]
        except (KeyError, TypeError):
            return False
        return True

    def __iter__(self):
        return iter(dict(self._numpy, **({} if "ml_dtypes" not in sys.modules
                                          else self._narrow())))

    def __len__(self) -> int:
        return len(list(iter(self)))


ELEMENT_DTYPES: Mapping[str, np.dtype] = _ElementDtypes()
ELEMENT_TYPES = frozenset(ELEMENT_DTYPES) | {"token"}
# Opaque types XLA can print; they have no numpy representation.
OPAQUE_TYPES = frozenset({"token", "opaque"})

_DTYPE_TO_ELEMENT: Mapping = _DtypeElements()

FLOAT_TYPES = frozenset(k for k in ELEMENT_DTYPES if k[0] == "f" or k == "bf16")
COMPLEX_TYPES = frozenset({"c64", "c128"})
SIGNED_TYPES = frozenset(k for k in ELEMENT_DTYPES if k[0] == "s")
UNSIGNED_TYPES = frozenset(k for k in ELEMENT_DTYPES if k[0] == "u")
INTEGRAL_TYPES = SIGNED_TYPES | UNSIGNED_TYPES

BIT_WIDTHS = {
    "pred": 8, "s1": 1, "s2": 2, "s4": 4, "u1": 1, "u2": 2, "u4": 4,
    "f4e2m1fn": 4, "bf16": 16, "f8e5m2": 8, "f8e4m3": 8, "f8e4m3fn": 8,
    "f8e4m3b11fnuz": 8, "f8e3m4": 8, "f8e5m2fnuz": 8, "f8e4m3fnuz": 8, "f8e8m0fnu": 8,
}


def bit_width(element_type: str) -> int:
    """Logical bit width (sub-byte types report their logical width, not numpy's byte)."""
    if element_type in BIT_WIDTHS:
        return BIT_WIDTHS[element_type]
    return ELEMENT_DTYPES[element_type].itemsize * 8


def to_dtype(element_type: str) -> np.dtype:
    dt = _NUMPY_DTYPES.get(element_type)  # (numpy's own types without the Mapping's calls:
    if dt is not None:  # every kernel call reads its shape's dtype)
        return dt
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
