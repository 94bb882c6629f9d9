"""A convolution with more taps than output positions (a weight gradient, as jax lowers it:
f01b_i01o->01bf) as the transposed product, its long contraction split in chunks.

Such a convolution, x [B, S..., C] with w [K..., C, O] into y [B, P..., O], contracts
over C*KK (the training batch's images times the forward output's positions: 16 x 32 x 32
for a 3x3 convolution's gradient) to B*P outputs per channel (3 x 3 x 3).  convolution.py's
patch rows are one per output position, B*P of them, each a window of the whole input
through a transposed copy of x (its images side by side) times the kernel copied to [KK*C,
O]: two copies of the operands and a product of few rows.  Read the other way round,

    y[(p, b), o] = sum over (c, k) of x[b, p*stride + k*rhs_dilate - pad, c] * w[(c, k), o]

the patch matrix A[(c, k), (p, b)] is the forward convolution's own im2col of x read as
[C, S..., B] (for jax's NHWC operands: the activations as they lie, a run of kw*B values
per patch row; conv_chunks' gather with stride and dilation swapped), and w read as
[C*KK, O] is the output gradient as it lies (NHWC): y = A^T @ w, no copy of either.  The
rows of A are taken in chunks (about BLOCK_BYTES of patches each), each chunk's product
A_chunk^T @ w_chunk on one of numba's threads into a partial result of its own (one BLAS
thread each, the next chunk taken as a thread is free), and the partials added in chunk
order: the same bits at any thread count.  Not the whole product's bits: the contraction is
cut, as XLA's own kernels cut it in their order.

Only where B*P*O is small (WHERE_MOST outputs: the partials cost a pass each); larger ones
take conv_chunks' row chunks.  Measured (2026-12-06, load 1.2-1.7, medians of 7 x 20
calls): the gradient of convnet_train's stride-2 layer (f32[16,32,32,32] with
[16,16,16,64]) 0.87-0.90 ms against 1.27-1.29 by the row chunks, on one core or two; its
first layer's (an RGB image: runs of 3 positions x 3 channels) 0.43 both ways on one
core, and this way it has chunks for a second thread.
"""
from __future__ import annotations


import numpy as np

from . import conv_chunks
from .blas_threads import one_blas_thread

# Outputs (B*P*O) of the convolutions taken this way: each chunk writes a partial of this
# many elements, against its ~BLOCK_BYTES of patches.
WHERE_MOST = 1 << 16


def applies(cp, x_dtype, ctx) -> bool:
    """Whether the convolution of plan `cp` runs as the transposed product (conv_chunks
    .applies, more taps than output positions, few outputs)."""
    return (conv_chunks.applies(x_dtype, cp.window, cp.groups, cp.batch_groups, ctx)
            and form(cp))


def form(cp) -> bool:
    """The shape condition alone: more taps than output positions, B*P*O <= WHERE_MOST."""
    return cp.kk > cp.p and cp.n * cp.p * cp.o <= WHERE_MOST and cp.groups == 1 \
        and cp.batch_groups == 1


def gradient(x: np.ndarray, w: np.ndarray, wdims, s_out, ctx) -> np.ndarray:
    """[B, P..., O] (a view of a [P..., B, O] array): the convolution of x [B, S..., C]
    (compute type) with w [K..., C, O] (reversal applied), as the module docstring says."""
    from .gang_gemm import gemm_library
    nsp = len(s_out)
    b, c, o = x.shape[0], x.shape[-1], w.shape[-1]
    ksz = tuple(w.shape[:nsp])
    p, kk = int(np.prod(s_out, dtype=np.int64)), int(np.prod(ksz, dtype=np.int64))
    m, rows = p * b, c * kk
    xt = conv_chunks.contiguous_channels(
        x.transpose((nsp + 1,) + tuple(range(1, nsp + 1)) + (0,)))  # [C, S..., B]
    wt = np.ascontiguousarray(w.transpose((nsp,) + tuple(range(nsp)) + (nsp + 1,)))
    # the gather's "windows" are the output positions, its "positions" the kernel's taps
    dims = conv_chunks.geometry(xt, s_out, [(wd.rhs_dilate, wd.stride, wd.pad_lo)
                                            for wd in wdims], ksz, o)
    step = max(-(-conv_chunks.BLOCK_BYTES // (m * x.itemsize)), 1)
    starts = np.array(list(range(0, rows, step)) + [rows], np.int64)
    nch = len(starts) - 1
    table = ctx.kernel_cache.table("conv_patches")
    bufs, _ = conv_chunks.thread_buffers(table, "gradient patches", nch, step * m,
                                               x.dtype)
    parts = np.empty((nch, m, o), x.dtype)
    with one_blas_thread():
        conv_chunks.gathered_loop(_LOOP, "gradient", x.dtype == np.float32)(
            gemm_library()[x.dtype], conv_chunks.as_2d(xt), wt.__array_interface__["data"][0],
            parts, bufs, starts, dims, np.zeros(1, np.int64))
    y = parts[0].copy()  # the result holds no view of the partials
    for i in range(1, nch):  # in chunk order: the same bits at any thread count
        y += parts[i]
    return y.reshape((p, b, o)).transpose(1, 0, 2).reshape((b,) + tuple(s_out) + (o,))


_LOOP = """

def gradient(fn, x, w, parts, bufs, starts, dims, taken):
    # chunk ch: patch rows [starts[ch], starts[ch + 1]) of A, A_chunk^T @ w_chunk -> parts[ch]
    m, o, size = parts.shape[1], parts.shape[2], x.itemsize
    nt, nch = bufs.shape[0], starts.shape[0] - 1
    counter = np.int64(taken.ctypes.data)  # the next chunk to take (atomic_counter.py)
    caller = ieee()  # threads numba starts now inherit IEEE arithmetic (gang_gemm.py)
    for t in prange(nt):
        base = np.int64(bufs.ctypes.data) + t * bufs.shape[1] * size
        old = flush_on()
        while True:
            ch = fetch_add(counter, 1)
            if ch >= nch:
                break
            r0, r1 = starts[ch], starts[ch + 1]
            gather(x, dims, r0, r1, base)
            call_gemm(fn, 112, 111, m, o, r1 - r0, {one}, base, m, w + r0 * o * size, o,
                      {zero}, np.int64(parts.ctypes.data) + ch * m * o * size, o)
        mxcsr_set(old)
    mxcsr_set(caller)
"""

