"""reduce-window and select-and-scatter.

Window placement follows XLA: output position o and window position w along a dimension
reach position o*stride + w*rhs_dilate - pad_lo of the padded, base-dilated operand (operand
element i sits at i*lhs_dilate).  Positions on padding or in a dilation hole are skipped:
the fold starts from the init value and takes only operand elements, in row-major window
order (HloEvaluator's IterateThroughWindow) -- with an identity init value that is the same
as padding with the init value.

select-and-scatter (HloEvaluator::HandleSelectAndScatter): the output starts as the init
value; for each source element in row-major order, the window's first in-bounds element is
selected, then each later element e replaces the selection s unless select(s, e) is true;
finally out[s] = scatter(source, out[s]).
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..registry import kernel
from . import comp_patterns as P
from .jit_drivers import (from_numba, numba_array, numba_dtype, numba_scalar, pick,
                          scalar_callable, select_and_scatter_loop, window_driver)


def _tables(operand_shape, out_dims, window):
    """Per dimension, the operand index each (output position, window position) reaches, or
    -1; concatenated, with each dimension's offset."""
    parts, offs, off = [], [], 0
    for n, o_n, wd in zip(operand_shape, out_dims, window.dims):
        o = np.arange(o_n, dtype=np.int64)[:, None]
        w = np.arange(wd.size, dtype=np.int64)[None, :]
        pos = o * wd.stride + w * wd.rhs_dilate - wd.pad_lo
        ld = wd.lhs_dilate
        idx = pos // ld
        ok = (pos >= 0) & (pos % ld == 0) & (idx < n)
        t = np.where(ok, idx, -1).reshape(-1)
        parts.append(t)
        offs.append(off)
        off += t.size
    table = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    return table, np.array(offs, np.int64)


def _strides(shape):
    s = np.ones(len(shape), np.int64)
    for d in range(len(shape) - 2, -1, -1):
        s[d] = s[d + 1] * shape[d + 1]
    return s


def _window_args(operand_shape, out_dims, window):
    table, toff = _tables(operand_shape, out_dims, window)
    return (_strides(operand_shape), np.array(out_dims, np.int64),
            np.array([wd.size for wd in window.dims], np.int64), table, toff)


@kernel("reduce-window")
def _reduce_window(ins, args, ctx):
    n = len(args) // 2
    xs = [np.asarray(x) for x in args[:n]]
    inits = [np.asarray(i) for i in args[n:]]
    window = ins.attrs["window"]
    comp = ins.attrs["to_apply"]
    shapes = ins.shape.tuple_shapes if ins.shape.is_tuple else (ins.shape,)
    out_dims = shapes[0].dims
    if n == 1:
        fast = _fast_reduce_window(comp, xs[0], inits[0], window, shapes[0])
        if fast is not None:
            return fast
    outs = [np.empty(int(np.prod(out_dims, dtype=np.int64)), numba_dtype(s.dtype))
            for s in shapes]
    if outs[0].size:
        flat = [np.ascontiguousarray(numba_array(x)).reshape(-1) for x in xs]
        if flat[0].size == 0:  # every window is on padding
            res = [np.full(s.dims, i, s.dtype) for i, s in zip(inits, shapes)]
            return tuple(res) if ins.shape.is_tuple else res[0]
        fn, jit = scalar_callable(ctx, comp)
        pick(window_driver(n), jit)(fn, *flat, *[numba_scalar(i) for i in inits], *outs,
                                    *_window_args(xs[0].shape, out_dims, window))
    res = [from_numba(o, s.dtype).reshape(s.dims) for o, s in zip(outs, shapes)]
    return tuple(res) if ins.shape.is_tuple else res[0]


def _fast_reduce_window(comp, x, init, window, shape):
    op = P.binary_op(comp)
    if op is None or x.dtype != shape.dtype or not P.is_identity(op, init):
        return None
    uf = P.ufunc_for(op, shape.element_type, widened=True, xla_loop=True)
    if uf is None:
        return None
    work = numba_array(x)
    fill = numba_scalar(init)
    padded = _pad_dilate(work, window, fill)
    out_dims = shape.dims
    if any(d == 0 for d in out_dims):
        return np.zeros(out_dims, shape.dtype)
    wsizes = [wd.size for wd in window.dims]
    if int(np.prod(wsizes, dtype=np.int64)) <= 256:
        acc = np.full(out_dims, fill, work.dtype)
        for w in np.ndindex(*wsizes):
            sl = tuple(slice(wi * wd.rhs_dilate, wi * wd.rhs_dilate + (o - 1) * wd.stride + 1,
                             wd.stride) for wi, wd, o in zip(w, window.dims, out_dims))
            uf(acc, padded[sl], out=acc)
    else:
        extent = [(wd.size - 1) * wd.rhs_dilate + 1 for wd in window.dims]
        view = sliding_window_view(padded, extent)
        r = len(out_dims)
        sl = tuple(slice(0, (o - 1) * wd.stride + 1, wd.stride)
                   for o, wd in zip(out_dims, window.dims))
        sl += tuple(slice(None, None, wd.rhs_dilate) for wd in window.dims)
        acc = uf.reduce(view[sl], axis=tuple(range(r, 2 * r)))
    return np.asarray(acc).astype(shape.dtype, copy=False).reshape(out_dims)


def _pad_dilate(x, window, fill):
    """x base-dilated and padded (negative padding crops), holes and padding = fill."""
    shape, place, crop = [], [], []
    for n, wd in zip(x.shape, window.dims):
        dil = (n - 1) * wd.lhs_dilate + 1 if n else 0
        lo, hi = max(wd.pad_lo, 0), max(wd.pad_hi, 0)
        size = dil + lo + hi
        shape.append(size)
        place.append(slice(lo, lo + dil, wd.lhs_dilate))
        crop.append(slice(max(-wd.pad_lo, 0), size - max(-wd.pad_hi, 0)))
    if tuple(shape) == x.shape and all(c.start == 0 and c.stop == n for c, n in
                                       zip(crop, shape)):
        return x  # no padding, no dilation
    buf = np.full(shape, fill, x.dtype)
    buf[tuple(place)] = x
    return buf[tuple(crop)]


@kernel("select-and-scatter")
def _select_and_scatter(ins, args, ctx):
    operand, source, init = (np.asarray(a) for a in args)
    window = ins.attrs["window"]
    dt = ins.shape.dtype
    out = np.full(operand.size, numba_scalar(init), numba_dtype(dt))
    if operand.size and source.size:
        sel, jit_sel = scalar_callable(ctx, ins.attrs["select"])
        sca, jit_sca = scalar_callable(ctx, ins.attrs["scatter"])
        x = np.ascontiguousarray(numba_array(operand)).reshape(-1)
        src = np.ascontiguousarray(numba_array(source)).reshape(-1)
        pick(select_and_scatter_loop, jit_sel, jit_sca)(
            sel, sca, x, src, out, *_window_args(operand.shape, source.shape, window))
    return from_numba(out, dt).reshape(ins.shape.dims)
