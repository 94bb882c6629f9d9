"""`convolution` on the CPU: channels-last patches and one GEMM for the whole batch.

Every operand is viewed channels-last -- input [N, S..., C], kernel [K..., I, O], output
[N, S_out..., O] -- which for jax's NHWC / HWIO / NHWC is the operands' own layout: no
transposed copies in or out.  The input is dilated and padded (lhs_dilate, pad), then its
patches are gathered into one matrix, a row per output position and a column per (tap,
channel):

    cols[n, p, kk, c] = x[n, p*stride + k*rhs_dilate, c]        # [N*P, KK*C]

and the convolution is `cols @ w.reshape(KK*C, O)`: one product of N*P rows on the run's
BLAS threads (blas_threads.py), where a product per image (O x CKK by CKK x P, the earlier
form) kept a training step's backward convolutions -- 16 images of 1,024 positions -- on
small products with the output transposed after.  1-D and 2-D patches are gathered by
conv_chunks.py's compiled loop (runs of channels by memcpy, zeros over padding, no padded
copy); where the product has rows enough, in cache-sized chunks each multiplied as soon as it
is gathered, on numba's threads (an implicit GEMM: the whole patch matrix never goes to
memory), with the whole product's bits.  Other ranks copy contiguous channel rows with numpy:
a strided slice of x per tap when there are fewer taps than output positions (a forward
convolution: 9 taps, 1,024 positions), else a window of x per output position (a weight
gradient: 1,024 taps, 9 positions).  Two forms take paths of their own, on numba's threads
too: a 1-D or 2-D weight gradient with few outputs as the transposed product, its
contraction in chunks (conv_wgrad.py), and an input-dilated convolution (a strided one's
input gradient) by output phases, all phases' chunks one list of work (conv_phases.py).
The convolutions that run on numba's threads stay out of the run's BLAS count
(conv_phases.threads_itself).

feature_group_count G: a batch of G products (each group's I channels, its O/G outputs);
batch_group_count BG: a batch of BG products (each group's N/BG images, its O/BG outputs).
Types as for dot (linalg.py): narrow floats in f32 rounded once, f32 in f32 (sgemm: its own
summation order, as XLA:CPU's Eigen contraction has its own), integers exact.
"""
from __future__ import annotations

import itertools

import numpy as np

from ..common.plans import conv_plan
from ..registry import kernel
from . import conv_chunks, conv_phases, conv_wgrad
from .linalg import _finish, _to_compute
from .pool_gemm import matmul as pooled_matmul, pools
from .transpose_copy import contiguous, omatcopy_transposed


def _dilate_pad(x: np.ndarray, pads) -> np.ndarray:
    """x [N, S..., C] with its spatial dims padded / dilated: pads = [(lo, hi, interior)]."""
    if all(p == (0, 0, 0) for p in pads):
        return x
    from .data_movement import pad_array
    return pad_array(x, [(0, 0, 0)] + list(pads) + [(0, 0, 0)], 0)


def _patches(x: np.ndarray, wdims, ksz, s_out, scratch: dict | None = None) -> np.ndarray:
    """[N, S_out..., K..., C]: the input window of every output position (see above).
    `scratch`: a table (the context's kernel cache) whose buffer of this shape is reused from
    run to run -- a fresh one is tens of MB of memory the kernel first touches on every run,
    whose page faults cost more than the gather (a forward 3x3 convolution of 8x64x56x56:
    58 MB; 100 ms of page faults against 3.6 ms of product on a sandboxed 13-core host)."""
    n, c = x.shape[0], x.shape[-1]
    shape = (n,) + tuple(s_out) + tuple(ksz) + (c,)
    key = (shape, x.dtype.str)
    cols = scratch.get(key) if scratch is not None else None
    if cols is None:
        cols = np.empty(shape, x.dtype)
        if scratch is not None:
            scratch[key] = cols
    if cols.size == 0:
        return cols
    nsp = len(s_out)
    if int(np.prod(ksz, dtype=np.int64)) <= int(np.prod(s_out, dtype=np.int64)):
        for koff in itertools.product(*(range(k) for k in ksz)):
            src = tuple(slice(k * wd.rhs_dilate, k * wd.rhs_dilate + (o - 1) * wd.stride + 1,
                              wd.stride) for k, wd, o in zip(koff, wdims, s_out))
            cols[(slice(None),) + (slice(None),) * nsp + koff] = x[(slice(None),) + src]
    else:
        for pos in itertools.product(*(range(o) for o in s_out)):
            src = tuple(slice(p * wd.stride, p * wd.stride + (k - 1) * wd.rhs_dilate + 1,
                              wd.rhs_dilate) for p, wd, k in zip(pos, wdims, ksz))
            cols[(slice(None),) + pos] = x[(slice(None),) + src]
    return cols


def _products(cols: np.ndarray, w: np.ndarray, G: int, BG: int, threads: int = 1) -> np.ndarray:
    """[N*P, O] from the patches [N*P, KK, C] and the kernel [KK, I, O]; a large product on
    `threads` of numba's threads (pool_gemm.py: the run's product threads)."""
    npos, kk, c = cols.shape
    o = w.shape[-1]
    if G > 1:
        i, og = c // G, o // G
        xm = cols.reshape(npos, kk, G, i).transpose(2, 0, 1, 3).reshape(G, npos, kk * i)
        wm = w.reshape(kk, i, G, og).transpose(2, 0, 1, 3).reshape(G, kk * i, og)
        return _matmul(xm, wm, threads).transpose(1, 0, 2).reshape(npos, o)
    wm = w.reshape(kk * c, o)
    if BG > 1:
        ob = o // BG
        xm = cols.reshape(BG, npos // BG, kk * c)
        y = _matmul(xm, wm.reshape(kk * c, BG, ob).transpose(1, 0, 2), threads)  # [BG, Nb*P, Ob]
        return y.transpose(1, 0, 2).reshape(npos // BG, o)
    return _matmul(cols.reshape(npos, kk * c), wm, threads)


def _matmul(a: np.ndarray, b: np.ndarray, threads: int) -> np.ndarray:
    """a @ b, on `threads` of numba's threads where it pools (pool_gemm.py)."""
    (m, k), n = a.shape[-2:], b.shape[-1]
    if threads > 1 and pools(a.size // max(m * k, 1), m, k, n, a.dtype) and a.dtype == b.dtype:
        return pooled_matmul(a, b, threads)
    return np.matmul(a, b)


class _Dim:
    """A window dimension of a phase's sub-convolution (stride, rhs_dilate: what _patches
    reads)."""

    def __init__(self, stride: int, rhs_dilate: int):
        self.stride, self.rhs_dilate = stride, rhs_dilate


def _by_phases(x, w, wdims, ksz, s_out, ctx, scratch: dict | None = None) -> np.ndarray:
    """[N, S_out..., O] of an input-dilated convolution by output phases (conv_phases.py):
    in chunks on numba's threads where conv_phases.chunked runs, else each phase an
    undilated convolution of its own, one numpy product.  Every phase writes its own
    outputs, so `y` starts empty; `scratch` keeps the phases' patches from run to run (as
    _patches says: a fresh buffer's page faults cost more than its gather)."""
    if len(wdims) in (1, 2):
        y = conv_phases.chunked(x, w, wdims, s_out, ctx)
        if y is not None:
            return y
    n, c, o = x.shape[0], x.shape[-1], w.shape[-1]
    y = np.empty((n,) + tuple(s_out) + (o,), x.dtype)
    x = contiguous(x)  # once, not per phase
    for ph in conv_phases.phases(wdims, ksz, s_out, x.shape[1:-1]):
        ws = w[ph.taps]
        sub_k = ws.shape[:-2]
        if 0 in sub_k:
            y[(slice(None),) + ph.outs] = 0  # no tap meets a sample: sums of zeros
            continue
        if len(wdims) in (1, 2):  # the phase's window straight from x, as a crop or pad
            cols = conv_chunks.patches(x, sub_k, ph.win, ph.sub_out, scratch)
        else:
            pads = [(lo, (m - 1) * s + (k - 1) * d + 1 - lo - xd, 0) for (s, d, lo), m, k, xd
                    in zip(ph.win, ph.sub_out, sub_k, x.shape[1:-1])]
            dims = [_Dim(s, d) for s, d, _ in ph.win]
            cols = _patches(_dilate_pad(x, pads), dims, sub_k, ph.sub_out, scratch)
        kk = int(np.prod(sub_k, dtype=np.int64))
        ys = _matmul(cols.reshape(-1, kk * c), np.ascontiguousarray(ws).reshape(kk * c, o),
                     getattr(ctx, "product_threads", 1))
        y[(slice(None),) + ph.outs] = ys.reshape((n,) + tuple(ph.sub_out) + (o,))
    return y


@kernel("convolution")
def _convolution(ins, args, ctx):
    lhs, rhs = np.asarray(args[0]), np.asarray(args[1])
    out_dt = ins.shape.dtype
    cp = conv_plan(ins, lhs.shape, rhs.shape, lhs.dtype, rhs.dtype, out_dt)
    dn, wdims, G, BG = cp.dims, cp.window, cp.groups, cp.batch_groups
    ksz, s_out = tuple(cp.kernel_spatial), tuple(cp.out_spatial)
    x = _to_compute(lhs.transpose((dn.input_batch,) + tuple(dn.input_spatial)
                                  + (dn.input_feature,)), cp.compute_dtype)
    w = _to_compute(rhs.transpose(tuple(dn.kernel_spatial) + (dn.kernel_input_feature,
                                                              dn.kernel_output_feature)),
                    cp.compute_dtype)
    rev = [d for d, wd in enumerate(wdims) if wd.reversal]
    if rev:
        w = np.flip(w, axis=rev)
    if conv_wgrad.applies(cp, x.dtype, ctx):
        return _output(conv_wgrad.gradient(x, w, wdims, s_out, ctx), cp, dn, out_dt)
    if conv_chunks.applies(x.dtype, wdims, G, BG, ctx):
        y = conv_chunks.chunked(x, w, conv_chunks.window(wdims), s_out, ctx)
        if y is not None:
            return _output(y, cp, dn, out_dt, planes=True)
    scratch = ctx.kernel_cache.table("conv_patches") if ctx is not None else None
    if conv_phases.applies(wdims, G, BG):
        y = _by_phases(x, w, wdims, ksz, s_out, ctx, scratch)
        return _output(y, cp, dn, out_dt)
    if conv_chunks.gathers(wdims):
        cols = conv_chunks.patches(x, ksz, conv_chunks.window(wdims), s_out, scratch)
    else:
        x = _dilate_pad(x, [(wd.pad_lo, wd.pad_hi, wd.lhs_dilate - 1) for wd in wdims])
        cols = _patches(x, wdims, ksz, s_out, scratch)
    cols = cols.reshape(cp.n * cp.p, cp.kk, cp.c)
    w = np.ascontiguousarray(w).reshape(cp.kk, cp.i, cp.o)
    y = _products(cols, w, G, BG, getattr(ctx, "product_threads", 1))
    return _output(y, cp, dn, out_dt)


def _output(y, cp, dn, out_dt, planes: bool = False) -> np.ndarray:
    """[N, S_out..., O] in the compute type -> the result, in its own dimension order;
    `planes`: a channels-first result of the chunked path's, by omatcopy_transposed."""
    y = _finish(y, cp.kind, out_dt).reshape((cp.n_out,) + tuple(cp.out_spatial) + (cp.o,))
    canon = (dn.output_batch,) + tuple(dn.output_spatial) + (dn.output_feature,)
    order = np.argsort(canon)
    nsp = len(cp.out_spatial)
    if planes and nsp and list(order) == [0, nsp + 1] + list(range(1, nsp + 1)):
        res = omatcopy_transposed(y.reshape(cp.n_out, -1, cp.o))
        if res is not None:
            return res.reshape(tuple(y.shape[d] for d in order))
    return contiguous(y.transpose(order))
