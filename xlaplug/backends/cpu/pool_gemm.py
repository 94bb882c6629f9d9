"""Large f32/f64 matrix products on numba's threads, one BLAS thread each: one pool of threads
for a run's loops and its products, as XLA:CPU has one (RunOptions.blas_pool).

OpenBLAS's own team, once woken for a product, spins for its thread timeout (2^28 cycles,
~0.1 s) before it sleeps, so every fused loop, row loop and convolution that numba's threads
run after a multi-threaded product shares the cores with OpenBLAS's spinning workers: on a
13-core host a layernorm took 1.37 ms after a product and 0.68 with the spinning stopped,
and a conv net's convolutions ran 2.5-4.5x slower on 13 threads than on one.  Stopping the
spin (OPENBLAS_THREAD_TIMEOUT, read once when OpenBLAS loads) made every product that
OpenBLAS threads wake its team from sleep instead: an attention's 32 per-head products a
dot, each a wake-up.  Here a product splits into gemms that numba's threads take as they
come free -- the matrices of a batch, and rows of a matrix where a batch has fewer matrices
than threads -- each the call numpy's matmul makes (gang_gemm.py: the same routine, the same
operand layouts), on one BLAS thread, under the FTZ and DAZ bits the calling thread has.  One
wake-up of numba's team (passive waits: backends/cpu/__init__.py) a product; OpenBLAS's team
never runs (blas_threads.set_pooled sets numpy's OpenBLAS to one thread for the run).

Not the default, measured: on a quiet machine OpenBLAS's spinning team is at hand for the
next product where numba's sleeping threads must be woken, and it shares its packed copy of
the other operand where each chunk here packs its own -- a 512x1024x1024 product on 2 cores
2.83-2.91 ms against the team's 2.68 (load 0.23, 2026-12-07; benchmarks/pool_gemm.py); on a
busy one the team's spinning and its fixed shares cost more (an MLP step 9.6 ms against 21.7
at load 2.4, a third of the CPU time).

Bits: the matrices of a batch are numpy's very gemms.  Rows are split as conv_chunks.py splits
a patch matrix's: chunks start at multiples of TILE_ROWS and hold MIN_MNK multiply-adds or
more, so each row is in the same kind of tile as in the whole product on one thread -- the
whole product's one-thread bits at any thread count (tests/test_pool_gemm.py), where
OpenBLAS's own threads gave bits that depended on their count.  A product with too few rows
for two chunks (a small batch through a wide layer) splits by columns, at multiples of
COL_TILE: each chunk is numpy's gemm of those columns, but OpenBLAS's Haswell and Zen sgemm
kernels round a column chunk otherwise than the whole product (every split measured did;
dgemm's and the SkylakeX kernels did not), so there the bits depend on the thread count, as
they did on OpenBLAS's own threads.
"""
from __future__ import annotations

import functools

import numpy as np

from .conv_chunks import MIN_MNK, TILE_ROWS, tile_starts
from .gang_gemm import NO_TRANS, _layout, gemm_library

# 2*M*N*K of a product worth a wake-up of numba's team (blas_threads.FLOPS_PER_THREAD's rule:
# under two threads' worth the product stays on the calling thread).
POOL_FLOPS = 2 << 24
# Column chunks' starts: a multiple of every kernel's column tile.
COL_TILE = 64
# Bumped with any change to the loop below or to gang_intrinsics.py: the loop's cache key is
# its text.
_VERSION = 3


def pools(batch: int, m: int, k: int, n: int, dtype) -> bool:
    """Whether a [batch] x [m, k] @ [k, n] product of `dtype` runs here: f32 or f64, numpy's
    gemm there to call, and work enough for two threads -- not a vector times a matrix,
    which numpy computes with gemv."""
    return (np.dtype(dtype) in (np.float32, np.float64) and gemm_library() is not None
            and m > 1 and n > 1 and 2 * batch * m * k * n >= POOL_FLOPS)


def row_starts(m: int, k: int, n: int, parts: int) -> list[int]:
    """The first row of each of at most `parts` chunks of a [m, k] @ [k, n] product, then m:
    starts at multiples of TILE_ROWS, each chunk MIN_MNK multiply-adds or more."""
    return _starts(m, k * n, TILE_ROWS, parts)


def col_starts(m: int, k: int, n: int, parts: int) -> list[int]:
    """The first column of each of at most `parts` chunks of a [m, k] @ [k, n] product, then
    n: starts at multiples of COL_TILE, each chunk MIN_MNK multiply-adds or more."""
    return _starts(n, m * k, COL_TILE, parts)


def _starts(length: int, per_line: int, tile: int, parts: int) -> list[int]:
    """Chunks of `length` rows (or columns) of `per_line` multiply-adds each: whole tiles,
    MIN_MNK multiply-adds or more a chunk, at most `parts` of them."""
    size = max(-(-MIN_MNK // max(per_line, 1)), tile)
    size = -(-size // tile) * tile
    return tile_starts(length, max(1, min(parts, length // size)), tile)


def matmul(lhs: np.ndarray, rhs: np.ndarray, threads: int) -> np.ndarray:
    """lhs @ rhs ([..., m, k] @ [..., k, n]: the same batch dimensions; one float dtype) with
    one BLAS thread's bits, its gemms on up to `threads` of numba's threads; `@` where numpy
    would not call gemm on a matrix as it lies (it copies it, or takes syrk)."""
    batch, (m, k), n = lhs.shape[:-2], lhs.shape[-2:], rhs.shape[-1]
    calls = _calls(lhs, rhs, threads) if threads > 1 else None
    if calls is None:
        return np.matmul(lhs, rhs)
    out = np.empty(batch + (m, n), lhs.dtype)
    calls[:, 8] += out.__array_interface__["data"][0]
    from .blas_threads import one_blas_thread
    from .team_size import spread
    # its gemms in `threads` chunks, the team kept (team_size.Spread)
    with one_blas_thread(), spread(len(calls), threads):
        gemm_loop(lhs.dtype == np.float32)(gemm_library()[lhs.dtype], calls, k, n)
    return out


def _calls(lhs, rhs, threads: int) -> np.ndarray | None:
    """Per gemm: transpose flags, rows, columns, addresses and leading dimensions of its
    lhs rows and rhs columns, and its out block's byte offset in a C-contiguous result (one
    array: each array argument costs numba's dispatcher microseconds to type), or None where
    a matrix is not one BLAS takes as it lies.  A batch with fewer matrices than threads
    splits each by rows, where there are rows enough for two chunks, else by columns."""
    (m, k), n, size = lhs.shape[-2:], rhs.shape[-1], lhs.itemsize
    matrices = list(np.ndindex(lhs.shape[:-2]))
    parts = -(-threads // len(matrices))
    rows, cols = [0, m], [0, n]
    if parts > 1:
        rows = row_starts(m, k, n, parts)
        if len(rows) == 2:
            cols = col_starts(m, k, n, parts)
    calls = []
    for j, i in enumerate(matrices):
        a, w = lhs[i], rhs[i]
        la, lb = _layout(a), _layout(w)
        if la is None or lb is None or np.may_share_memory(a, w):
            return None
        pa, pb = (x.__array_interface__["data"][0] for x in (a, w))
        pc = j * m * n * size
        # row r of lhs lies r * lda elements on as it is, r elements on transposed; column c
        # of rhs c elements on as it is, c * ldb transposed
        rstep = la[1] if la[0] == NO_TRANS else 1
        cstep = 1 if lb[0] == NO_TRANS else lb[1]
        for r0, r1 in zip(rows, rows[1:]):
            for c0, c1 in zip(cols, cols[1:]):
                calls.append((la[0], lb[0], r1 - r0, c1 - c0, pa + r0 * rstep * size, la[1],
                              pb + c0 * cstep * size, lb[1], pc + (r0 * n + c0) * size))
    return np.array(calls, np.int64)


_LOOP = """
from xlaplug.backends.cpu.gang_intrinsics import call_gemm, flush_on, ieee, mxcsr_set
# pool_gemm version {version}
def pooled(fn, calls, k, n):
    caller = ieee()  # threads numba starts now inherit IEEE arithmetic, not the dot's FTZ
    for i in prange(calls.shape[0]):
        old = flush_on()
        call_gemm(fn, calls[i, 0], calls[i, 1], calls[i, 2], calls[i, 3], k, {one},
                  calls[i, 4], calls[i, 5], calls[i, 6], calls[i, 7], {zero}, calls[i, 8], n)
        mxcsr_set(old)
    mxcsr_set(caller)
"""


@functools.lru_cache(maxsize=2)
def gemm_loop(single: bool):
    """The compiled loop running every gemm of a `calls` array on numba's threads (this
    module's and gang_gemm.py's), f32 or f64."""
    from .jit_cache import cached_function
    one, zero = ("np.float32(1.0)", "np.float32(0.0)") if single else ("1.0", "0.0")
    src = _LOOP.format(version=_VERSION, one=one, zero=zero)
    return cached_function(src, {}, "pooled", nogil=True, parallel=True)
