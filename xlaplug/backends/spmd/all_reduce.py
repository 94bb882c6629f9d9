"""all-reduce on one device or many: how an instruction reduces on a device is planned once
per context (its group, its reducer, whether the transport reduces it in one call), then
each call takes the plan's route: one MPI call, a shared reduction among threads, or an
exchange and a reduction in rank order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .buffers import BufferPool
from .groups import participants
from .place import Place, alone, host_args, out_value, place_of
from .reducers import combiner, reduce_values
from .shares import SHARE_FROM_BYTES, contiguous, reduce_my_chunk


def _native_op(ins, place, group) -> str | None:
    """The reducer's op when the transport reduces it in one call (MPI: sum, product, min,
    max of MPI-native types), else None (gather, then reduce in rank order)."""
    t = place.transport
    if len(group) == 1 or t is None or not hasattr(t, "allreduce"):
        return None
    from ..cpu import comp_patterns as P
    op = P.binary_op(ins.attrs["to_apply"])
    if op not in ("add", "multiply", "minimum", "maximum"):
        return None
    return op if all(t.can_allreduce(op, o.shape.dtype) for o in ins.operands) else None


@dataclass
class _ReducePlan:
    place: Place
    group: tuple[int, ...]
    combine: Any
    op: str | None     # the transport reduces it in one call (see _native_op)
    fast: Any = None   # fn(host array) -> result: one operand, one transport call


def _plan_holds(plan: _ReducePlan, place: Place) -> bool:
    """Whether a plan made at plan.place serves `place`: the same place, or the same grid
    and device over a transport of the same kind that binds no call into the plan (the
    in-process runner makes a Place per run: re-planning cost the DP MLP step on 4 fibers
    ~60 us a device a run, `combiner` included)."""
    old = plan.place
    return old is place or (plan.op is None and plan.fast is None and old.grid == place.grid
                            and old.device == place.device
                            and type(old.transport) is type(place.transport))


def reduce_plan(ins, ctx, place: Place) -> _ReducePlan:
    """How `ins` reduces on this device, worked out once per context: a collective in a
    loop, or a module run again and again, meets many times, and finding its group and
    reducer took ~20 us of Python a call (four devices: more than XLA's 4 KiB all-reduce;
    over MPI on shared cores each microsecond a rank spends costs every rank several: see
    MpiTransport.allreduce_one)."""
    table = ctx.kernel_cache.table("spmd_reduce_plans")
    plan = table.get(ins)
    if plan is None or not _plan_holds(plan, place):
        group = participants(ins, place.grid, place.device)
        plan = table[ins] = _ReducePlan(place, group, combiner(ins, ctx),
                                        _native_op(ins, place, group))
        t = place.transport
        if plan.op is not None and len(ins.operands) == 1 and hasattr(t, "allreduce_one") \
                and ctx.memory.on_host and ins.shape.is_array:
            plan.fast = t.allreduce_one(t.communicator(ins, group), ins, group,
                                        t.mpi_op(plan.op))
    return plan


def all_reduce(ins, args, ctx, shape):
    place = place_of(ctx)
    if place.grid.count == 1:
        return alone(ins, args, ctx, shape)
    plan = reduce_plan(ins, ctx, place)
    if plan.fast is not None and shape is ins.shape:
        a = args[0]
        if a.nbytes < place.transport.ONE_CALL_BELOW_BYTES:
            # CPU memory is host memory; the result is fresh (or the destination given)
            into = ctx.destinations
            return plan.fast(a, into[0] if into else None)
    group, combine, op = plan.group, plan.combine, plan.op
    vals = host_args(ins, args, ctx)
    if op is not None:
        return out_value(ins, place.transport.allreduce(place.device, ins, group, vals, op,
                                                   into=ctx.destinations),
                    shape, ctx, fresh=True)
    if hasattr(place.transport, "share"):
        # Threads of one process: the values are reduced once, into every member's outputs:
        # in chunks, one per member, in parallel for large buffers on threads; else by the
        # last member to arrive, in one meeting.
        vals, rank = contiguous(vals), group.index(place.device)
        outs = ctx.kernel_cache.table("spmd").setdefault("results", BufferPool()).like(vals)
        if place.transport.parallel and sum(v.nbytes for v in vals) >= SHARE_FROM_BYTES:
            place.share(ins, group, (vals, outs),
                        lambda every: reduce_my_chunk(every, rank, combine, reduce_values))
        else:
            place.share_by_last(ins, group, (vals, outs),
                                lambda every: reduce_my_chunk(every, 0, combine,
                                                              reduce_values, parts=1))
        return out_value(ins, outs, shape, ctx, fresh=True)
    every = place.exchange(ins, group, vals)
    res = [reduce_values([v[i] for v in every], combine, vals[i].dtype)
           for i in range(len(vals))]
    return out_value(ins, res, shape, ctx, fresh=True)  # reduce_in_rank_order made new arrays
