"""Collective kernels on one device or many, for the CPU and CUDA (CUDA stages its values
through the host; the device-to-device copy is the transport's job there). Where a kernel
runs is its `Place` (place.py); all-reduce's routes are in all_reduce.py.
"""
from __future__ import annotations

import numpy as np

from ..common.errors import ExecutionError
from ..registry import EVERY_DEVICE, kernel
from . import semantics as S
from .all_reduce import all_reduce
from .groups import participants, permute_domain
from .place import alone, host_args, leaf_shapes, out_value, place_of
from .reducers import combiner, reduce_values


def _dim(ins) -> int:
    return int(ins.attrs["dimensions"][0])


def _meet(ins, args, ctx, shape):
    """(the value, None) for a device alone in its group (its operands, copied); else
    (None, (group, this device's rank in it, every member's host operands in rank order))."""
    own = alone(ins, args, ctx, shape)
    if own is not None:
        return own, None
    place = place_of(ctx)
    group = participants(ins, place.grid, place.device)
    vals = host_args(ins, args, ctx)
    return None, (group, group.index(place.device), place.exchange(ins, group, vals))


def _all_gather(ins, args, ctx, shape):
    own, met = _meet(ins, args, ctx, shape)
    if met is None:
        return own
    _, _, every = met
    res = [S.gather([v[i] for v in every], _dim(ins)) for i in range(len(args))]
    return out_value(ins, res, shape, ctx)


@kernel("all-reduce", "all-reduce-start", device=EVERY_DEVICE)
def _all_reduce_kernel(ins, args, ctx):
    return all_reduce(ins, args, ctx, ins.shape)


@kernel("all-gather", device=EVERY_DEVICE)
def _all_gather_kernel(ins, args, ctx):
    return _all_gather(ins, args, ctx, ins.shape)


@kernel("all-gather-start", device=EVERY_DEVICE)
def _all_gather_start(ins, args, ctx):
    result = _all_gather(ins, args, ctx, ins.shape.tuple_shapes[1])
    return (args[0] if len(args) == 1 else tuple(args), result)


@kernel("all-reduce-done", device=EVERY_DEVICE)
def _all_reduce_done(ins, args, ctx):
    return args[0]


@kernel("all-gather-done", "collective-permute-done", device=EVERY_DEVICE)
def _done_element_1(ins, args, ctx):
    return args[0][1]


@kernel("reduce-scatter", device=EVERY_DEVICE)
def _reduce_scatter(ins, args, ctx):
    own, met = _meet(ins, args, ctx, ins.shape)
    if met is None:
        return own
    group, rank, every = met
    combine = combiner(ins, ctx)
    # Only this rank's part is reduced (elementwise, so the same bits as reducing it all).
    res = [reduce_values([S.scatter_part(v[i], _dim(ins), len(group), rank) for v in every],
                         combine, every[0][i].dtype) for i in range(len(args))]
    return out_value(ins, res, ins.shape, ctx)


@kernel("all-to-all", device=EVERY_DEVICE)
def _all_to_all(ins, args, ctx):
    place = place_of(ctx)
    size = len(participants(ins, place.grid, place.device))
    if "dimensions" not in ins.attrs and len(args) != size:  # the tuple form: one per rank
        raise ExecutionError(f"all-to-all '{ins.name}': {len(args)} operands for a group of "
                             f"{size}")
    own, met = _meet(ins, args, ctx, ins.shape)
    if met is None:
        return own
    group, rank, every = met
    if "dimensions" in ins.attrs:  # array form: split and concatenate along one dimension
        d = _dim(ins)
        res = [S.all_to_all_array([v[i] for v in every], d, d, rank) for i in range(len(args))]
    else:  # tuple form: operand i goes to rank i; result i comes from rank i
        res = [v[rank] for v in every]
    return out_value(ins, res, ins.shape, ctx)


@kernel("collective-broadcast", device=EVERY_DEVICE)
def _collective_broadcast(ins, args, ctx):
    own, met = _meet(ins, args, ctx, ins.shape)
    if met is None:
        return own
    return out_value(ins, list(met[2][0]), ins.shape, ctx)  # the root: the group's first id


def _permute(ins, args, ctx, shape):
    if len(args) == 4 and not shape.is_tuple:
        raise ExecutionError(f"{ins.opcode} '{ins.name}': the in-place form with start "
                             "indices is not supported")
    place = place_of(ctx)
    domain = permute_domain(ins, place.grid, place.device)
    me = domain.index(place.device)
    pairs = [tuple(p) for p in ins.attrs.get("source_target_pairs", ())]
    for s, t in pairs:
        if not (0 <= s < len(domain) and 0 <= t < len(domain)):
            raise ExecutionError(f"{ins.opcode} '{ins.name}': pair {{{s},{t}}} names an id "
                                 f"outside 0..{len(domain) - 1}")
    leaves = leaf_shapes(shape, len(args))
    if place.grid.count == 1:  # device 0 alone: its own operand for a {0,0} pair, else zeros
        src = S.permute_source(pairs, 0)
        res = [ctx.memory.fresh(a) if src is not None else ctx.memory.zeros(s.dims, s.dtype)
               for a, s in zip(args, leaves)]
        return res[0] if len(args) == 1 and not shape.is_tuple else tuple(res)
    vals = host_args(ins, args, ctx)
    # Everyone in the domain meets (it is one exchange per permute, whichever pairs move).
    every = place.exchange(ins, domain, vals)
    src = S.permute_source(pairs, me)
    res = [every[src][i] if src is not None else np.zeros(s.dims, s.dtype)
           for i, s in enumerate(leaves)]
    return out_value(ins, res, shape, ctx)


@kernel("collective-permute", device=EVERY_DEVICE)
def _collective_permute(ins, args, ctx):
    return _permute(ins, args, ctx, ins.shape)


@kernel("collective-permute-start", device=EVERY_DEVICE)
def _collective_permute_start(ins, args, ctx):
    shapes = ins.shape.tuple_shapes
    result = _permute(ins, args, ctx, shapes[1])
    contexts = tuple(ctx.memory.zeros(s.dims, s.dtype) if s.is_array
                     else ctx.memory.zeros((), np.bool_) for s in shapes[2:])
    return (args[0] if len(args) == 1 else tuple(args), result) + contexts


@kernel("replica-id", device=EVERY_DEVICE)
def _replica_id(ins, args, ctx):
    return ctx.memory.to_device(np.array(place_of(ctx).replica, np.uint32))


@kernel("partition-id", device=EVERY_DEVICE)
def _partition_id(ins, args, ctx):
    return ctx.memory.to_device(np.array(place_of(ctx).partition, np.uint32))
