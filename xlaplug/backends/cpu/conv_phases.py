"""An input-dilated convolution (a strided convolution's input gradient) by output phases, and
which convolutions run their products on numba's threads.

Output positions o = D*m + r of one phase r read only the taps k = k0, k0 + D, ... that land
on input samples (k0 = (pad_lo - r) mod D), at consecutive input positions: an undilated
convolution with the kernel's taps k0::D, so the zeros between samples (3 of 4 of the
products at D = 2 in 2-D) are neither gathered nor multiplied.  (XLA's sums skip the holes
too: an inf tap over a hole gives no NaN there.)  `phases` says each phase's window;
convolution.py multiplies them one numpy product each, or, for a 1-D or 2-D one, `chunked`
runs every phase's patch rows in chunks on numba's threads (conv_chunks.py's gather and
gemm, one BLAS thread each): the chunks of all phases are one list of work, largest first,
each thread taking the next one as it is free, so the threads share it evenly -- a phase
alone has too few rows for two chunks of conv_chunks' size (the 2-D input gradient of a
stride-2 3x3 convolution: phases of 4, 2, 2 and 1 taps).  Each chunk's result rows are
copied to their phase's strided outputs by the thread that made them.  A chunk is whole
rows of its phase's product, started and sized as conv_chunks says, so the bits are the
per-phase numpy product's, at any thread count.

`threads_itself`: the convolutions that run this way (or conv_chunks' way), which
blas_threads.largest_product leaves out of the run's BLAS count: OpenBLAS's own team spins
between products (measured, 2-core machine, a training step of two convolutions: 28-350 ms
a step with two BLAS threads against 7 ms with one, load 1.7 from another process).
"""
from __future__ import annotations

import itertools

import numpy as np

from . import conv_chunks, conv_wgrad
from .blas_threads import one_blas_thread


class Phase:
    """One output phase: `taps` (a slice per spatial dim of the kernel), `outs` (its output
    positions: a slice per spatial dim), `win` ((stride, rhs_dilate, pad_lo) per dim of its
    undilated window on x, pad_lo negative for a crop), `sub_out` (its output sizes)."""

    def __init__(self, taps, outs, win, sub_out):
        self.taps, self.outs, self.win, self.sub_out = taps, outs, win, sub_out


def applies(wdims, groups: int, batch_groups: int) -> bool:
    """Whether an input-dilated convolution runs by output phases: every dilated dimension
    at stride 1 without kernel dilation, and no groups."""
    dilated = [wd for wd in wdims if wd.lhs_dilate > 1]
    return bool(dilated) and groups == 1 and batch_groups == 1 and \
        all(wd.stride == 1 and wd.rhs_dilate == 1 for wd in dilated)


def phases(wdims, ksz, s_out, x_spatial) -> list[Phase]:
    """Every output phase with outputs (some may have no taps: their outputs are zeros)."""
    out = []
    for phase in itertools.product(*(range(wd.lhs_dilate) for wd in wdims)):
        taps, outs, win, sub_out = [], [], [], []
        for r, wd, k, od, xd in zip(phase, wdims, ksz, s_out, x_spatial):
            dd = wd.lhs_dilate
            if dd == 1:
                taps.append(slice(None))
                outs.append(slice(None))
                win.append((wd.stride, wd.rhs_dilate, wd.pad_lo))
                sub_out.append(od)
                continue
            k0 = (wd.pad_lo - r) % dd
            e0 = (r + k0 - wd.pad_lo) // dd  # input position of output m = 0's first tap
            taps.append(slice(k0, k, dd))
            outs.append(slice(r, od, dd))
            win.append((1, 1, -e0))
            sub_out.append(len(range(r, od, dd)))
        if 0 not in sub_out:
            out.append(Phase(tuple(taps), tuple(outs), win, tuple(sub_out)))
    return out


def chunked(x: np.ndarray, w: np.ndarray, wdims, s_out, ctx) -> np.ndarray | None:
    """[N, S_out..., O]: the input-dilated convolution of x [N, S..., C] (compute type,
    channels side by side) with w [K..., C, O] (reversal applied), its phases' chunks on
    numba's threads; None where conv_chunks does not apply (see `applies` there)."""
    from .gang_gemm import gemm_library
    if not conv_chunks.applies(x.dtype, [_Undilated] * len(wdims), 1, 1, ctx):
        return None
    n, c, o, nsp = x.shape[0], x.shape[-1], w.shape[-1], len(s_out)
    y = np.empty((n,) + tuple(s_out) + (o,), x.dtype)
    ksz = w.shape[:-2]
    x = conv_chunks.contiguous_channels(x)
    mats, dims, place, items = [], [], [], []
    for ph in phases(wdims, ksz, s_out, x.shape[1:-1]):
        ws = w[ph.taps]
        if 0 in ws.shape[:-2]:
            y[(slice(None),) + ph.outs] = 0  # no tap meets a sample: sums of zeros
            continue
        p = len(mats)
        k = int(np.prod(ws.shape[:-2], dtype=np.int64)) * c
        mats.append(np.ascontiguousarray(ws).reshape(k, o))
        dims.append(conv_chunks.geometry(x, ws.shape[:-2], ph.win, ph.sub_out, o))
        place.append([v for s in ((slice(0, 1),) * (2 - nsp) + ph.outs)
                      for v in (s.start or 0, s.step or 1)])
        m = n * int(np.prod(ph.sub_out, dtype=np.int64))
        starts = conv_chunks.chunk_starts(m, k, o, x.dtype.itemsize)
        items += [(p, r0, r1, (r1 - r0) * k) for r0, r1 in zip(starts[:-1], starts[1:])]
    if not items:
        return y
    items.sort(key=lambda t: -t[3])  # largest first: the threads take them as they are free
    table = ctx.kernel_cache.table("conv_patches")
    most = max(r1 - r0 for _, r0, r1, _ in items)
    bufs, _ = conv_chunks.thread_buffers(
        table, "phase patches", len(items), most * max(int(d[2] * d[3]) for d in dims) * c,
        x.dtype)
    outs, _ = conv_chunks.thread_buffers(table, "phase rows", len(items), most * o, x.dtype)
    y4 = y.reshape((n,) + (1,) * (2 - nsp) + tuple(s_out) + (o,))
    addr = np.array([a.__array_interface__["data"][0] for a in mats], np.int64)
    with one_blas_thread():
        conv_chunks.gathered_loop(_LOOP, "phases", x.dtype == np.float32)(
            gemm_library()[x.dtype], conv_chunks.as_2d(x), addr, y4, bufs, outs,
            np.array([t[:3] for t in items], np.int64), np.array(dims, np.int64),
            np.array(place, np.int64), np.zeros(1, np.int64))
    return y


class _Undilated:
    """A window dimension as conv_chunks.applies sees a phase's: no input dilation."""
    lhs_dilate = 1


def threads_itself(ins) -> bool:
    """Whether the convolution `ins` runs its products on numba's threads, one BLAS thread
    each, wherever the gemm is there to call (conv_chunks.chunked: rows enough for two
    chunks of the whole product; a weight gradient's form, conv_wgrad.py; or by phases,
    `chunked` above): 1-D or 2-D, no groups, a float compute type."""
    from ..common.plans import conv_plan
    from .gang_gemm import gemm_library
    if gemm_library() is None:
        return False
    lhs, rhs = ins.operands[0].shape, ins.operands[1].shape
    try:
        cp = conv_plan(ins, lhs.dims, rhs.dims, lhs.dtype, rhs.dtype, ins.shape.dtype)
    except Exception:  # noqa: BLE001 - a malformed one runs (and fails) on its own
        return False
    if cp.groups != 1 or cp.batch_groups != 1 or len(cp.window) not in (1, 2) \
            or np.dtype(cp.compute_dtype) not in (np.float32, np.float64):
        return False
    if applies(cp.window, 1, 1):
        return True
    if any(wd.lhs_dilate != 1 for wd in cp.window):
        return False
    if conv_wgrad.form(cp):
        return True
    m, k = cp.n * cp.p, cp.kk * cp.i
    return conv_chunks.chunk_count(m, k, cp.o, np.dtype(cp.compute_dtype).itemsize) >= 2


_LOOP = """

def phases(fn, x, w, y, bufs, outs, items, dims, place, taken):
    # items[t] = (phase, r0, r1); dims[p]: the phase's gather geometry; place[p] = (row0,
    # row step, col0, col step): its output (b, i, j) is y[b, row0 + step*i, col0 + step*j]
    nt, size = bufs.shape[0], x.itemsize
    o = y.shape[3]
    ya = np.int64(y.ctypes.data)
    sn, sh, sw = y.strides[0], y.strides[1], y.strides[2]
    counter = np.int64(taken.ctypes.data)  # the next item to take (atomic_counter.py)
    caller = ieee()  # threads numba starts now inherit IEEE arithmetic (gang_gemm.py)
    for t in prange(nt):
        base = np.int64(bufs.ctypes.data) + t * bufs.shape[1] * size
        rows = np.int64(outs.ctypes.data) + t * outs.shape[1] * size
        old = flush_on()
        while True:
            it = fetch_add(counter, 1)
            if it >= items.shape[0]:
                break
            p, r0, r1 = items[it, 0], items[it, 1], items[it, 2]
            d = dims[p]
            k = d[2] * d[3] * x.shape[3]
            gather(x, d, r0, r1, base)
            call_gemm(fn, 111, 111, r1 - r0, o, k, {one}, base, k, w[p], o, {zero}, rows, o)
            oh, ow = d[0], d[1]
            for r in range(r0, r1):
                b = r // (oh * ow)
                i = (r - b * oh * ow) // ow
                j = r - b * oh * ow - i * ow
                copy_bytes(ya + b * sn + (place[p, 0] + place[p, 1] * i) * sh
                           + (place[p, 2] + place[p, 3] * j) * sw,
                           rows + (r - r0) * o * size, o * size)
        mxcsr_set(old)
    mxcsr_set(caller)
"""

