"""A copy between arrays whose elements lie in different orders (a transpose, a channels-last
view of a convolution's operand), in tiles that read and write whole cache lines.

numpy copies `dst[...] = src` in the destination's memory order: where the source's
contiguous dimension is another one, every element read is a stride away from the last --
a 2048 x 2048 f32 transpose took 50 ms against 17 in 32 x 32 tiles (one core, 2026-12-06,
load 6), and the convolution's weight-gradient operand (f32[16,32,32,32] read as
[32,32,32,16], padded) 1.9 ms. Here the two contiguous dimensions -- the source's and the
destination's -- are walked in tiles of TILE x TILE elements, every other dimension outside
them. Elements are moved as unsigned integers of their size: the bits, whatever the type.

The tiles are 8 x 8, not 32 x 32: a tile reads one line from each of TILE source rows, and
where the rows lie a power of two bytes apart (a 1024-wide f32 matrix: 4 KiB) those lines
share one set of the 8-way L1 cache, so 32 of them evicted each other before the tile came
back for the next elements.  Measured on one core (2026-12-06, load 8-15, CPU time):
f32[4096,1024] transposed 9.7 -> 5.0 ms, [2048,2048] 9.8 -> 4.6, [256,1024] (the transformer
training step's weight gradient) 0.56 -> 0.21, [512,512] 0.29 -> 0.21; at other widths the
same as before ([1024,256] 0.20 -> 0.21, [1000,300] 0.25 both).
"""
from __future__ import annotations

import functools

import numpy as np

from .jit_store import cached_njit

TILE = 8
# Under this many elements (1 MiB of f32) the tiles gain nothing: the arrays sit in the
# cache either way (256 x 256 f32: 0.05 ms both ways; from 512 x 512, 0.34 -> 0.21 ms).
MIN_ELEMENTS = 1 << 18
# Nor where either contiguous dimension is short: numpy's copy then reuses each cache line
# it reads before it is evicted, at a cycle an element, where a tile costs four (a
# convolution's NCHW operand read channels-last, f32[8,64,56,56]: 0.7-0.8 ms by numpy,
# 2.0-6.0 in tiles; its result back, 1.2 against 2.0).
MIN_SIDE = 256
_UINTS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


@cached_njit(lazy=True, nogil=True)
def _tiled(d, s, tile):
    """d[...] = s[...]: both [outer..., J, I], s contiguous along I, d along J."""
    nj, ni = s.shape[-2], s.shape[-1]
    for idx in np.ndindex(s.shape[:-2]):
        d2, s2 = d[idx], s[idx]
        for j0 in range(0, nj, tile):
            j1 = min(j0 + tile, nj)
            for i0 in range(0, ni, tile):
                i1 = min(i0 + tile, ni)
                for i in range(i0, i1):
                    for j in range(j0, j1):
                        d2[j, i] = s2[j, i]


def _unit_dim(x: np.ndarray) -> int | None:
    """The dimension (of more than one element) along which x's elements are adjacent."""
    for k in range(x.ndim - 1, -1, -1):
        if x.shape[k] > 1 and x.strides[k] == x.itemsize:
            return k
    return None


def copy_into(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[...] = src for arrays of one shape and dtype, in tiles where their contiguous
    dimensions differ and both are long (see above); numpy's copy otherwise."""
    uint = _UINTS.get(dst.itemsize)
    if dst.size < MIN_ELEMENTS or dst.ndim < 2 or uint is None or src.dtype != dst.dtype \
            or src.shape != dst.shape:
        np.copyto(dst, src)
        return
    i, j = _unit_dim(src), _unit_dim(dst)
    if i is None or j is None or i == j or min(dst.shape[i], dst.shape[j]) < MIN_SIDE:
        np.copyto(dst, src)
        return
    order = [k for k in range(dst.ndim) if k not in (i, j)] + [j, i]
    d, s = dst.view(uint).transpose(order), src.view(uint).transpose(order)
    if d.ndim == 2:
        d, s = d[None], s[None]
    _tiled(d, s, TILE)


def contiguous(x: np.ndarray) -> np.ndarray:
    """x as a C-contiguous array (x itself when it is one), copied as copy_into copies."""
    if x.flags.c_contiguous:
        return x
    out = np.empty(x.shape, x.dtype)
    copy_into(out, x)
    return out


def omatcopy_transposed(src: np.ndarray, dst: np.ndarray | None = None) -> np.ndarray | None:
    """[N, B, A] (`dst` when given): each matrix of src [N, A, B] (C-contiguous f32 or f64)
    transposed by OpenBLAS's omatcopy (alpha 1), or None where numpy's BLAS has none.  For
    conv_chunks' NCHW operand and result: 0.16-0.22 ms against numpy's 0.42-1.1 for
    f32[8,64,3136] (one core, load 9).  alpha 1 may multiply: the same bits, but for
    subnormals under the caller's DAZ (which the chunks' gemms, flushed, read as zeros
    anyway; their results hold none) and signalling NaNs quieted."""
    from .gang_gemm import numpy_blas_functions
    fns = numpy_blas_functions("cblas_somatcopy64_", "cblas_domatcopy64_")
    if fns is None or src.dtype not in fns or not src.flags.c_contiguous:
        return None
    fn = _omatcopy_type(src.dtype == np.float32)(fns[src.dtype])
    n, a, b = src.shape
    dst = np.empty((n, b, a), src.dtype) if dst is None else dst
    s0, d0, step = src.ctypes.data, dst.ctypes.data, a * b * src.itemsize
    for i in range(n):  # row-major (101), transposed (112)
        fn(101, 112, a, b, 1.0, s0 + i * step, b, d0 + i * step, a)
    return dst


@functools.lru_cache(maxsize=2)
def _omatcopy_type(single: bool):
    import ctypes
    i64, vp = ctypes.c_int64, ctypes.c_void_p
    real = ctypes.c_float if single else ctypes.c_double
    return ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, i64, i64, real, vp, i64, vp, i64)
