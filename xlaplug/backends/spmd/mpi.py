"""Devices across processes over MPI (mpi4py): rank r runs device r.

The transport offers what the collective kernels need -- `exchange` (every member's values,
for the rank-order reductions and the data movers) and `allreduce` (sum, product, min and
max of MPI-native types: up to 64 KiB the operands travel with the headers and each member
reduces them in rank order, above that one MPI call) -- on communicators split once per
group set (`prepare`, after the run's agreement: runtime/spmd/agreement.py checks that
every rank runs the same module, grid and options, so the splits cannot disagree).

Every collective swaps a checked header among its members before its payload moves
(mpi_headers.py): ranks at different collectives, or the same with other operands, fail
naming both sides instead of misreading each other's bytes.  No wait is unbounded: every
MPI operation is non-blocking and polled against the deadline, the control channel
answered meanwhile (mpi_waiting.py).
"""
from __future__ import annotations

import os
import pickle
import threading
import time
from typing import Any

import numpy as np

from ..common.errors import ExecutionError
from . import mpi_headers as H
from .mpi_headers import HeaderSwaps
from .buffers import BufferPool
from .rendezvous import CollectiveTimeout
from .mpi_allreduce import allreduce_one, finisher, usable
from .mpi_waiting import PolledWaits, _End, _Start

# From this many bytes an all-reduce waits for every member, then makes the blocking call
# (measured with MPICH 5 on 2 ranks: 16 MiB 11.0 ms non-blocking, 6.7 ms blocking).
_BLOCKING_BYTES = 4 << 20
# numpy dtypes MPI reduces natively (mpi4py maps them to MPI datatypes).
_NATIVE = {np.dtype(t) for t in ("int8", "uint8", "int16", "uint16", "int32", "uint32",
                                 "int64", "uint64", "float32", "float64", "complex64",
                                 "complex128")}
_REAL_ONLY = {"min", "max"}


def mpi_module():
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ExecutionError("running across processes needs mpi4py and an MPI: "
                             "pip install 'xlaplug[mpi]'") from e
    return MPI


def launched_by_mpi() -> bool:
    """True inside `mpiexec -n N` with N > 1 (read from the launcher's environment, so a plain
    run never imports mpi4py)."""
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS", "PMIX_SIZE"):
        if var in os.environ:
            try:
                return int(os.environ[var]) > 1
            except ValueError:
                return False
    return False


class MpiTransport(PolledWaits, HeaderSwaps):
    ONE_CALL_BELOW_BYTES = _BLOCKING_BYTES  # allreduce_one's operands are smaller

    def __init__(self, timeout: float = 60.0):
        self.MPI = mpi_module()
        world = self.MPI.COMM_WORLD
        self.rank, self.size = world.Get_rank(), world.Get_size()
        self.timeout = timeout
        # collectives and their point-to-point messages; aborts and status queries, never
        # mixed with data.  Duplicated without blocking: MPI_Comm_dup waits for every rank,
        # and a rank that ended before the run (refused options) left the others in it.
        (self.data, first), (self.ctl, second) = world.Idup(), world.Idup()
        self._started([first, second], timeout)
        self._comms: dict[tuple, Any] = {}
        self._calls: dict[str, int] = {}
        self._seq: dict[int, int] = {}  # id(communicator) -> collectives begun on it
        self._templates: dict = {}      # instruction -> its header (mpi_headers.template)
        self._boxes: dict[tuple, list] = {}  # (members, bytes) -> headers' receive buffers
        self._send = BufferPool()   # fused send buffers
        self._recv = BufferPool()   # all-reduce results (see buffers.py: why reused)
        self.where = "running"
        # A polling rank gives its core up at every poll (sched_yield).  Measured with MPICH
        # on 2 cores: D=4, 1 MiB all-reduce 16.4 ms spinning, 0.67 ms yielding; and even
        # D=2, where ranks do not outnumber cores, a bare MPI_Test loop took 16 ms for 1 MiB
        # where yielding between tests took 0.51 ms and the blocking call 0.50 ms.
        self.aborted: tuple[int, Any] | None = None  # (rank, message) once one failed
        self._ctl_lock = threading.Lock()

    # ---- set-up ------------------------------------------------------------------------
    def _started(self, requests, timeout: float) -> None:
        """Polls the communicators' duplication (no control channel yet to answer)."""
        deadline = time.monotonic() + timeout
        while not self.MPI.Request.Testall(requests):
            if time.monotonic() > deadline:
                raise CollectiveTimeout(f"start of run: not every rank came within {timeout:g}"
                                        " s (a rank that ended before its run?)")
            time.sleep(1e-3)

    def gather_fixed(self, blob: bytes) -> list[bytes]:
        """Every rank's `blob` (the same length on every rank), in rank order: one polled
        all-gather over all ranks, bounded by the timeout (the run's agreement, before any
        communicator is split)."""
        n = len(blob)
        recv = np.empty(n * self.size, np.uint8)
        self._wait([self.data.Iallgather(np.frombuffer(blob, np.uint8), recv)], _Start(), 0,
                   tuple(range(self.size)), unit="rank")
        return [recv[i * n:(i + 1) * n].tobytes() for i in range(self.size)]

    def prepare(self, groups_sets: list[list[tuple[int, ...]]]) -> None:
        """Splits a communicator for every group set the module's collectives use; every
        rank must call this with the same list (collective over all ranks)."""
        # Everyone is here first (a polled barrier): a rank that failed before the run would
        # otherwise leave the others in a blocking Split.
        self._wait([self.data.Ibarrier()], _Start(), 0, tuple(range(self.size)))
        for groups in groups_sets:
            key = tuple(sorted(groups))
            if key in self._comms:
                continue
            color = next((i for i, g in enumerate(key) if self.rank in g), self.MPI.UNDEFINED)
            order = key[color].index(self.rank) if color != self.MPI.UNDEFINED else 0
            comm = self.data.Split(color, order)
            self._comms[key] = {g: comm for g in key if self.rank in g}  # this rank's group

    def communicator(self, ins, group):
        """The communicator `prepare` split for `group` (what allreduce_one and
        allreduce_finisher take)."""
        for mine in self._comms.values():
            if group in mine:
                return mine[group]
        raise ExecutionError(f"{ins.opcode} '{ins.name}': group {list(group)} was not "
                             "prepared (internal error)")

    # ---- what the compiled handler shares (xla/ffi/mpi_sites.py) ------------------------
    def header_template(self, ins, op: str) -> bytes | None:
        """The header `ins`'s all-reduces by `op` carry (mpi_headers.template), made by its
        first call; None before."""
        tpl = self._templates.get((ins, op))
        return None if tpl is None else bytes(tpl)

    def counters(self) -> tuple[dict, dict]:
        """The numbers every header carries, live: id(communicator) -> collectives begun on
        it, and instruction name -> its calls.  The compiled handler counts the calls it
        serves in its own records and writes them here (and back) around every Python
        entry, so that the two paths number one sequence."""
        return self._seq, self._calls

    def _enter(self, ins) -> int:
        call = self._calls.get(ins.name, 0)
        self._calls[ins.name] = call + 1
        self.where = (ins, call)  # written out only when another rank asks (where_text)
        return call

    # ---- the operations ---------------------------------------------------------------
    def exchange(self, device: int, ins, group: tuple[int, ...], value: list) -> list:
        """Every member's `value` (a list of host arrays), in group order."""
        call = self._enter(ins)
        comm = self.communicator(ins, group)
        blob = np.frombuffer(pickle.dumps(value, protocol=5), np.uint8)
        # The header carries the size: one message, as the bare size was before.
        header = self._header(comm, ins, call, value, hasattr(ins, "operands"), blob.size)
        sizes = np.array(self._agree(comm, ins, call, group, header), np.int64)
        recv = np.empty(int(sizes.sum()), np.uint8)
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        r = comm.Iallgatherv(blob, [recv, sizes, offsets, self.MPI.BYTE])
        self._wait([r], ins, call, group)
        self.where = "running"
        return [pickle.loads(recv[o:o + s].tobytes()) for o, s in zip(offsets, sizes)]

    def can_allreduce(self, op: str, dtype: np.dtype) -> bool:
        dtype = np.dtype(dtype)
        return dtype in _NATIVE and not (op in _REAL_ONLY and dtype.kind == "c")

    def allreduce(self, device: int, ins, group, arrays: list[np.ndarray], op: str,
                  into: list | None = None) -> list:
        """One MPI reduction over the group for all `arrays` (fused into one buffer when they
        share a dtype, as Horovod's tensor fusion does); `into`: C-contiguous arrays of the
        results' shapes and dtypes to reduce into (XLA's result buffers), else reused ones."""
        mpi_op = self.mpi_op(op)
        comm = self.communicator(ins, group)
        if len(arrays) == 1 and arrays[0].nbytes < _BLOCKING_BYTES:
            return [self.allreduce_one(comm, ins, group, mpi_op)(arrays[0])]  # counts the call
        call = self._enter(ins)
        self._agree(comm, ins, call, group,
                    self._header(comm, ins, call, arrays, True, 0, op))
        out: list[Any] = [None] * len(arrays)
        by_dtype: dict[np.dtype, list[int]] = {}
        for i, a in enumerate(arrays):
            by_dtype.setdefault(a.dtype, []).append(i)
        pending = []
        bufs = []
        for dt, idx in by_dtype.items():
            if len(idx) == 1:
                send = np.ascontiguousarray(arrays[idx[0]]).reshape(-1)
            else:
                send = self._send.take(dt, sum(arrays[i].size for i in idx))
                np.concatenate([np.asarray(arrays[i]).reshape(-1) for i in idx], out=send)
            dest = into[idx[0]] if into and len(idx) == 1 and \
                usable(into[idx[0]], arrays[idx[0]]) else None
            bufs.append((idx, send, self._recv.take(dt, send.size) if dest is None else
                         dest.reshape(-1), dest))
        if sum(b[1].nbytes for b in bufs) >= _BLOCKING_BYTES:
            # Large: every member has arrived (the headers' polled swap: no unbounded
            # wait), so the blocking MPI_Allreduce, whose algorithms beat the non-blocking
            # one's there.
            for idx, send, recv, dest in bufs:
                comm.Allreduce(send, recv, op=mpi_op)
                pending.append((idx, recv, None, dest))
        else:
            for idx, send, recv, dest in bufs:
                pending.append((idx, recv, comm.Iallreduce(send, recv, op=mpi_op), dest))
            self._wait([p[2] for p in pending], ins, call, group)
        for idx, recv, _, dest in pending:
            if dest is not None:  # the very array given: its holder sees nothing to copy
                out[idx[0]] = dest
                continue
            at = 0
            for i in idx:
                n = arrays[i].size
                out[i] = recv[at:at + n].reshape(arrays[i].shape)
                at += n
        self.where = "running"
        return out

    def allreduce_one(self, comm, ins, group, mpi_op):
        """fn(array, into=None) -> its reduction over `group`: one operand under
        _BLOCKING_BYTES (the common case), with nothing to plan per call
        (mpi_allreduce.py).  `comm`: from communicator; `mpi_op`: an MPI.Op."""
        return allreduce_one(self, comm, ins, group, mpi_op)

    def allreduce_finisher(self, comm, ins, group, mpi_op):
        """fn(call, boxes, reqs, done, a, out, failed=None, posted=None), finishing a call
        of this all-reduce once its headers are on their way: their check, then the payload
        (mpi_allreduce.finisher).  allreduce_one's calls end in it, and so do those the
        compiled handler hands back to Python (xla/ffi/mpi_sites.resume)."""
        return finisher(self, comm, ins, group, mpi_op)

    def mpi_op(self, op: str):
        MPI = self.MPI
        return {"add": MPI.SUM, "multiply": MPI.PROD, "minimum": MPI.MIN,
                "maximum": MPI.MAX}[op]

    def sendrecv(self, device: int, ins, x: np.ndarray, dest: int, source: int) -> np.ndarray:
        """Send x to `dest` and receive what `source` sends (a plugin communicator's
        point-to-point step): a header (with the size), checked, then the pickled array."""
        call = self._enter(ins)
        tag = 100 + call % 30000
        blob = np.frombuffer(pickle.dumps(np.ascontiguousarray(x), protocol=5), np.uint8)
        header = self._header(self.data, ins, call, x, False, blob.size)
        pair = np.empty(2 * H.HEADER_BYTES, np.uint8)  # this rank's, then the source's
        pair[:H.HEADER_BYTES] = np.frombuffer(header, np.uint8)
        reqs = [self.data.Isend(header, dest=dest, tag=tag),
                self.data.Irecv(pair[H.HEADER_BYTES:], source=source, tag=tag)]
        self._wait(reqs, ins, call, (device, dest, source))
        size_in = H.check(pair, header, (self.rank, source))[1]
        recv = np.empty(size_in, np.uint8)
        reqs = [self.data.Isend(blob, dest=dest, tag=tag + 1),
                self.data.Irecv(recv, source=source, tag=tag + 1)]
        self._wait(reqs, ins, call, (device, dest, source))
        self.where = "running"
        return pickle.loads(recv.tobytes())

    # ---- ending ------------------------------------------------------------------------
    def finish(self, ok: bool, results) -> tuple[bool, list | None]:
        """(every rank ok?, every device's results on rank 0, else None): a barrier that
        still answers the control channel, then one gather."""
        self.where = "finished"
        flags = np.zeros(self.size, np.int8)
        r = self.data.Iallgather(np.array([1 if ok else 0], np.int8), flags)
        # Longer than a collective's timeout: a device stuck at a collective times out
        # first and reports, and its ABORT ends this wait.
        self._wait([r], _End(), 0, tuple(range(self.size)), 2 * self.timeout + 5)
        gathered = self.data.gather(results, root=0)  # every rank is past the barrier
        return bool(flags.all()), gathered if self.rank == 0 else None
