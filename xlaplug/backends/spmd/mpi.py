"""Devices across processes over MPI (mpi4py): rank r runs device r.

The transport offers what the collective kernels need -- `exchange` (every member's values,
for the rank-order reductions and the data movers) and `allreduce` (one MPI call for sum,
product, min and max of MPI-native types) -- on communicators split once per group set
(`prepare`, before the run: every rank walks the same module, so the collective splits
cannot disagree) and cached.

No wait is unbounded: every MPI operation is non-blocking and polled against the deadline.
While it polls, a rank also answers the control channel: another rank's failure (ABORT:
this rank stops quietly, the failing rank reports) and status queries (where do you stand?),
which a rank that timed out sends to name the devices that did not arrive.
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
from .buffers import BufferPool
from .rendezvous import Aborted, CollectiveTimeout

_ABORT, _STATUS_REQ, _STATUS_REP = 1, 2, 3
_SPIN_SECONDS = 0.02  # busy-poll this long before sleeping between polls
_FAST_POLLS = 64  # polls before the first look at the clock and the control channel
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
    import os
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS", "PMIX_SIZE"):
        if var in os.environ:
            try:
                return int(os.environ[var]) > 1
            except ValueError:
                return False
    return False


class MpiTransport:
    ONE_CALL_BELOW_BYTES = _BLOCKING_BYTES  # allreduce_one's operands are smaller

    def __init__(self, timeout: float = 60.0):
        self.MPI = mpi_module()
        world = self.MPI.COMM_WORLD
        self.rank, self.size = world.Get_rank(), world.Get_size()
        self.timeout = timeout
        self.data = world.Dup()   # collectives and their point-to-point messages
        self.ctl = world.Dup()    # aborts and status queries, never mixed with data
        self._comms: dict[tuple, Any] = {}
        self._calls: dict[str, int] = {}
        self._seq: dict[int, int] = {}  # id(communicator) -> collectives begun on it
        self._templates: dict = {}      # instruction -> its header (mpi_headers.template)
        self._heads_in: dict[int, np.ndarray] = {}  # group size -> headers' receive buffer
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

    def _comm(self, ins, group):
        for mine in self._comms.values():
            if group in mine:
                return mine[group]
        raise ExecutionError(f"{ins.opcode} '{ins.name}': group {list(group)} was not "
                             "prepared (internal error)")

    # ---- waiting, with the control channel answered -------------------------------------
    def _poll_control(self) -> None:
        # With several device threads in this rank (mpi_threads.py) one polls at a time: a
        # probed message must be received by the thread that probed it.
        if not self._ctl_lock.acquire(blocking=False):
            return
        try:
            self._read_control()
        finally:
            self._ctl_lock.release()

    def _read_control(self, replies: dict | None = None) -> None:
        """Reads every waiting control message: aborts (raised as Aborted, after the rest
        is read), status queries (answered) and, with `replies`, status answers."""
        self._drain_control(replies)
        if self.aborted is not None:
            src, msg = self.aborted
            raise Aborted(f"rank {self.rank}: stopped because rank {src} failed ({msg})")

    def _drain_control(self, replies: dict | None = None) -> None:
        MPI = self.MPI
        status = MPI.Status()
        while self.ctl.Iprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status):
            src, tag = status.Get_source(), status.Get_tag()
            msg = self.ctl.recv(source=src, tag=tag)
            if tag == _ABORT:
                if self.aborted is None or src < self.aborted[0]:
                    self.aborted = (src, msg)
            elif tag == _STATUS_REQ:
                self.ctl.isend(where_text(self.where), dest=src, tag=_STATUS_REP)
            elif tag == _STATUS_REP and replies is not None:
                replies[src] = msg  # (else a late answer to a finished query: dropped)

    def outranked(self, window: float = 0.25) -> bool:
        """After this rank sent its abort: did a lower rank fail too?  Ranks that time out
        at one collective do so together; each sends its abort, and within `window` the
        lowest one is known to all of them, so it alone reports."""
        until = time.monotonic() + window
        while time.monotonic() < until:
            with self._ctl_lock:
                self._drain_control({})
            if self.aborted is not None and self.aborted[0] < self.rank:
                return True
            time.sleep(1e-3)
        return False

    def _wait(self, requests, ins, call, group, timeout: float | None = None,
              unit: str = "device") -> None:
        """Polls `requests` to completion; `group`: the ranks waited on (`unit` names them in
        the timeout message: devices, or ranks when a rank runs several devices)."""
        MPI = self.MPI
        # The common case first: the operation completes within a few polls.  Those polls
        # read no clock and build no request array (a bare Test, then give the core up), as
        # a blocking MPI call's progress loop does; measured with MPICH at D=4 on 2 cores,
        # 1 MiB: this path took 1.00-1.09x raw MPI_Allreduce, the general loop 1.06-1.12x.
        test = requests[0].Test if len(requests) == 1 else \
            (lambda: MPI.Request.Testall(requests))
        for _ in range(_FAST_POLLS):
            if test():
                return
            os.sched_yield()  # see __init__: every poll gives the core up
        timeout = self.timeout if timeout is None else timeout
        start = time.monotonic()
        deadline = start + timeout
        # MPI progresses a non-blocking collective only inside MPI calls: spin on Test
        # first (as a blocking MPI call would), then back off to sleeps so a long wait
        # leaves the core to others; the control channel is read every so often.
        spins, pause = 0, 0.0
        while not test():
            spins += 1
            if spins % 256:
                if time.monotonic() - start < _SPIN_SECONDS:
                    os.sched_yield()
                    continue
                time.sleep(pause)
                pause = min(pause * 2 or 2e-5, 1e-3)
                continue
            self._poll_control()
            if time.monotonic() > deadline:
                with self._ctl_lock:
                    raise CollectiveTimeout(self._timeout_message(ins, call, group, timeout,
                                                                  unit))

    def _timeout_message(self, ins, call, group, timeout, unit: str = "device") -> str:
        """Asks every other member where it stands (2 s for the answers)."""
        others = [d for d in group if d != self.rank]
        for d in others:
            self.ctl.isend(None, dest=d, tag=_STATUS_REQ)
        stood: dict[int, str] = {}
        until = time.monotonic() + 2.0
        # Meanwhile this rank answers queries too (a member that timed out with it asks),
        # and an abort from elsewhere means another rank reports: this one stops quietly.
        while len(stood) < len(others) and time.monotonic() < until:
            self._read_control(stood)
            time.sleep(1e-3)
        here = f"waiting at {ins.opcode} '{ins.name}' (call {call + 1})"
        missing = [d for d in others if stood.get(d) != here]
        parts = [f"{unit} {d} {stood.get(d, 'did not answer (busy in a kernel, or gone)')}"
                 for d in missing]
        return (f"{ins.opcode} '{ins.name}' (call {call + 1}): {unit}"
                f"{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} did not "
                f"arrive within {timeout:g} s; {'; '.join(parts)}")

    def _enter(self, ins) -> int:
        call = self._calls.get(ins.name, 0)
        self._calls[ins.name] = call + 1
        self.where = (ins, call)  # written out only when another rank asks (where_text)
        return call

    # ---- the operations ---------------------------------------------------------------
    def exchange(self, device: int, ins, group: tuple[int, ...], value: list) -> list:
        """Every member's `value` (a list of host arrays), in group order."""
        call = self._enter(ins)
        comm = self._comm(ins, group)
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

    # ---- headers (mpi_headers.py) --------------------------------------------------------
    def _header(self, comm, ins, call: int, values, shapes: bool = True, size: int = 0,
                op: str = "") -> bytearray:
        """This rank's header for call `call` of `ins` on `comm` (its sequence counted).
        An instruction's operands keep their dtypes and shapes from call to call: its
        template is made once."""
        key = (ins, op) if hasattr(ins, "operands") else None
        tpl = self._templates.get(key) if key is not None else None
        if tpl is None:
            sig = H.signature(values, shapes) + (f" {op}" if op else "")
            tpl = H.template(ins.opcode, ins.name, sig)
            if key is not None:
                self._templates[key] = tpl
        seq = self._seq.get(id(comm), 0)
        self._seq[id(comm)] = seq + 1
        return H.stamp(bytearray(tpl), seq, call, size)

    def _agree(self, comm, ins, call: int, group, header: bytearray) -> list[int]:
        """Every member's header, swapped and checked before any payload moves; their
        payload sizes.  A mismatch raises H.CollectiveMismatch on every member."""
        n = len(group)
        recv = self._heads_in.get(n)
        if recv is None:
            recv = self._heads_in[n] = np.empty(n * H.HEADER_BYTES, np.uint8)
        self._wait([comm.Iallgather(header, recv)], ins, call, group)
        return H.check(recv, header, group)

    def can_allreduce(self, op: str, dtype: np.dtype) -> bool:
        dtype = np.dtype(dtype)
        return dtype in _NATIVE and not (op in _REAL_ONLY and dtype.kind == "c")

    def allreduce(self, device: int, ins, group, arrays: list[np.ndarray], op: str) -> list:
        """One MPI reduction over the group for all `arrays` (fused into one buffer when they
        share a dtype, as Horovod's tensor fusion does)."""
        mpi_op = self.mpi_op(op)
        comm = self._comm(ins, group)
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
            bufs.append((idx, send, self._recv.take(dt, send.size)))
        if sum(b[1].nbytes for b in bufs) >= _BLOCKING_BYTES:
            # Large: every member has arrived (the headers' polled swap: no unbounded
            # wait), so the blocking MPI_Allreduce, whose algorithms beat the non-blocking
            # one's there.
            for idx, send, recv in bufs:
                comm.Allreduce(send, recv, op=mpi_op)
                pending.append((idx, recv, None, send))
        else:
            for idx, send, recv in bufs:
                pending.append((idx, recv, comm.Iallreduce(send, recv, op=mpi_op), send))
            self._wait([p[2] for p in pending], ins, call, group)
        for idx, recv, _, _ in pending:
            at = 0
            for i in idx:
                n = arrays[i].size
                out[i] = recv[at:at + n].reshape(arrays[i].shape)
                at += n
        self.where = "running"
        return out

    def allreduce_one(self, comm, ins, group, mpi_op):
        """fn(array) -> its reduction over `group`: one operand under _BLOCKING_BYTES (the
        common case), with nothing to plan per call.  Each Python step a rank takes per
        call costs every rank: ranks that share cores run with caches the others' copies
        evicted (measured at D=4 on 2 cores, 1 MiB: preparing the call took 15-40 us of
        wall time where a warm loop takes 3 us, and each 5 us of it made the all-reduce
        3-6% slower).  `comm`: from _comm; `mpi_op`: an MPI.Op."""
        calls, take, wait, polls = self._calls, self._recv.take, self._wait, _FAST_POLLS
        name, contiguous, give_up_core = ins.name, np.ascontiguousarray, os.sched_yield
        header, agree = self._header, self._agree
        op = next(k for k in ("add", "multiply", "minimum", "maximum")
                  if self.mpi_op(k) == mpi_op)  # for the header

        def run(a: np.ndarray) -> np.ndarray:
            call = calls.get(name, 0)  # _enter's bookkeeping, inline
            calls[name] = call + 1
            self.where = (ins, call)
            agree(comm, ins, call, group, header(comm, ins, call, a, True, 0, op))
            shape = a.shape  # (ascontiguousarray makes a rank-0 array rank 1)
            a = contiguous(a)
            recv = take(a.dtype, a.size)
            request = comm.Iallreduce(a, recv, op=mpi_op)
            test = request.Test
            for _ in range(polls):  # _wait's first polls, inline
                if test():
                    break
                give_up_core()
            else:
                wait([request], ins, call, group)
            self.where = "running"
            return recv.reshape(shape)
        return run

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
    def abort_others(self, message: str) -> None:
        for d in range(self.size):
            if d != self.rank:
                self.ctl.isend(message, dest=d, tag=_ABORT)

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


def where_text(where) -> str:
    """A rank's state as its status reply and the timeout message write it: "running",
    "finished", or (instruction, call index) while it waits at a collective."""
    if isinstance(where, str):
        return where
    ins, call = where
    return f"waiting at {ins.opcode} '{ins.name}' (call {call + 1})"


class _End:
    opcode, name = "end of run", "(all devices)"


class _Start:
    opcode, name = "start of run", "(all devices)"
