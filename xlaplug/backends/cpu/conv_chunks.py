"""A 1-D or 2-D convolution as an implicit GEMM: patch rows gathered a cache-sized chunk at a
time, each chunk multiplied as soon as it is gathered, on numba's threads.

convolution.py's general path gathers the whole patch matrix (im2col, [N*P, KK*C]: 58 MB for
a 3x3 convolution of f32[8,56,56,64]) and multiplies it once: every patch goes out to memory
and comes back for the product.  Here each thread gathers rows [r0, r1) of that matrix into
a buffer of its own (~0.5 MB: in its core's L2) and calls the very gemm numpy's matmul makes
for the whole product on those rows, into rows [r0, r1) of the result -- one BLAS thread per
gemm, numba's threads each taking the next chunk as it is free (atomic_counter.py; the gemm
call, the MXCSR's FTZ and DAZ bits per gemm and numpy's OpenBLAS: gang_gemm.py).  Measured
(one core, 2026-12-06, load 3-5): the whole-matrix gemm of that convolution 14.4 ms, its
gather 7.9 ms; 110 chunk gemms of cache-resident rows 8.5 ms.  The gather reads the
channels-last input directly, writing zeros where a tap falls in the padding, so there is
no padded copy either.

Where there are too few rows for two chunks (or no gemm to call from numba) the same
gather fills the whole patch matrix (`patches`) for convolution.py's one numpy product:
runs of channels copied by memcpy, in place of numpy's strided slice copy per tap and the
padded copy of the input (a 1-D or 2-D convolution's, and each output phase's of an input
gradient: conv_phases.py, whose output phases run in chunks too).

Bits: a chunk is whole rows of the patch matrix with the full K dimension, so each output
element is the same dot; what OpenBLAS would change is the kernel: the Haswell kernel runs
the rows past the last whole tile of 12 in another accumulation order (measured: chunks of
16 rows differ from the whole product from row 12 on, chunks of 24 or 48 do not), and small
products (M*N*K under ~7.3M: SkylakeX's "direct" sgemm, and its small-matrix kernels) run
on other kernels altogether.  So every chunk starts at a multiple of TILE_ROWS rows and
holds at least MIN_MNK multiply-adds: each row is then in the same kind of tile as in the
whole product, on one thread, and the result is that product's bits (tests/
test_conv_chunks.py, run with OPENBLAS_CORETYPE Haswell, SkylakeX, Zen and SapphireRapids).
The whole product on several BLAS threads splits rows at other places, so with Haswell
kernels its bits differ from one thread's; these are one thread's bits at any count.
"""
from __future__ import annotations

import functools

import numpy as np

from .blas_threads import one_blas_thread

# Chunk boundaries: a multiple of every sgemm/dgemm kernel's row tile (see above).
TILE_ROWS = 48
# Multiply-adds of the smallest chunk: above the direct and small-matrix kernels' limits.
MIN_MNK = 8 << 20
# Bytes of one chunk's patches: well inside a core's L2 (1-2 MB on current x86 parts),
# leaving room for the gemm's packed copies.
BLOCK_BYTES = 512 << 10
VERSION = 6


def chunk_count(m: int, k: int, o: int, itemsize: int) -> int:
    """How many chunks the m rows of a [m, k] @ [k, o] product take (< 2: none)."""
    rows = max(-(-MIN_MNK // max(o * k, 1)), BLOCK_BYTES // max(k * itemsize, 1), TILE_ROWS)
    # Whole tiles: m / count >= rows, so starts rounded down to TILE_ROWS (chunk_starts)
    # keep every chunk at rows or more.  (It was m // (rows + TILE_ROWS): 3 chunks of a
    # weight gradient's 288 rows where 6 of 48 hold MIN_MNK each -- 2 and 1 on 2 threads.)
    return m // (-(-rows // TILE_ROWS) * TILE_ROWS)


def chunk_starts(m: int, k: int, o: int, itemsize: int) -> list[int]:
    """The first row of each chunk of a [m, k] @ [k, o] product, then m: [0, m] where it
    takes fewer than two."""
    return tile_starts(m, max(1, chunk_count(m, k, o, itemsize)), TILE_ROWS)


def tile_starts(length: int, count: int, tile: int) -> list[int]:
    """The starts of `count` near-equal chunks of `length`, each rounded down to a multiple of
    `tile`, then `length` (also pool_gemm.py's rows and columns)."""
    return [(i * length // count) // tile * tile for i in range(count)] + [length]


def window(wdims) -> list[tuple[int, int, int]]:
    """(stride, rhs_dilate, pad_lo) of each window dimension, for `patches` and `chunked`."""
    return [(wd.stride, wd.rhs_dilate, wd.pad_lo) for wd in wdims]


def gathers(wdims) -> bool:
    """Whether `patches` gathers this convolution's patches: 1-D or 2-D, no input dilation
    (the input-dilated ones run by phases, each phase an undilated window)."""
    return len(wdims) in (1, 2) and all(wd.lhs_dilate == 1 for wd in wdims)


def applies(x_dtype, wdims, groups: int, batch_groups: int, ctx) -> bool:
    """Whether a convolution (compute type, window, groups) may run in chunks; the sizes are
    chunk_count's to judge."""
    from .blas_threads import devices_at_once
    from .gang_gemm import gemm_library
    if ctx is None or groups != 1 or batch_groups != 1 or not gathers(wdims):
        return False
    lib = gemm_library()
    if lib is None or np.dtype(x_dtype) not in lib:
        return False
    # Devices running at once share the cores already (and numba's team is one per process).
    return not devices_at_once(ctx)


def as_2d(x: np.ndarray) -> np.ndarray:
    """x [N, S..., C] as [N, H, W, C]: a 1-D convolution's input with one row."""
    return x[:, None] if x.ndim == 3 else x


def geometry(x: np.ndarray, ksz, win, s_out, o: int = 0) -> np.ndarray:
    """The gather's int64 geometry of x [N, S..., C] (1-D as 2-D with one row): out H, W,
    kernel H, W, (stride, dilation, pad_lo) of H then W, O, byte strides of N, H, W."""
    win = [tuple(v) for v in win]
    if len(win) == 1:
        ksz, s_out, win = (1,) + tuple(ksz), (1,) + tuple(s_out), [(1, 1, 0)] + win
    dims = list(s_out) + list(ksz) + [v for t in win for v in t] + [o] \
        + list(as_2d(x).strides[:3])
    return np.array(dims, np.int64)


def _geometry(x: np.ndarray, ksz, win, s_out, o: int = 0, table: dict | None = None):
    """(x as [N, H, W, C] with unit-stride channels, its `geometry`).  `table`: transposed
    copies by omatcopy allowed (the chunked path), kept there."""
    x = _channels_inner(as_2d(x), table)
    return x, geometry(x, ksz, win, s_out, o)


def contiguous_channels(x: np.ndarray) -> np.ndarray:
    """x, or a copy of it whose channels (last axis) lie side by side: what the gather reads."""
    return _channels_inner(x, None)


def _channels_inner(x: np.ndarray, table: dict | None) -> np.ndarray:
    """x itself where its channels (last axis) lie side by side: the gather reads any other
    strides (a weight gradient's operand, read as [C, H, W, N] from NHWC); else x copied so
    that they do -- where x is a contiguous block in another axis order and `table` is
    given, by omatcopy (one [C, rest] -> [rest, C] transpose per block of the axes before
    the channels in memory: NCHW's images), into a buffer of `table`; else by contiguous."""
    from .transpose_copy import contiguous, omatcopy_transposed
    if x.strides[-1] == x.itemsize or x.shape[-1] == 1:
        return x
    order = sorted(range(x.ndim), key=lambda d: -x.strides[d])  # memory order, slowest first
    if table is None or not np.transpose(x, order).flags.c_contiguous:
        return contiguous(x)
    c = x.ndim - 1
    lead, rest = order[:order.index(c)], order[order.index(c) + 1:]
    to = lead + rest + [c]
    key = ("channels-last", tuple(x.shape[d] for d in to), x.dtype.str)
    into = table.get(key)
    if into is None:  # kept from run to run, as the patch buffers
        into = table[key] = np.empty(key[1], x.dtype)
    nb = int(np.prod([x.shape[d] for d in lead], dtype=np.int64))
    if omatcopy_transposed(np.transpose(x, order).reshape(nb, x.shape[c], -1),
                  into.reshape(nb, -1, x.shape[c])) is None:
        return contiguous(x)
    return into.transpose(np.argsort(to))


def patches(x: np.ndarray, ksz, win, s_out, scratch: dict | None) -> np.ndarray:
    """[N*P, KK*C]: the patch matrix of x [N, S..., C] (any type: bytes are copied), in a
    buffer of `scratch` (convolution._patches says why it is kept)."""
    x, dims = _geometry(x, ksz, win, s_out)
    m = x.shape[0] * int(dims[0] * dims[1])
    shape = (m, int(dims[2] * dims[3]) * x.shape[-1])
    key = ("rows", shape, x.dtype.str)
    cols = scratch.get(key) if scratch is not None else None
    if cols is None:
        cols = np.empty(shape, x.dtype)
        if scratch is not None:
            scratch[key] = cols
    if cols.size:
        gathered_loop(_LOOP, "whole", False, parallel=False)(x, cols, dims)
    return cols


def chunked(x: np.ndarray, w: np.ndarray, win, s_out, ctx) -> np.ndarray | None:
    """[N*P, O]: the convolution of x [N, S..., C] (compute type) with w [K..., C, O]
    (reversal applied), or None where it has too few rows for two chunks."""
    from .gang_gemm import gemm_library
    o, ksz = w.shape[-1], w.shape[:-2]
    m = x.shape[0] * int(np.prod(s_out, dtype=np.int64))
    k = int(np.prod(ksz, dtype=np.int64)) * x.shape[-1]
    starts = np.array(chunk_starts(m, k, o, x.dtype.itemsize), np.int64)
    nch = len(starts) - 1
    if nch < 2:
        return None
    table = ctx.kernel_cache.table("conv_patches")
    x, dims = _geometry(x, ksz, win, s_out, o, table)
    wm = np.ascontiguousarray(w).reshape(k, o)
    bufs, _ = thread_buffers(table, "chunks", nch, int(np.max(np.diff(starts))) * k,
                                   x.dtype)
    y = np.empty((m, o), x.dtype)
    with one_blas_thread():
        gathered_loop(_LOOP, "chunks", x.dtype == np.float32)(
            gemm_library()[x.dtype], x, wm.__array_interface__["data"][0],
            y.__array_interface__["data"][0], bufs, starts, dims, np.zeros(1, np.int64))
    return y


def thread_buffers(table: dict, name: str, items: int, size: int, dtype):
    """(a [threads, size] buffer of `table`'s, threads): one buffer per numba thread that
    takes work items (at most `items` of them), kept from run to run -- a fresh one faults
    its pages in on every run.  The threads are numba's (the fused loops' count), not the
    run's BLAS count: the module's convolutions are left out of that count
    (blas_threads.largest_product), so that OpenBLAS's own team, which spins between
    products, does not wake for them and contend with numba's for the cores."""
    import numba
    threads = max(1, min(items, numba.get_num_threads()))
    key = (name, threads, int(size), np.dtype(dtype).str)
    bufs = table.get(key)
    if bufs is None:
        bufs = table[key] = np.empty((threads, key[2]), dtype)
    return bufs, threads


# The patch gather, also conv_phases.py's (its loop's text starts with this one).
GATHER = """
from xlaplug.backends.cpu.atomic_counter import fetch_add
from xlaplug.backends.cpu.gang_intrinsics import (call_gemm, copy_bytes, flush_on, ieee,
                                                  mxcsr_set, zero_bytes)
# conv_chunks version {version}
@register_jitable
def gather(x, dims, r0, r1, at):
    # patch rows [r0, r1) of x [N, H, W, C] from address `at` on, KK*C elements a row
    n, h, wd, c = x.shape
    oh, ow, kh, kw = dims[0], dims[1], dims[2], dims[3]
    sh, dh, ph, sw, dw, pw = dims[4], dims[5], dims[6], dims[7], dims[8], dims[9]
    sn, sy, sx = dims[11], dims[12], dims[13]  # x's byte strides (channels: unit)
    xa, row = np.int64(x.ctypes.data), c * x.itemsize  # bytes of one position's channels
    at = np.int64(at)
    b = r0 // (oh * ow)  # row r0's image and position; the rows after it count on from
    i = (r0 - b * oh * ow) // ow  # there (two integer divisions a row cost more than the
    j = r0 - b * oh * ow - i * ow - 1  # copies of a 3-channel image's patch)
    for r in range(r0, r1):
        j += 1
        if j == ow:
            j = 0
            i += 1
            if i == oh:
                i = 0
                b += 1
        x0 = j * sw - pw
        for a in range(kh):
            yy = i * sh + a * dh - ph
            if dw == 1 and sx == row and 0 <= yy < h and x0 >= 0 and x0 + kw <= wd:
                copy_bytes(at, xa + b * sn + yy * sy + x0 * sx, kw * row)  # side by side
                at += kw * row
                continue
            for q in range(kw):
                xx = x0 + q * dw
                if 0 <= yy < h and 0 <= xx < wd:
                    copy_bytes(at, xa + b * sn + yy * sy + xx * sx, row)
                else:
                    zero_bytes(at, row)  # padding
                at += row
"""

_LOOP = """

def whole(x, cols, dims):
    gather(x, dims, 0, cols.shape[0], np.int64(cols.ctypes.data))


def chunks(fn, x, w, y, bufs, starts, dims, taken):
    k, o, size = dims[2] * dims[3] * x.shape[3], dims[10], x.itemsize
    nt, nch, step = bufs.shape[0], starts.shape[0] - 1, bufs.shape[1] * size
    counter = np.int64(taken.ctypes.data)  # the next chunk to take (atomic_counter.py)
    caller = ieee()  # threads numba starts now inherit IEEE arithmetic (gang_gemm.py)
    for t in prange(nt):
        base = np.int64(bufs.ctypes.data) + t * step
        old = flush_on()
        ch = fetch_add(counter, 1)
        while ch < nch:
            r0, r1 = starts[ch], starts[ch + 1]
            gather(x, dims, r0, r1, base)
            call_gemm(fn, 111, 111, r1 - r0, o, k, {one}, base, k, w, o, {zero},
                      y + r0 * o * size, o)
            ch = fetch_add(counter, 1)
        mxcsr_set(old)
    mxcsr_set(caller)
"""


@functools.lru_cache(maxsize=8)
def gathered_loop(template: str, entry: str, single: bool, parallel: bool = True):
    """The compiled `entry` of GATHER followed by `template`, whose `{one}` and `{zero}` are
    the gemm's alpha and beta (f32 when `single`: sgemm, else dgemm): this module's `whole`
    (serial) and `chunks`, the input gradient's phases (conv_phases.py), the weight
    gradient (conv_wgrad.py)."""
    from .jit_cache import cached_function
    one, zero = ("np.float32(1.0)", "np.float32(0.0)") if single else ("1.0", "0.0")
    src = GATHER.format(version=VERSION) + template.format(one=one, zero=zero)
    return cached_function(src, {}, entry, nogil=True, parallel=parallel)
