"""How an MPI rank waits (MpiTransport's base): every wait polled against the collective
timeout, the control channel read while it polls -- another rank's failure (ABORT: this rank
stops quietly, the failing rank reports) and status queries (where do you stand?), which a
rank that timed out sends to name the ranks that did not arrive.
"""
from __future__ import annotations

import os
import time

from .rendezvous import Aborted, CollectiveTimeout

_ABORT, _STATUS_REQ, _STATUS_REP = 1, 2, 3
_SPIN_SECONDS = 0.02  # busy-poll this long before sleeping between polls
_FAST_POLLS = 64  # polls before the first look at the clock and the control channel


class PolledWaits:
    """Needs `MPI`, `rank`, `ctl` (the control communicator), `timeout`, `where`,
    `aborted` and `_ctl_lock` (set by MpiTransport)."""

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
        self._poll(test, ins, call, group, timeout, unit)

    def _poll(self, test, ins, call, group, timeout: float | None = None,
              unit: str = "device") -> None:
        """Calls `test()` until it returns True, as _wait polls its requests."""
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

    def abort_others(self, message: str) -> None:
        for d in range(self.size):
            if d != self.rank:
                self.ctl.isend(message, dest=d, tag=_ABORT)


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
