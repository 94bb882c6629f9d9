"""The common all-reduce over MPI, with nothing planned per call: one operand under
MpiTransport.ONE_CALL_BELOW_BYTES (4 MiB), a native op (sum, product, min, max).

Each Python step a rank takes per call costs every rank: ranks that share cores run with
caches the others' copies evicted (measured at D=4 on 2 cores, 1 MiB: preparing the call
took 15-40 us of wall time where a warm loop takes 3 us, and each 5 us of it made the
all-reduce 3-6% slower).  So the call's header (mpi_headers.py: sequence, call number,
digest) is a template made on the first call, of which later calls write the two
counters, and it travels in message buffers made once per operand size, point to point,
polled inline:

* up to 64 KiB the operand travels with the header and each member reduces the group's
  operands in rank order (one round trip: the same bits as in one process);
* above, the headers alone swap, then one MPI_Iallreduce (into XLA's result buffer when
  the engine gives one: no copy).

Ranks that disagree fail as in HeaderSwaps._settle (every member names both sides); a
wait past the first polls goes to PolledWaits (timeout, control channel).  What follows
the headers' start -- their check, then the payload -- is `finisher`'s, which the compiled
handler's calls that Python finishes (xla/ffi/mpi_sites.resume) run too, through
MpiTransport.allreduce_finisher: both move the payload alike.
"""
from __future__ import annotations

import os

import numpy as np

from . import mpi_headers as H
from .mpi_headers import _HEAD_TAG
from .mpi_waiting import _FAST_POLLS

# Up to this many bytes an all-reduce's operand travels with its header, point to point,
# and each member reduces the group's operands in rank order (one round trip, where a
# header swap then an MPI all-reduce made two).
WITH_HEADER_BYTES = 64 << 10
UFUNCS = {"add": np.add, "multiply": np.multiply, "minimum": np.minimum,
          "maximum": np.maximum}


def usable(into: np.ndarray, a: np.ndarray) -> bool:
    """Whether the reduction of `a` may land in `into` (then viewed flat): its dtype and
    size, C-contiguous, and not `a`'s memory (MPI's send and receive buffers must not
    overlap)."""
    return into.dtype == a.dtype and into.size == a.size and into.flags.c_contiguous \
        and not np.may_share_memory(into, a)


def reduce_carried(boxes: list, dtype, ufunc, out: np.ndarray) -> None:
    """out = the members' operands carried in their messages, reduced in rank order (the
    bits of one process's reduction)."""
    every = [b[H.HEADER_BYTES:].view(dtype) for b in boxes]
    ufunc(every[0], every[1], out=out)
    for more in every[2:]:
        ufunc(out, more, out=out)


def finisher(t, comm, ins, group, mpi_op):
    """fn(call, boxes, reqs, done, a, out, failed=None, posted=None): finishes call `call`
    of all-reduce `ins` over `group` on MpiTransport `t` once its header swap has started
    -- `reqs` its requests (all complete when `done`), `boxes` the members' messages in
    group order (this rank's header, then `a` where it travels with it), `failed` the
    MPI.Exception the swap met.  Checks the headers (waiting for them unless `done`), then
    out (flat, a's dtype and size) = the reduction of the members' `a`: reduced here in
    rank order from the messages up to WITH_HEADER_BYTES, below t.ONE_CALL_BELOW_BYTES one
    MPI_Iallreduce polled, else one blocking MPI_Allreduce (every member has arrived).
    `posted`: the payload's request when it is under way already (the compiled handler
    posted it): only waited for.  Names are bound once per site, for the hot path (see
    the module's docstring)."""
    settle, outsized, wait, poll_control = t._settle, t._outsized, t._wait, t._poll_control
    me, agree_bytes, polls, give_up_core = group.index(t.rank), H.AGREE_BYTES, _FAST_POLLS, \
        os.sched_yield
    others = [j for j in range(len(group)) if j != me]
    ufunc = UFUNCS[next(k for k in UFUNCS if t.mpi_op(k) == mpi_op)]
    iallreduce, allreduce, blocking = comm.Iallreduce, comm.Allreduce, t.ONE_CALL_BELOW_BYTES

    def finish(call, boxes, reqs, done, a, out, failed=None, posted=None):
        if failed is not None:  # a longer message: see HeaderSwaps._swap_headers
            outsized(boxes[me], reqs, failed)
        if posted is None:
            head = boxes[me][:agree_bytes].tobytes()
            if not done or any(boxes[j][:agree_bytes].tobytes() != head for j in others):
                if not done:  # the first polls are spent: read the control channel, as
                    poll_control()  # PolledWaits does while it waits on
                settle(reqs, done, ins, call, group, boxes)  # waits on; names who differs
            if a.nbytes <= WITH_HEADER_BYTES:  # came with the headers: reduced here
                reduce_carried(boxes, a.dtype, ufunc, out)
            elif a.nbytes >= blocking:
                allreduce(a, out, op=mpi_op)
            else:
                request = iallreduce(a, out, op=mpi_op)
                test = request.Test
                for _ in range(polls):  # _wait's first polls, inline
                    if test():
                        break
                    give_up_core()
                else:
                    wait([request], ins, call, group)
        else:  # the compiled handler's own polls are spent: as above
            poll_control()
            wait([posted], ins, call, group)
        t.where = "running"
    return finish


def allreduce_one(t, comm, ins, group, mpi_op):
    """fn(array, into=None) -> its reduction over `group` on MpiTransport `t`; `into`:
    where the result goes (XLA's result buffer), else a buffer reused from call to call.
    `comm`: t.communicator's; `mpi_op`: an MPI.Op."""
    calls, take, polls = t._calls, t._recv.take, _FAST_POLLS
    name, contiguous, give_up_core = ins.name, np.ascontiguousarray, os.sched_yield
    header, finish = t._header, t.allreduce_finisher(comm, ins, group, mpi_op)
    recv_init, send_init = comm.Recv_init, comm.Send_init
    op = next(k for k in UFUNCS if t.mpi_op(k) == mpi_op)
    skip, me, MPI = H.HEADER_BYTES, group.index(t.rank), t.MPI
    testall, others = MPI.Request.Testall, [j for j in range(len(group)) if j != me]
    startall = MPI.Prequest.Startall
    # (dtype, size) -> (the members' message buffers, this rank's counters (seq, call) as
    # int64, whether the operand travels with the header, the persistent receives and
    # sends between the buffers): made once, so a call writes 16 bytes of header, not 128,
    # and starts its requests (a posted Irecv and Isend per member took twice as long:
    # 8.4 us against 4.3 for a header swap on 2 ranks, measured at load 9)
    boxes_of: dict = {}
    seqs, cid = t._seq, id(comm)

    def swap(a: np.ndarray, call: int) -> tuple:
        """Starts the swap of every member's message (header, then its operand up to
        WITH_HEADER_BYTES): (the messages, the swap's requests, whether they completed,
        the MPI.Exception they met) -- finish's arguments."""
        kept = boxes_of.get((a.dtype, a.size))
        if kept is None:  # this rank's message: the header, then the operand (if it fits)
            first = np.frombuffer(header(comm, ins, call, a, True, 0, op), np.uint8)
            carried = a.nbytes <= WITH_HEADER_BYTES
            boxes = [np.empty(skip + (a.nbytes if carried else 0), np.uint8) for _ in group]
            boxes[me][:skip] = first
            reqs = [recv_init(boxes[j], source=j, tag=_HEAD_TAG) for j in others] + \
                [send_init(boxes[me], dest=j, tag=_HEAD_TAG) for j in others]  # (as _post)
            boxes_of[(a.dtype, a.size)] = (boxes, boxes[me][:16].view(np.int64), carried,
                                           reqs)
        else:  # the template's counters only (H.stamp's, inline)
            boxes, counters, carried, reqs = kept
            seq = seqs.get(cid, 0)
            seqs[cid] = seq + 1
            counters[0], counters[1] = seq, call
        mine = boxes[me]
        if carried:
            mine[skip:] = a.reshape(-1).view(np.uint8)
        try:
            startall(reqs)
            for _ in range(polls):  # _wait's first polls, inline
                if testall(reqs):
                    return boxes, reqs, True, None
                give_up_core()
        except MPI.Exception as e:
            return boxes, reqs, False, e
        return boxes, reqs, False, None

    def run(a: np.ndarray, into: np.ndarray | None = None) -> np.ndarray:
        call = calls.get(name, 0)  # t._enter's bookkeeping, inline
        calls[name] = call + 1
        t.where = (ins, call)
        shape = a.shape  # (ascontiguousarray makes a rank-0 array rank 1)
        a = contiguous(a)
        if into is not None and usable(into, a):
            recv, result = into.reshape(-1), into
        else:
            recv = take(a.dtype, a.size)
            result = recv.reshape(shape)
        boxes, reqs, done, failed = swap(a, call)
        finish(call, boxes, reqs, done, a, recv, failed)
        return result
    return run
