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

from ..registry import kernel
from . import comp_patterns as P
from .jit_drivers import from_numba, numba_array, pick, scalar_callable, scatter_driver


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


def _batch_coord(batch_shape, index_vector_dim: int, indices_dim: int) -> np.ndarray:
    """For each batch position (row-major), its coordinate along `indices_dim` of the index
    array (a dimension other than the index vector dim)."""
    pos = indices_dim if indices_dim < index_vector_dim else indices_dim - 1
    n = int(np.prod(batch_shape, dtype=np.int64))
    shape = [1] * len(batch_shape)
    shape[pos] = batch_shape[pos]
    coord = np.arange(batch_shape[pos], dtype=np.int64).reshape(shape)
    return np.broadcast_to(coord, batch_shape).reshape(n)


def _full_starts(rank, batch_shape, vectors, index_map, operand_batching, indices_batching,
                 index_vector_dim):
    starts = np.zeros((vectors.shape[0], rank), np.int64)
    if len(index_map):
        starts[:, list(index_map)] = vectors
    for od, sd in zip(operand_batching, indices_batching):
        starts[:, od] = _batch_coord(batch_shape, index_vector_dim, sd)
    return starts


@kernel("gather")
def _gather(ins, args, ctx):
    operand, indices = np.asarray(args[0]), args[1]
    a = ins.attrs
    offset_dims = tuple(a.get("offset_dims", ()))
    collapsed = set(a.get("collapsed_slice_dims", ()))
    batching = tuple(a.get("operand_batching_dims", ()))
    slice_sizes = tuple(a["slice_sizes"])
    ivd = a["index_vector_dim"]
    out_dtype = ins.shape.dtype
    if operand.size == 0 or ins.shape.num_elements() == 0:
        return np.zeros(ins.shape.dims, out_dtype)
    rank = operand.ndim
    batch_shape, vectors = _index_vectors(indices, ivd)
    starts = _full_starts(rank, batch_shape, vectors, a.get("start_index_map", ()), batching,
                          a.get("start_indices_batching_dims", ()), ivd)
    hi = np.array(operand.shape, np.int64) - np.array(slice_sizes, np.int64)
    starts = np.clip(starts, 0, hi)
    nb = starts.shape[0]
    index = []
    for d in range(rank):
        shape = [1] * (rank + 1)
        shape[0] = nb
        s = starts[:, d].reshape(shape)
        shape = [1] * (rank + 1)
        shape[d + 1] = slice_sizes[d]
        index.append(s + np.arange(slice_sizes[d], dtype=np.int64).reshape(shape))
    g = operand[tuple(index)]                       # (nb, *slice_sizes)
    dropped = collapsed | set(batching)
    offset_sizes = [slice_sizes[d] for d in range(rank) if d not in dropped]
    g = g.reshape(tuple(batch_shape) + tuple(offset_sizes))
    nbd = len(batch_shape)
    perm, bi, oi = [], 0, 0
    for i in range(ins.shape.rank):
        if i in offset_dims:
            perm.append(nbd + oi)
            oi += 1
        else:
            perm.append(bi)
            bi += 1
    # np.ascontiguousarray would turn a rank-0 result into shape (1,): reshape it back.
    out = np.ascontiguousarray(g.transpose(perm)).astype(out_dtype, copy=False)
    return out.reshape(ins.shape.dims)


def _scatter_plan(operand_shape, indices, update_shape, a):
    """(flat operand positions in application order, without out-of-bounds windows; the
    update dims permutation putting scatter dims before window dims; which windows are in
    bounds; elements per window)."""
    rank = len(operand_shape)
    uwd = tuple(a.get("update_window_dims", ()))
    inserted = set(a.get("inserted_window_dims", ()))
    batching = tuple(a.get("input_batching_dims", ()))
    ivd = a["index_vector_dim"]
    batch_shape, vectors = _index_vectors(indices, ivd)
    starts = _full_starts(rank, batch_shape, vectors, a.get("scatter_dims_to_operand_dims", ()),
                          batching, a.get("scatter_indices_batching_dims", ()), ivd)
    window_operand_dims = [d for d in range(rank) if d not in inserted and d not in batching]
    wsize = [1] * rank
    for d, ud in zip(window_operand_dims, uwd):
        wsize[d] = update_shape[ud]
    dims = np.array(operand_shape, np.int64)
    valid = np.all((starts >= 0) & (starts <= dims - np.array(wsize, np.int64)), axis=1)
    strides = np.ones(rank, np.int64)
    for d in range(rank - 2, -1, -1):
        strides[d] = strides[d + 1] * dims[d + 1]
    if rank:
        base = starts[valid] @ strides
        offs = strides @ np.indices(wsize, dtype=np.int64).reshape(rank, -1)
    else:
        base, offs = np.zeros(int(valid.sum()), np.int64), np.zeros(1, np.int64)
    flat = (base[:, None] + offs[None, :]).reshape(-1)
    # Updates reordered to (scatter dims..., window dims...) match that order.
    scatter_dims = [d for d in range(len(update_shape)) if d not in uwd]
    order = scatter_dims + list(uwd)
    nw = int(np.prod([update_shape[d] for d in uwd], dtype=np.int64))
    return flat, order, valid, nw


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
        flat, order, valid, nw = _scatter_plan(operands[0].shape, indices, updates[0].shape,
                                               ins.attrs)
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
    fn, jit = scalar_callable(ctx, comp)
    nouts = [numba_array(o) for o in outs]
    nups = [numba_array(u) for u in ups]
    pick(scatter_driver(n), jit)(fn, flat, *nouts, *nups)
    for i, (o, no) in enumerate(zip(outs, nouts)):
        if no is not o:
            outs[i][...] = from_numba(no, o.dtype)
