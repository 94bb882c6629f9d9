"""Helpers the kernels share: attribute decoding, batching, numpy's LAPACK gufuncs."""
from __future__ import annotations

import numpy as np

try:  # numpy's LAPACK gufuncs; their float32 loops call the single-precision routines
    from numpy.linalg import _umath_linalg as _um
except ImportError:  # pragma: no cover - every numpy we know of has it
    _um = None


def char(value, default: str = "") -> str:
    """A LAPACK character attribute: `uplo = 76 : ui8` arrives as np.uint8(76)."""
    if value is None:
        return default
    if isinstance(value, (bytes, str)):
        return (value.decode() if isinstance(value, bytes) else value)[:1].upper()
    return chr(int(value)).upper()


def _mats(x: np.ndarray) -> np.ndarray:
    """(..., m, n) -> (B, m, n), a private copy."""
    x = np.asarray(x)
    return np.array(x.reshape((int(np.prod(x.shape[:-2])),) + x.shape[-2:]))


def _rows(x: np.ndarray, batch: int) -> np.ndarray:
    """(..., k) -> (batch, k)."""
    x = np.asarray(x)
    return x.reshape(batch, x.shape[-1] if x.ndim else 1)


def _put(out: np.ndarray, value) -> None:
    out[...] = np.asarray(value).reshape(out.shape)


def _gufunc(name: str, x: np.ndarray, public):
    """numpy's LAPACK gufunc in x's own precision, else the public API (double, cast)."""
    fn = getattr(_um, name, None) if _um is not None else None
    if fn is not None:
        code = x.dtype.char
        for t in fn.types:
            if t.split("->")[0] == code:
                with np.errstate(all="ignore"):
                    return fn(x, signature=t)
    wide = x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)
    try:
        with np.errstate(all="ignore"):
            return public(wide)
    except np.linalg.LinAlgError:
        return None


def _bad(*arrays) -> np.ndarray:
    """Per batch element: did numpy's LAPACK call fail?  numpy then fills every result with
    NaN.  (LAPACK can also succeed with NaNs from NaN input; only an all-NaN answer counts
    as failure, and then jax's NaN-on-failure gives the same values either way.)"""
    flat = [np.reshape(a, (np.shape(a)[0], int(np.prod(np.shape(a)[1:])))) for a in arrays]
    return np.logical_and.reduce([np.isnan(f).all(axis=1) & (f.shape[1] > 0) for f in flat])
