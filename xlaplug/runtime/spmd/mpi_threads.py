"""k devices per MPI rank (`mpiexec -n R` on a module of D = R * k devices): rank r runs
devices r*k .. r*k + k-1, one thread each.

A collective's group may hold devices of this rank and of others.  The members on this rank
meet at the rank's Rendezvous; the lowest of them (the rank's leader for that group) swaps
the rank's values with the leaders of the group's other ranks over MPI -- pickled, point to
point, every wait polled against the collective timeout by MpiTransport._wait -- and hands
every member's values to its rank's members at a second meeting.  The kernels then reduce
or move the values as in one process, so reductions follow rank order and give the bits
threads in one process give (this transport offers no one-call MPI all-reduce).

Tags: two collectives in flight between the same two ranks have distinct leaders on each
side (a device runs one collective at a time), so the tag made of the sending and the
receiving leader's slots (device % k) keeps their messages apart; one pair's messages
arrive in the order sent (MPI's non-overtaking rule), as the leaders' calls are made.
"""
from __future__ import annotations

import pickle
from typing import Any

import numpy as np

from ...backends.spmd import mpi_headers as H
from ...backends.spmd.mpi import MpiTransport
from ...backends.spmd.rendezvous import Rendezvous


class RankThreadsTransport:
    parallel = True  # the rank's devices run at once, on threads

    def __init__(self, mpi: MpiTransport, k: int, local: Rendezvous):
        self.mpi, self.k, self.local = mpi, k, local
        self.rank = mpi.rank
        self._seq: dict[tuple, int] = {}  # (peer, tag) -> swaps between the leaders

    def exchange(self, device: int, ins, group: tuple[int, ...], value: Any) -> list[Any]:
        """`value` of every member of `group` (in group order), across ranks."""
        k = self.k
        ranks = sorted({d // k for d in group})
        if ranks == [self.rank]:
            return self.local.exchange(device, ins, group, value)
        here = tuple(d for d in group if d // k == self.rank)
        mine = self.local.exchange(device, ins, here, value)
        leader = here[0]
        if device != leader:
            # The leader's MPI wait is bounded by the timeout (then its error, which names
            # the missing ranks, stops this rank): wait past it, so that error is the report.
            return self.local.meet_again(device, ins, here, None, "from the leader",
                                         2 * self.mpi.timeout + 5)[0]
        every = dict(zip(here, mine))
        every.update(self._swap(ins, group, ranks, leader, every))
        full = [every[d] for d in group]
        self.local.meet_again(device, ins, here, full, "from the leader",
                              2 * self.mpi.timeout + 5)
        return full

    def _headers(self, ins, call: int, values: dict, size: int, tags: dict) -> dict:
        """This leader's header for each peer rank (mpi_headers.py): the members' operands
        by their place in the group (device ids differ between ranks), and a sequence
        counted per pair of leaders (`tags`: peer -> the tag naming the pair)."""
        sig = H.signature(list(values.values()), hasattr(ins, "operands"))
        tpl = H.template(ins.opcode, ins.name, sig)
        out = {}
        for s, tag in tags.items():
            seq = self._seq.get((s, tag), 0)
            self._seq[(s, tag)] = seq + 1
            out[s] = H.stamp(bytearray(tpl), seq, call, size)
        return out

    def _swap(self, ins, group, ranks, leader: int, values: dict) -> dict:
        """This rank's values to the leaders of the group's other ranks, theirs back."""
        mpi, k = self.mpi, self.k
        others = [(s, min(d for d in group if d // k == s)) for s in ranks if s != self.rank]
        call = self.local._calls[leader][ins.name] - 1  # for the messages
        mpi.where = (ins, call)
        blob = np.frombuffer(pickle.dumps(values, protocol=5), np.uint8)
        out_tag = {s: 1 + (leader % k) * k + lead % k for s, lead in others}
        in_tag = {s: 1 + (lead % k) * k + leader % k for s, lead in others}
        # A header first (the collective, this rank's members' operands, the size), each
        # peer's checked against this rank's before any payload moves (mpi_headers.py).
        headers = self._headers(ins, call, values, blob.size, out_tag)
        pairs = {s: np.empty(2 * H.HEADER_BYTES, np.uint8) for s, _ in others}
        reqs = []
        for s, _ in others:
            pairs[s][:H.HEADER_BYTES] = np.frombuffer(headers[s], np.uint8)
            reqs.append(mpi.data.Isend(headers[s], dest=s, tag=out_tag[s]))
            reqs.append(mpi.data.Irecv(pairs[s][H.HEADER_BYTES:], source=s, tag=in_tag[s]))
        waited = tuple(ranks)
        mpi._wait(reqs, ins, call, waited, unit="rank")
        sizes = {s: H.check(pairs[s], headers[s], (self.rank, s))[1] for s, _ in others}
        blobs = {s: np.empty(sizes[s], np.uint8) for s, _ in others}
        reqs = []
        for s, _ in others:
            reqs.append(mpi.data.Isend(blob, dest=s, tag=out_tag[s]))
            reqs.append(mpi.data.Irecv(blobs[s], source=s, tag=in_tag[s]))
        mpi._wait(reqs, ins, call, waited, unit="rank")
        mpi.where = "running"
        got: dict = {}
        for s, _ in others:
            got.update(pickle.loads(blobs[s].tobytes()))
        return got


def run_rank_devices(module, grid, mpi: MpiTransport, make_context, args_of,
                     timeout: float, profilers: dict | None = None,
                     blas: int | None = None) -> list:
    """This rank's k = D / ranks devices, one thread each; their results (host values) in
    device order.  `args_of(d)`: device d's arguments; `make_context(d)`: its context;
    `profilers`: {device: profiler.Profiler} for this run; `blas`: the run's BLAS threads
    (set once around it; None: left as they are)."""
    from .runner import _place, on_device_threads
    if mpi.MPI.Query_thread() < mpi.MPI.THREAD_MULTIPLE:
        from ...backends.common.errors import ExecutionError
        raise ExecutionError("several devices per MPI rank need an MPI initialized with "
                             "MPI_THREAD_MULTIPLE (mpi4py's default)")
    k = grid.count // mpi.size

    def work(d: int, rendezvous: Rendezvous):
        ctx = make_context(d)
        ctx.begin_run(profiler=(profilers or {}).get(d),
                      spmd=_place(ctx, grid, d, RankThreadsTransport(mpi, k, rendezvous), True))
        try:
            args = [a if isinstance(a, tuple) else np.asarray(a) for a in args_of(d)]
            with np.errstate(all="ignore"):
                out = ctx.run(module.entry, ctx.memory.to_device(args))
            return ctx.memory.to_host(out, module.entry.root.shape)
        finally:
            ctx.end_run()

    return on_device_threads(k, timeout, work, first=mpi.rank * k, blas=blas)
