"""Where a collective runs (`Place`: grid, device id, transport) and how its values travel
between the device and the host, for the collective kernels (kernels.py, all_reduce.py).

A kernel finds its place in `ctx.spmd` (an ExecContext field, given per run by `begin_run`);
a context without one is device 0 of a 1 x 1 grid, where every group has one member.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...hlo.ir import Shape
from ..common.errors import ExecutionError
from .groups import DeviceGrid, participants


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

def leaf_shapes(shape: Shape, n: int) -> list[Shape]:
    return [shape] if n == 1 and not shape.is_tuple else list(shape.tuple_shapes)


def alone(ins, args, ctx, shape):
    """A collective whose group is this device alone: its operands as results, copied where
    they live (no trip through the host on CUDA); None when the group is larger."""
    place = place_of(ctx)
    if place.grid.count != 1:
        return None
    participants(ins, place.grid, 0)  # the groups must still be valid ones
    leaves = leaf_shapes(shape, len(args))
    out = []
    for a, s in zip(args, leaves):
        if tuple(a.shape) != tuple(s.dims):
            raise ExecutionError(f"{ins.opcode} '{ins.name}': the group's values make "
                                 f"{list(a.shape)}, the instruction declares {s} (does the "
                                 "device count fit the module?)")
        out.append(ctx.memory.fresh(a))  # its own buffer, on the device
    return out[0] if len(args) == 1 and not shape.is_tuple else tuple(out)


def host_args(ins, args, ctx) -> list[np.ndarray]:
    return [np.asarray(ctx.memory.to_host(a, o.shape)) for a, o in zip(args, ins.operands)]


def out_value(ins, results: list[np.ndarray], shape: Shape, ctx, fresh: bool = False):
    """The results as the instruction's value; `fresh`: the arrays are this device's own
    (else they are copied: in threads a value may be another device's array)."""
    if fresh and len(results) == 1 and not shape.is_tuple:
        r = results[0]  # the common case, without the general loop's Python
        if r.dtype == shape.dtype and r.shape == shape.dims and r.flags.c_contiguous:
            return ctx.memory.to_device(r)
    leaves = leaf_shapes(shape, len(results))
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
