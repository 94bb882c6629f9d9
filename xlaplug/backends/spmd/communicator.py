"""What a plugin kernel gets when it asks for a communicator (`@plugin.kernel(...,
communicator=True)`, then a `comm` argument): where it runs and the collectives over every
device of the run, on whichever transport runs (threads in one process, or MPI), so one
kernel serves both.

    comm.device, comm.replica, comm.partition     this device (device = replica * P + partition)
    comm.size, comm.replicas, comm.partitions     the device count and the grid
    comm.allreduce(x, op="sum")                   sum | average | min | max | product
    comm.allgather(x)                             every device's x, concatenated on axis 0
    comm.alltoall(x)                              block i of axis 0 to device i
    comm.reducescatter(x, op="sum")               part `device` of the reduced x (axis 0)
    comm.broadcast(x, root=0)                     root's x
    comm.sendrecv(x, dest, source)                send x to dest, return what source sent
    comm.barrier()

Reductions combine in device order (the same bits on every device), except where MPI
reduces a native type in one call.  Every device must make the same calls in the same
order, as with any collective.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..common.errors import ExecutionError
from . import semantics as S

_UFUNCS = {"sum": np.add, "average": np.add, "product": np.multiply, "min": np.minimum,
           "max": np.maximum}
_MPI_OPS = {"sum": "add", "average": "add", "product": "multiply", "min": "minimum",
            "max": "maximum"}


@dataclass
class _Key:
    """Stands for an instruction in the transport's messages and errors."""
    opcode: str
    name: str


@dataclass
class Communicator:
    place: object                 # kernels.Place: grid, device, transport
    owner: str = "kernel"         # the instruction whose kernel asked (for messages)
    _calls: dict = field(default_factory=dict)

    @property
    def device(self) -> int:
        return self.place.device

    @property
    def replica(self) -> int:
        return self.place.replica

    @property
    def partition(self) -> int:
        return self.place.partition

    @property
    def replicas(self) -> int:
        return self.place.grid.replicas

    @property
    def partitions(self) -> int:
        return self.place.grid.partitions

    @property
    def size(self) -> int:
        return self.place.grid.count

    # ---- helpers ---------------------------------------------------------------------
    def _key(self, what: str) -> _Key:
        return _Key(f"communicator.{what}", f"{self.owner}:{what}")

    def _world(self) -> tuple[int, ...]:
        return tuple(range(self.size))

    def _exchange(self, what: str, value) -> list:
        return self.place.exchange(self._key(what), self._world(), value)

    # ---- collectives -------------------------------------------------------------------
    def allreduce(self, x, op: str = "sum") -> np.ndarray:
        if op not in _UFUNCS:
            raise ExecutionError(f"{self.owner}: allreduce op must be one of "
                                 f"{', '.join(_UFUNCS)}, not {op!r}")
        x = np.asarray(x)
        t = self.place.transport
        if self.size > 1 and t is not None and hasattr(t, "allreduce") and \
                t.can_allreduce(_MPI_OPS[op], x.dtype):
            out = t.allreduce(self.device, self._key("allreduce"), self._world(), [x],
                              _MPI_OPS[op])[0]
        else:  # in rank order, as the core all-reduce (bf16 and f8 accumulated in f32)
            from ...hlo import dtypes
            from .reducers import reduce_values, ufunc_combiner
            combine = ufunc_combiner(_UFUNCS[op], dtypes.from_dtype(x.dtype))
            out = reduce_values(self._exchange("allreduce", x), combine, x.dtype)
        if op == "average":  # HLO's divide: integers truncate toward zero
            out = (out / np.asarray(self.size, out.dtype)).astype(x.dtype) \
                if x.dtype.kind in "fc" else \
                (np.sign(out) * (np.abs(out) // self.size)).astype(x.dtype)
        return out

    def allgather(self, x) -> np.ndarray:
        return S.gather([np.asarray(v) for v in self._exchange("allgather", np.asarray(x))], 0)

    def alltoall(self, x) -> np.ndarray:
        x = np.asarray(x)
        if x.shape[0] % self.size:
            raise ExecutionError(f"{self.owner}: alltoall needs axis 0 ({x.shape[0]}) to be a "
                                 f"multiple of the device count {self.size}")
        return S.all_to_all_array(self._exchange("alltoall", x), 0, 0, self.device)

    def reducescatter(self, x, op: str = "sum") -> np.ndarray:
        x = np.asarray(x)
        if x.shape[0] % self.size:
            raise ExecutionError(f"{self.owner}: reducescatter needs axis 0 ({x.shape[0]}) "
                                 f"to be a multiple of the device count {self.size}")
        return S.scatter_part(self.allreduce(x, op), 0, self.size, self.device)

    def broadcast(self, x, root: int = 0) -> np.ndarray:
        if not 0 <= root < self.size:
            raise ExecutionError(f"{self.owner}: broadcast root {root} is not a device "
                                 f"(0..{self.size - 1})")
        return np.array(self._exchange("broadcast", np.asarray(x))[root], copy=True)

    def sendrecv(self, x, dest: int, source: int) -> np.ndarray:
        t = self.place.transport
        if self.size == 1:
            return np.array(x, copy=True)
        if hasattr(t, "sendrecv"):
            return t.sendrecv(self.device, self._key("sendrecv"), np.asarray(x), dest, source)
        every = self._exchange("sendrecv", (np.asarray(x), dest))
        sent, to = every[source]
        if to != self.device:
            raise ExecutionError(f"{self.owner}: sendrecv: device {self.device} receives from "
                                 f"{source}, which sends to {to}")
        return np.array(sent, copy=True)

    def barrier(self) -> None:
        self._exchange("barrier", None)


def communicator_for(ctx, owner: str) -> Communicator:
    from .place import place_of
    return Communicator(place_of(ctx), owner)
