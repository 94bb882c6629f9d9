"""A 1-D or 2-D convolution as an implicit GEMM: patch rows gathered a cache-sized chunk at a
time, each chunk multiplied as soon as it is gathered, on numba's threads.

convolution.py's general path gathers the whole patch matrix (im2col, [N*P, KK*C]: 58 MB for
a 3x3 convolution of f32[8,56,56,64]) and multiplies it once: every patch goes out to memory
and comes back for the product.  Here each thread gathers rows [r0, r1) of that matrix into
a buffer of its own (~0.5 MB: in its core's L2) and calls the very gemm numpy's matmul makes
for the whole product on those rows, into rows [r0, r1) of the result -- one BLAS thread per
gemm, the threads of the run's BLAS count each taking chunks (the gemm call, the MXCSR's FTZ
and DAZ bits per gemm and numpy's OpenBLAS: gang_gemm.py).  Measured (one core, 2026-12-06,
load 3-5): the whole-matrix gemm of that convolution 14.4 ms, its gather 7.9 ms; 110 chunk
gemms of cache-resident rows 8.5 ms.  The gather reads the channels-last input directly,
writing zeros where a tap falls in the padding, so there is no padded copy either.

Bits: a chunk is whole rows of the patch matrix with the full K dimension, so each output
element is the same dot; what OpenBLAS would change is the kernel: it runs a row block
(a tile of 12 rows in the Haswell kernel, of 16 in SkylakeX's) by another accumulation order
at the tail of the product than in whole tiles, and small products (M*N*K under ~7.3M:
SkylakeX's "direct" sgemm, and its small-matrix kernels) by other kernels altogether.  So
every chunk starts at a multiple of TILE_ROWS rows and holds at least MIN_MNK
multiply-adds: then every row is in the same kind of tile as in the whole product, on one
thread, and the result is that product's bits (tests/test_conv_chunks.py; Haswell and
SkylakeX kernels checked on 9..128-channel shapes).  The whole product on several BLAS
threads splits rows at other places, so its bits could differ from one thread's (Haswell);
these are one thread's bits at any thread count.
"""
from __future__ import annotations

import functools
import os

import numpy as np

# Chunk boundaries: a multiple of every sgemm/dgemm kernel's row tile (see above).
TILE_ROWS = 48
# Multiply-adds of the smallest chunk: above the direct and small-matrix kernels' limits.
MIN_MNK = 8 << 20
# Bytes of one chunk's patches: well inside a core's L2 (1-2 MB on current x86 parts),
# leaving room for the gemm's packed copies.
BLOCK_BYTES = 512 << 10
_VERSION = 1


def chunk_count(m: int, k: int, o: int, itemsize: int) -> int:
    """How many chunks the m rows of a [m, k] @ [k, o] product take (< 2: none)."""
    rows = max(-(-MIN_MNK // max(o * k, 1)), BLOCK_BYTES // max(k * itemsize, 1), TILE_ROWS)
    return m // (rows + TILE_ROWS)  # rounding starts down to TILE_ROWS keeps each >= rows


def applies(x_dtype, wdims, groups: int, batch_groups: int, ctx) -> bool:
    """Whether a convolution (compute type, window, groups) runs here; the sizes are
    chunk_count's to judge."""
    from .blas_threads import devices_at_once
    from .gang_gemm import gemm_library
    if ctx is None or groups != 1 or batch_groups != 1 or len(wdims) not in (1, 2):
        return False
    if any(wd.lhs_dilate != 1 for wd in wdims):
        return False  # the input-dilated ones run by phases (convolution._by_phases)
    lib = gemm_library()
    if lib is None or np.dtype(x_dtype) not in lib:
        return False
    # Devices running at once share the cores already (and numba's team is one per process).
    return not devices_at_once(ctx)


def chunked(x: np.ndarray, w: np.ndarray, wdims, s_out, ctx) -> np.ndarray | None:
    """[N*P, O]: the convolution of x [N, S..., C] (compute type) with w [K..., C, O]
    (reversal applied), or None where it has too few rows for two chunks."""
    from .transpose_copy import contiguous
    n, c, o = x.shape[0], x.shape[-1], w.shape[-1]
    ksz = w.shape[:-2]
    kk = int(np.prod(ksz, dtype=np.int64))
    p = int(np.prod(s_out, dtype=np.int64))
    m, k = n * p, kk * c
    nch = chunk_count(m, k, o, x.dtype.itemsize)
    if nch < 2:
        return None
    geom = [v for wd in wdims for v in (wd.stride, wd.rhs_dilate, wd.pad_lo)]
    if len(wdims) == 1:  # a 1-D convolution as 2-D with one row
        x, ksz, s_out, geom = x[:, None], (1,) + tuple(ksz), (1,) + tuple(s_out), [1, 1, 0] + geom
    x = contiguous(x)
    wm = np.ascontiguousarray(w).reshape(k, o)
    starts = np.array([(i * m // nch) // TILE_ROWS * TILE_ROWS for i in range(nch)] + [m],
                      np.int64)
    blas = _numpy_blas()
    threads = max(1, min(blas.num_threads if blas is not None else 1, nch,
                         _numba_threads()))
    table = ctx.kernel_cache.table("conv_patches")
    key = ("chunks", threads, int(np.max(np.diff(starts))) * k, x.dtype.str)
    bufs = table.get(key)
    if bufs is None:  # kept from run to run: a fresh one faults its pages in every run
        bufs = table[key] = np.empty((threads, key[2]), x.dtype)
    y = np.empty((m, o), x.dtype)
    dims = np.array(list(s_out) + list(ksz) + geom + [o], np.int64)
    _run(x, wm, y, bufs, starts, dims, threads, blas)
    return y


def _run(x, wm, y, bufs, starts, dims, threads: int, blas) -> None:
    import numba
    from .gang_gemm import gemm_library
    loop = _chunk_loop(x.dtype == np.float32)
    before_numba = numba.get_num_threads()
    # one BLAS thread per gemm: a gemm called from a numba thread would otherwise start
    # OpenBLAS's own team (process-wide, from every numba thread at once)
    before_blas = blas.num_threads if blas is not None else 1
    if before_blas != 1:
        blas.set_num_threads(1)
    numba.set_num_threads(threads)
    try:
        loop(gemm_library()[x.dtype], x, wm.__array_interface__["data"][0],
             y.__array_interface__["data"][0], bufs, starts, dims)
    finally:
        numba.set_num_threads(before_numba)
        if before_blas != 1:
            blas.set_num_threads(before_blas)


@functools.lru_cache(maxsize=1)
def _numpy_blas():
    """threadpoolctl's controller of numpy's OpenBLAS (the library gang_gemm calls)."""
    from .blas_threads import blas_libraries
    for lib, _ in blas_libraries():
        if "numpy" in os.path.basename(os.path.dirname(lib.filepath)):
            return lib
    return None


def _numba_threads() -> int:
    import numba
    return numba.config.NUMBA_NUM_THREADS


_LOOP = """
from xlaplug.backends.cpu.gang_intrinsics import (call_gemm, copy_bytes, flush_on, ieee,
                                                  mxcsr_set, zero_bytes)
# conv_chunks version {version}
def chunks(fn, x, w, y, bufs, starts, dims):
    n, h, wd, c = x.shape
    oh, ow, kh, kw = dims[0], dims[1], dims[2], dims[3]
    sh, dh, ph, sw, dw, pw, o = dims[4], dims[5], dims[6], dims[7], dims[8], dims[9], dims[10]
    k, size = kh * kw * c, x.itemsize
    xa, row = x.ctypes.data, c * size  # bytes of one input position's channels
    nt, nch, step = bufs.shape[0], starts.shape[0] - 1, bufs.shape[1] * size
    caller = ieee()  # threads numba starts now inherit IEEE arithmetic (gang_gemm.py)
    for t in prange(nt):
        base = bufs.ctypes.data + t * step
        old = flush_on()
        for ch in range(t, nch, nt):
            r0, r1 = starts[ch], starts[ch + 1]
            at = base
            for r in range(r0, r1):
                b = r // (oh * ow)
                i = (r - b * oh * ow) // ow
                j = r - b * oh * ow - i * ow
                x0 = j * sw - pw
                for a in range(kh):
                    yy = i * sh + a * dh - ph
                    src = xa + ((b * h + yy) * wd + x0) * row
                    if dw == 1 and 0 <= yy < h and x0 >= 0 and x0 + kw <= wd:
                        copy_bytes(at, src, kw * row)  # the row's kw taps lie side by side
                        at += kw * row
                        continue
                    for q in range(kw):
                        xx = x0 + q * dw
                        if 0 <= yy < h and 0 <= xx < wd:
                            copy_bytes(at, src + q * dw * row, row)
                        else:
                            zero_bytes(at, row)  # padding
                        at += row
            call_gemm(fn, 111, 111, r1 - r0, o, k, {one}, base, k, w, o, {zero},
                      y + r0 * o * size, o)
        mxcsr_set(old)
    mxcsr_set(caller)
"""


@functools.lru_cache(maxsize=2)
def _chunk_loop(single: bool):
    from .jit_cache import cached_function
    one, zero = ("np.float32(1.0)", "np.float32(0.0)") if single else ("1.0", "0.0")
    src = _LOOP.format(version=_VERSION, one=one, zero=zero)
    return cached_function(src, {}, "chunks", nogil=True, parallel=True)
