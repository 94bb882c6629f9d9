"""gather and scatter, with full dimension numbers (including explicit batching dims).

Semantics follow XLA (operation semantics; HloEvaluator::HandleGather/HandleScatter):
  gather   each start index vector (plus batch coordinates for operand_batching_dims) is
           clamped so the whole slice fits in the operand.
  scatter  an update window any part of which falls outside the operand is skipped whole;
           windows apply in row-major order of the update scatter dims, elements within a
           window in row-major order, each as operand = combiner(operand, update).
Index arrays of any integer type are read as s64.
"""
from __future__ import annotations

import numpy as np

from ..common.plans_gather import gather_plan, scatter_plan
from ..common.plans import row_strides
from ..registry import kernel
from . import comp_patterns as P
from .driver_cache import run_driver
from .jit_drivers import from_numba, numba_array, scatter_driver


def _index_vectors(indices: np.ndarray, index_vector_dim: int):
    """Start indices as (batch shape, (n_batch, K) int64), the index vector dim moved last."""
    idx = np.asarray(indices)
    if index_vector_dim == idx.ndim:
        idx = idx[..., None]
    else:
        idx = np.moveaxis(idx, index_vector_dim, -1)
    batch_shape = idx.shape[:-1]
    n = int(np.prod(batch_shape, dtype=np.int64))
    flat = idx.reshape(n, idx.shape[-1]).astype(np.int64)
    return batch_shape, flat


def _batch_coord(batch_shape, j: int) -> np.ndarray:
    """For each batch position (row-major), its coordinate along batch dimension j."""
    n = int(np.prod(batch_shape, dtype=np.int64))
    shape = [1] * len(batch_shape)
    shape[j] = batch_shape[j]
    coord = np.arange(batch_shape[j], dtype=np.int64).reshape(shape)
    return np.broadcast_to(coord, batch_shape).reshape(n)


def _full_starts(plan, batch_shape, vectors):
    """Each slice's start in every operand dimension (plans_gather's start maps)."""
    starts = np.zeros((vectors.shape[0], len(plan.operand_dims)), np.int64)
    for d, (k, j) in enumerate(zip(plan.start_component, plan.start_batch)):
        if k >= 0:
            starts[:, d] = vectors[:, k]
        elif j >= 0:
            starts[:, d] = _batch_coord(batch_shape, j)
    return starts


@kernel("gather")
def _gather(ins, args, ctx):
    operand, indices = np.asarray(args[0]), np.asarray(args[1])
    out_dtype = ins.shape.dtype
    if operand.size == 0 or ins.shape.num_elements() == 0:
        return np.zeros(ins.shape.dims, out_dtype)
    plan = gather_plan(ins, operand.shape, indices.shape)
    rank = operand.ndim
    batch_shape, vectors = _index_vectors(indices, plan.index_vector_dim)
    starts = np.clip(_full_starts(plan, batch_shape, vectors), 0,
                     np.array(plan.start_hi, np.int64))
    nb = starts.shape[0]
    index = []
    for d, size in enumerate(plan.slice_sizes):
        shape = [1] * (rank + 1)
        shape[0] = nb
        s = starts[:, d].reshape(shape)
        shape = [1] * (rank + 1)
        shape[d + 1] = size
        index.append(s + np.arange(size, dtype=np.int64).reshape(shape))
    g = operand[tuple(index)]                       # (nb, *slice_sizes)
    offset_sizes = [plan.slice_sizes[d] for d in plan.offset_operand_dims]
    g = g.reshape(tuple(batch_shape) + tuple(offset_sizes))
    # g holds (batch dims..., offset dims...): move each to its result dimension.
    nbd = len(batch_shape)
    perm = [0] * ins.shape.rank
    for j, od in enumerate(plan.out_batch_dims):
        perm[od] = j
    for q, od in enumerate(plan.out_offset_dims):
        perm[od] = nbd + q
    # np.ascontiguousarray would turn a rank-0 result into shape (1,): reshape it back.
    out = np.ascontiguousarray(g.transpose(perm)).astype(out_dtype, copy=False)
    return out.reshape(ins.shape.dims)


def _scatter_positions(plan, indices):
    """(flat operand positions in application order, without out-of-bounds windows; which
    windows are in bounds; elements per window)."""
    rank = len(plan.operand_dims)
    batch_shape, vectors = _index_vectors(indices, plan.index_vector_dim)
    starts = _full_starts(plan, batch_shape, vectors)
    valid = np.all((starts >= 0) & (starts <= np.array(plan.start_hi, np.int64)), axis=1)
    strides = np.array(row_strides(plan.operand_dims), np.int64)
    if rank:
        base = starts[valid] @ strides
        offs = strides @ np.indices(plan.window_sizes, dtype=np.int64).reshape(rank, -1)
    else:
        base, offs = np.zeros(int(valid.sum()), np.int64), np.zeros(1, np.int64)
    flat = (base[:, None] + offs[None, :]).reshape(-1)
    return flat, valid, int(np.prod(plan.window_sizes, dtype=np.int64))


@kernel("scatter")
def _scatter(ins, args, ctx):
    n = (len(args) - 1) // 2
    operands = [np.asarray(x) for x in args[:n]]
    indices = args[n]
    updates = [np.asarray(u) for u in args[n + 1:]]
    comp = ins.attrs["to_apply"]
    out_shapes = ins.shape.tuple_shapes if ins.shape.is_tuple else (ins.shape,)
    outs = [np.array(x, dtype=s.dtype, copy=True).reshape(-1) for x, s in zip(operands, out_shapes)]
    if operands[0].size and updates[0].size:
        plan = scatter_plan(ins, operands[0].shape, np.shape(indices), updates[0].shape)
        flat, valid, nw = _scatter_positions(plan, indices)
        # Updates reordered to (scatter dims..., window dims...): the positions' order.
        order = plan.update_scatter_dims + plan.update_window_dims
        ups = []
        for u in updates:
            u = np.transpose(u, order).reshape(valid.shape[0], nw)[valid].reshape(-1)
            ups.append(u)
        if flat.size:
            _apply(comp, outs, flat, ups, out_shapes, ctx)
    res = [o.reshape(s.dims) for o, s in zip(outs, out_shapes)]
    return tuple(res) if ins.shape.is_tuple else res[0]


def _apply(comp, outs, flat, ups, out_shapes, ctx):
    n = len(outs)
    if P.returns_param(comp, n):                   # set: the update replaces the operand
        for o, u in zip(outs, ups):
            o[flat] = u                            # repeated positions: the last one wins
        return
    if n == 1:
        op = P.binary_op(comp)
        uf = P.ufunc_for(op, out_shapes[0].element_type) if op else None
        if uf is not None and uf.nin == 2:
            o = outs[0]
            try:
                uf.at(o, flat, ups[0].astype(o.dtype, copy=False))
                return
            except TypeError:
                pass
    nouts = [numba_array(o) for o in outs]
    nups = [numba_array(u) for u in ups]
    run_driver(ctx, scatter_driver(n), [comp], flat, *nouts, *nups)
    for i, (o, no) in enumerate(zip(outs, nouts)):
        if no is not o:
            outs[i][...] = from_numba(no, o.dtype)
