"""Numba loops for the integer ops whose XLA semantics branch per element (divide, remainder,
power, shifts, count-leading-zeros).

Each loop applies the very scalar helper SCALAR_OPS inlines into fused code, so the array
kernels and compiled scalar computations cannot disagree.  Loops run on flat int64 values
(signed types) or uint64 bit patterns (unsigned types, and any type's shift/power/clz
operands): one compiled specialisation per loop, cached on disk.
"""
from __future__ import annotations

import numpy as np
from .jit_store import cached_njit

from ..common.scalar_int import (_xclz, _xipow, _xsdiv, _xshl, _xsra, _xsrem, _xsrl,
                                     _xudiv, _xurem)

_OPTS = dict(nogil=True)  # on disk in xlaplug's cache (jit_store), or in memory


@cached_njit(**_OPTS)
def sdiv(a, b, minv):
    out = np.empty_like(a)
    for i in range(a.size):
        out[i] = _xsdiv(a[i], b[i], minv)
    return out


@cached_njit(**_OPTS)
def srem(a, b, minv):
    out = np.empty_like(a)
    for i in range(a.size):
        out[i] = _xsrem(a[i], b[i], minv)
    return out


@cached_njit(**_OPTS)
def udiv(a, b, ones):
    out = np.empty_like(a)
    for i in range(a.size):
        out[i] = _xudiv(a[i], b[i], ones)
    return out


@cached_njit(**_OPTS)
def urem(a, b):
    out = np.empty_like(a)
    for i in range(a.size):
        out[i] = _xurem(a[i], b[i])
    return out


@cached_njit(**_OPTS)
def ipow(p, e, mask, w):
    out = np.empty_like(p)
    for i in range(p.size):
        out[i] = _xipow(p[i], e[i], mask, w)
    return out


@cached_njit(**_OPTS)
def shift(kind, p, c, w, mask):
    """kind 0: left, 1: right logical, 2: right arithmetic (on w-bit patterns)."""
    out = np.empty_like(p)
    for i in range(p.size):
        if kind == 0:
            out[i] = _xshl(p[i], c[i], w, mask)
        elif kind == 1:
            out[i] = _xsrl(p[i], c[i], w)
        else:
            out[i] = _xsra(p[i], c[i], w, mask)
    return out


@cached_njit(**_OPTS)
def clz(p, w):
    out = np.empty(p.size, np.int64)
    for i in range(p.size):
        out[i] = _xclz(p[i], w)
    return out


def flat(x, dtype) -> np.ndarray:
    """x as a contiguous 1-d array of dtype (numpy's conversion wraps, as a cast does)."""
    return np.ascontiguousarray(np.asarray(x).astype(dtype, copy=False)).reshape(-1)


@cached_njit(error_model="numpy", **_OPTS)
def fpow(a, b):
    """C's pow on float64 (numpy's own loops lose a few ULP on large exponents)."""
    out = np.empty_like(a)
    for i in range(a.size):
        out[i] = np.power(a[i], b[i])
    return out
