"""Collective kernels on one device or many, for the CPU and CUDA (CUDA stages its values
through the host; the device-to-device copy is the transport's job there).

A kernel finds where it runs in `ctx.spmd` (a `Place`: grid, device id, transport; an
ExecContext field, given per run by `begin_run`); a context without one is device 0 of a
1 x 1 grid, where every group has one member.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...hlo.ir import Shape
from ..common.errors import ExecutionError
from ..registry import EVERY_DEVICE, kernel
from . import semantics as S
from .groups import DeviceGrid, participants, permute_domain
from .buffers import BufferPool
from .reducers import combiner, reduce_values
from .shares import SHARE_FROM_BYTES, contiguous, reduce_my_chunk


@dataclass
class Place:
    grid: DeviceGrid
    device: int
    transport: Any = None  # Rendezvous (threads) or an MPI transport; None: one device
    turn: Any = None  # a lock this device holds while it computes, released while it waits
    gang: Any = None  # runtime/spmd/gang.Gang: the products the run's devices compute at once

    @property
    def replica(self) -> int:
        return self.grid.replica_of(self.device)

    @property
    def partition(self) -> int:
        return self.grid.partition_of(self.device)

    def exchange(self, ins, group: tuple[int, ...], value):
        if len(group) == 1:
            return [value]
        if self.transport is None:
            raise ExecutionError(f"{ins.opcode} '{ins.name}': group {list(group)} has "
                                 f"{len(group)} members, but this runs on one device")
        return self._unturned(self.transport.exchange, self.device, ins, group, value)

    def share(self, ins, group: tuple[int, ...], value, work) -> None:
        """`Rendezvous.share`: meet, `work(every member's value)`, meet again."""
        if len(group) == 1:
            work([value])
            return
        self._unturned(self.transport.share, self.device, ins, group, value, work)

    def share_by_last(self, ins, group: tuple[int, ...], value, work) -> None:
        """`Rendezvous.share_by_last`: meet; the last to arrive runs `work`."""
        if len(group) == 1:
            work([value])
            return
        self._unturned(self.transport.share_by_last, self.device, ins, group, value, work)

    def _unturned(self, fn, *args):
        if self.turn is None:
            return fn(*args)
        self.turn.release()
        try:
            return fn(*args)
        finally:
            self.turn.acquire()


SINGLE = Place(DeviceGrid(), 0)
PERMUTES = frozenset({"collective-permute", "collective-permute-start"})



def place_of(ctx) -> Place:
    return ctx.spmd or SINGLE


# ---- host staging ----------------------------------------------------------------------

def _leaf_shapes(shape: Shape, n: int) -> list[Shape]:
    return [shape] if n == 1 and not shape.is_tuple else list(shape.tuple_shapes)


def _alone(ins, args, ctx, shape):
    """A collective whose group is this device alone: its operands as results, copied where
    they live (no trip through the host on CUDA); None when the group is larger."""
    place = place_of(ctx)
    if place.grid.count != 1:
        return None
    participants(ins, place.grid, 0)  # the groups must still be valid ones
    leaves = _leaf_shapes(shape, len(args))
    out = []
    for a, s in zip(args, leaves):
        if tuple(a.shape) != tuple(s.dims):
            raise ExecutionError(f"{ins.opcode} '{ins.name}': the group's values make "
                                 f"{list(a.shape)}, the instruction declares {s} (does the "
                                 "device count fit the module?)")
        out.append(ctx.memory.fresh(a))  # its own buffer, on the device
    return out[0] if len(args) == 1 and not shape.is_tuple else tuple(out)


def _host_args(ins, args, ctx) -> list[np.ndarray]:
    return [np.asarray(ctx.memory.to_host(a, o.shape)) for a, o in zip(args, ins.operands)]


def _out(ins, results: list[np.ndarray], shape: Shape, ctx, fresh: bool = False):
    """The results as the instruction's value; `fresh`: the arrays are this device's own
    (else they are copied: in threads a value may be another device's array)."""
    if fresh and len(results) == 1 and not shape.is_tuple:
        r = results[0]  # the common case, without the general loop's Python
        if r.dtype == shape.dtype and r.shape == shape.dims and r.flags.c_contiguous:
            return ctx.memory.to_device(r)
    leaves = _leaf_shapes(shape, len(results))
    vals = []
    for r, s in zip(results, leaves):
        r = np.asarray(r)
        if tuple(r.shape) != tuple(s.dims):
            raise ExecutionError(f"{ins.opcode} '{ins.name}': the group's values make "
                                 f"{list(r.shape)}, the instruction declares {s} (does the "
                                 "device count fit the module?)")
        r = np.require(r, dtype=s.dtype, requirements="C") if fresh else \
            np.array(r, dtype=s.dtype, order="C", copy=True)
        vals.append(ctx.memory.to_device(r))
    return vals[0] if len(results) == 1 and not shape.is_tuple else tuple(vals)


# ---- the collectives ---------------------------------------------------------------------

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


def _reduce_plan(ins, ctx, place: Place) -> _ReducePlan:
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
            plan.fast = t.allreduce_one(t._comm(ins, group), ins, group, t.mpi_op(plan.op))
    return plan


def _all_reduce(ins, args, ctx, shape):
    place = place_of(ctx)
    if place.grid.count == 1:
        return _alone(ins, args, ctx, shape)
    plan = _reduce_plan(ins, ctx, place)
    if plan.fast is not None and shape is ins.shape:
        a = args[0]
        if a.nbytes < place.transport.ONE_CALL_BELOW_BYTES:
            # CPU memory is host memory; the result is fresh (or the destination given)
            into = ctx.destinations
            return plan.fast(a, into[0] if into else None)
    group, combine, op = plan.group, plan.combine, plan.op
    vals = _host_args(ins, args, ctx)
    if op is not None:
        return _out(ins, place.transport.allreduce(place.device, ins, group, vals, op,
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
        return _out(ins, outs, shape, ctx, fresh=True)
    every = place.exchange(ins, group, vals)
    res = [reduce_values([v[i] for v in every], combine, vals[i].dtype)
           for i in range(len(vals))]
    return _out(ins, res, shape, ctx, fresh=True)  # reduce_in_rank_order made new arrays


def _dim(ins) -> int:
    return int(ins.attrs["dimensions"][0])


def _meet(ins, args, ctx, shape):
    """(the value, None) for a device alone in its group (its operands, copied); else
    (None, (group, this device's rank in it, every member's host operands in rank order))."""
    alone = _alone(ins, args, ctx, shape)
    if alone is not None:
        return alone, None
    place = place_of(ctx)
    group = participants(ins, place.grid, place.device)
    vals = _host_args(ins, args, ctx)
    return None, (group, group.index(place.device), place.exchange(ins, group, vals))


def _all_gather(ins, args, ctx, shape):
    alone, met = _meet(ins, args, ctx, shape)
    if met is None:
        return alone
    _, _, every = met
    res = [S.gather([v[i] for v in every], _dim(ins)) for i in range(len(args))]
    return _out(ins, res, shape, ctx)


@kernel("all-reduce", "all-reduce-start", device=EVERY_DEVICE)
def _all_reduce_kernel(ins, args, ctx):
    return _all_reduce(ins, args, ctx, ins.shape)


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
    alone, met = _meet(ins, args, ctx, ins.shape)
    if met is None:
        return alone
    group, rank, every = met
    combine = combiner(ins, ctx)
    # Only this rank's part is reduced (elementwise, so the same bits as reducing it all).
    res = [reduce_values([S.scatter_part(v[i], _dim(ins), len(group), rank) for v in every],
                         combine, every[0][i].dtype) for i in range(len(args))]
    return _out(ins, res, ins.shape, ctx)


@kernel("all-to-all", device=EVERY_DEVICE)
def _all_to_all(ins, args, ctx):
    place = place_of(ctx)
    size = len(participants(ins, place.grid, place.device))
    if "dimensions" not in ins.attrs and len(args) != size:  # the tuple form: one per rank
        raise ExecutionError(f"all-to-all '{ins.name}': {len(args)} operands for a group of "
                             f"{size}")
    alone, met = _meet(ins, args, ctx, ins.shape)
    if met is None:
        return alone
    group, rank, every = met
    if "dimensions" in ins.attrs:  # array form: split and concatenate along one dimension
        d = _dim(ins)
        res = [S.all_to_all_array([v[i] for v in every], d, d, rank) for i in range(len(args))]
    else:  # tuple form: operand i goes to rank i; result i comes from rank i
        res = [v[rank] for v in every]
    return _out(ins, res, ins.shape, ctx)


@kernel("collective-broadcast", device=EVERY_DEVICE)
def _collective_broadcast(ins, args, ctx):
    alone, met = _meet(ins, args, ctx, ins.shape)
    if met is None:
        return alone
    return _out(ins, list(met[2][0]), ins.shape, ctx)  # the root: the group's first id


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
    leaves = _leaf_shapes(shape, len(args))
    if place.grid.count == 1:  # device 0 alone: its own operand for a {0,0} pair, else zeros
        src = S.permute_source(pairs, 0)
        res = [ctx.memory.fresh(a) if src is not None else ctx.memory.zeros(s.dims, s.dtype)
               for a, s in zip(args, leaves)]
        return res[0] if len(args) == 1 and not shape.is_tuple else tuple(res)
    vals = _host_args(ins, args, ctx)
    # Everyone in the domain meets (it is one exchange per permute, whichever pairs move).
    every = place.exchange(ins, domain, vals)
    src = S.permute_source(pairs, me)
    res = [every[src][i] if src is not None else np.zeros(s.dims, s.dtype)
           for i, s in enumerate(leaves)]
    return _out(ins, res, shape, ctx)


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
