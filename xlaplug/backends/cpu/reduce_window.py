"""reduce-window and select-and-scatter.

Where each window lies is common/plans_window's plan (XLA's placement, shared with CUDA):
positions on padding or in a dilation hole are skipped, the fold starts from the init value
and takes only operand elements, in row-major window order (HloEvaluator's
IterateThroughWindow).  With an identity init value and a plain binary reducer the fast path
pads with the init value instead, which is the same.

select-and-scatter (HloEvaluator::HandleSelectAndScatter): the output starts as the init
value; for each source element in row-major order, the window's first in-bounds element is
selected, then each later element e replaces the selection s unless select(s, e) is true;
finally out[s] = scatter(source, out[s]).
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..common.plans_window import window_plan
from ..registry import kernel
from . import comp_patterns as P
from .driver_cache import run_driver
from .jit_drivers import (from_numba, numba_array, numba_dtype, numba_scalar,
                          select_and_scatter_driver, window_driver)


def _reach_table(plan):
    """(reach, offsets): `reach[offsets[d] + o * sizes[d] + w]` is the operand index along d
    of output position o, window position w, or -1 (padding or a dilation hole) -- XLA's
    placement (common/plans_window).  outputs x window entries per dimension: the fast path
    never builds it."""
    parts, offsets, off = [], [], 0
    for d, (n, o_n) in enumerate(zip(plan.operand_dims, plan.out_dims)):
        o = np.arange(o_n, dtype=np.int64)[:, None]
        w = np.arange(plan.sizes[d], dtype=np.int64)[None, :]
        pos = o * plan.strides[d] + w * plan.rhs_dilate[d] - plan.pad_lo[d]
        idx = pos // plan.lhs_dilate[d]
        ok = (pos >= 0) & (pos % plan.lhs_dilate[d] == 0) & (idx < n)
        table = np.where(ok, idx, -1).reshape(-1)
        parts.append(table)
        offsets.append(off)
        off += table.size
    return (np.concatenate(parts) if parts else np.zeros(0, np.int64)), offsets


def _window_args(plan):
    """The window drivers' geometry arguments (jit_drivers.window_driver)."""
    reach, offsets = _reach_table(plan)
    return (np.array(plan.operand_strides, np.int64), np.array(plan.out_dims, np.int64),
            np.array(plan.sizes, np.int64), reach, np.array(offsets, np.int64))


@kernel("reduce-window")
def _reduce_window(ins, args, ctx):
    n = len(args) // 2
    xs = [np.asarray(x) for x in args[:n]]
    inits = [np.asarray(i) for i in args[n:]]
    comp = ins.attrs["to_apply"]
    shapes = ins.shape.tuple_shapes if ins.shape.is_tuple else (ins.shape,)
    out_dims = shapes[0].dims
    plan = window_plan(ins, xs[0].shape, out_dims)
    if n == 1:
        fast = _fast_reduce_window(comp, xs[0], inits[0], plan, shapes[0])
        if fast is not None:
            return fast
    outs = [np.empty(int(np.prod(out_dims, dtype=np.int64)), numba_dtype(s.dtype))
            for s in shapes]
    if outs[0].size:
        flat = [np.ascontiguousarray(numba_array(x)).reshape(-1) for x in xs]
        if flat[0].size == 0:  # every window is on padding
            res = [np.full(s.dims, i, s.dtype) for i, s in zip(inits, shapes)]
            return tuple(res) if ins.shape.is_tuple else res[0]
        run_driver(ctx, window_driver(n), [comp], *flat, *[numba_scalar(i) for i in inits],
                   *outs, *_window_args(plan))
    res = [from_numba(o, s.dtype).reshape(s.dims) for o, s in zip(outs, shapes)]
    return tuple(res) if ins.shape.is_tuple else res[0]


def _fast_reduce_window(comp, x, init, plan, shape):
    uf = P.identity_fold_ufunc(comp, x, init, shape)
    if uf is None:
        return None
    work = numba_array(x)
    fill = numba_scalar(init)
    padded = _pad_dilate(work, plan, fill)
    out_dims = shape.dims
    if any(d == 0 for d in out_dims):
        return np.zeros(out_dims, shape.dtype)
    geometry = list(zip(plan.sizes, plan.strides, plan.rhs_dilate, out_dims))
    if plan.window_elements <= 256:
        acc = np.full(out_dims, fill, work.dtype)
        for w in np.ndindex(*plan.sizes):
            sl = tuple(slice(wi * rd, wi * rd + (o - 1) * st + 1, st)
                       for wi, (_, st, rd, o) in zip(w, geometry))
            uf(acc, padded[sl], out=acc)
    else:
        extent = [(size - 1) * rd + 1 for size, _, rd, _ in geometry]
        view = sliding_window_view(padded, extent)
        r = len(out_dims)
        sl = tuple(slice(0, (o - 1) * st + 1, st) for _, st, _, o in geometry)
        sl += tuple(slice(None, None, rd) for rd in plan.rhs_dilate)
        acc = uf.reduce(view[sl], axis=tuple(range(r, 2 * r)))
    return np.asarray(acc).astype(shape.dtype, copy=False).reshape(out_dims)


def _pad_dilate(x, plan, fill):
    """x base-dilated and padded (negative padding crops), holes and padding = fill."""
    shape, place, crop = [], [], []
    for n, ld, pad_lo, pad_hi in zip(x.shape, plan.lhs_dilate, plan.pad_lo, plan.pad_hi):
        dil = (n - 1) * ld + 1 if n else 0
        lo, hi = max(pad_lo, 0), max(pad_hi, 0)
        size = dil + lo + hi
        shape.append(size)
        place.append(slice(lo, lo + dil, ld))
        crop.append(slice(max(-pad_lo, 0), size - max(-pad_hi, 0)))
    if tuple(shape) == x.shape and all(c.start == 0 and c.stop == n for c, n in
                                       zip(crop, shape)):
        return x  # no padding, no dilation
    buf = np.full(shape, fill, x.dtype)
    buf[tuple(place)] = x
    return buf[tuple(crop)]


@kernel("select-and-scatter")
def _select_and_scatter(ins, args, ctx):
    operand, source, init = (np.asarray(a) for a in args)
    plan = window_plan(ins, operand.shape, source.shape)
    dt = ins.shape.dtype
    out = np.full(operand.size, numba_scalar(init), numba_dtype(dt))
    if operand.size and source.size:
        x = np.ascontiguousarray(numba_array(operand)).reshape(-1)
        src = np.ascontiguousarray(numba_array(source)).reshape(-1)
        run_driver(ctx, select_and_scatter_driver(), [ins.attrs["select"], ins.attrs["scatter"]],
                   x, src, out, *_window_args(plan))
    return from_numba(out, dt).reshape(ins.shape.dims)
