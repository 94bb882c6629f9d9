"""Devices meeting per collective call, a thread or a fiber per device (as XLA:CPU's in-process
communicator and the StableHLO interpreter's process grid do).

Every device that reaches a collective deposits its value under a key -- the instruction,
how many times this device has run it (collectives inside while loops meet per iteration)
and the group -- and waits for the group's other members.  No wait is unbounded: past the
timeout the collective fails with an error naming the instruction, the devices that did not
arrive and where each of them stood (running, waiting at another collective, finished,
failed).  When one device fails, `abort` wakes every waiting device, which then stops.
"""
from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable

from ..common.errors import ExecutionError


class CollectiveTimeout(ExecutionError):
    pass


class Aborted(ExecutionError):
    """Raised in a waiting device when another device failed (that failure is the report)."""


@dataclass
class _Slot:
    # Its own condition on the rendezvous's lock: a deposit wakes only this meeting's
    # waiters, once, when the last member comes (with 4 device threads a shared condition
    # woke every waiter at every deposit, each taking the GIL in turn).
    arrived: threading.Condition
    values: dict[int, Any] = field(default_factory=dict)
    readers: int = 0
    done: bool = False  # every member is here and the last one's work (if any) is done
    failed: int | None = None  # the device whose work for the meeting raised


class Rendezvous:
    """Meeting points of one multi-device run of `n` devices."""

    def __init__(self, n: int, timeout: float = 60.0, first: int = 0, fibers=None):
        """Devices first .. first + n - 1 (an MPI rank's, when it runs several); `fibers`:
        the DeviceFibers the devices run as (None: each has its own thread)."""
        self.n = n
        self.timeout = timeout
        self._fibers = fibers
        self._condition = threading.Condition if fibers is None else fibers.condition
        self._lock = threading.Lock()  # guards everything below
        self._slots: dict[tuple, _Slot] = {}
        self._calls: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._where: dict[int, str] = {d: "running" for d in range(first, first + n)}
        self._failed: tuple[int, BaseException] | None = None

    @property
    def parallel(self) -> bool:
        """Whether the devices run at once (a thread each, or fibers on several threads),
        so that work divided among them overlaps; as fibers of one thread they take turns."""
        return self._fibers is None or self._fibers.parallel

    # ---- status, for the messages ----------------------------------------------------
    def finished(self, device: int) -> None:
        with self._lock:
            self._where[device] = "finished"
            self._wake_all()

    def abort(self, device: int, error: BaseException) -> None:
        with self._lock:
            self._where[device] = f"failed ({type(error).__name__})"
            if self._failed is None:
                self._failed = (device, error)
            self._wake_all()

    def _wake_all(self) -> None:
        """Every waiter re-checks (a device finished or failed); under the lock."""
        for slot in self._slots.values():
            slot.arrived.notify_all()

    @property
    def failure(self) -> tuple[int, BaseException] | None:
        return self._failed

    # ---- the meeting -----------------------------------------------------------------
    def exchange(self, device: int, ins, group: tuple[int, ...], value: Any) -> list[Any]:
        """`value` of every member of `group` (in group order), once all have deposited."""
        return self._meet(device, ins, group, value, self._count(device, ins), "values")

    def share(self, device: int, ins, group: tuple[int, ...], value: Any,
              work: Callable[[list[Any]], None]) -> list[Any]:
        """Meets as `exchange`, runs `work(every member's value)` on this device's thread,
        then meets again: it returns once every member's work is done.  So each member may
        do its share of one result -- read the others' inputs, write into their outputs --
        and reads its own output only when all shares are in (XLA:CPU's in-process
        collectives divide the work so)."""
        call = self._count(device, ins)
        every = self._meet(device, ins, group, value, call, "values")
        work(every)
        self._meet(device, ins, group, None, call, "shares done")
        return every

    def share_by_last(self, device: int, ins, group: tuple[int, ...], value: Any,
                      work: Callable[[list[Any]], None]) -> list[Any]:
        """Meets as `exchange`; the last member to arrive runs `work(every member's value)`
        before any member returns.  For small buffers: one meeting and one pass over the
        values, where `share` meets twice (each meeting of four device threads costs ~0.1
        ms on two cores, more than reducing a few KiB)."""
        return self._meet(device, ins, group, value, self._count(device, ins), "values",
                          work=work)

    def meet_again(self, device: int, ins, group: tuple[int, ...], value: Any, step: str,
                   timeout: float | None = None) -> list[Any]:
        """A further meeting of the same call (the last `exchange` of `ins` by `device`),
        told apart by `step`; `timeout` overrides the rendezvous's own."""
        with self._lock:
            call = self._calls[device][ins.name] - 1
        return self._meet(device, ins, group, value, call, step, timeout)

    def _count(self, device: int, ins) -> int:
        with self._lock:
            call = self._calls[device][ins.name]
            self._calls[device][ins.name] = call + 1
            return call

    def _meet(self, device: int, ins, group, value, call: int, step: str,
              timeout: float | None = None, work=None) -> list[Any]:
        with self._lock:
            key = (ins.name, call, group, step)
            slot = self._slots.get(key)
            if slot is None:
                slot = self._slots[key] = _Slot(self._condition(self._lock))
            slot.values[device] = value
            self._where[device] = f"waiting at {ins.opcode} '{ins.name}' (call {call + 1})"
            if len(slot.values) == len(group):
                try:
                    if work is not None:
                        # Under the lock: only this group's members wait on it, and they wait
                        # for this result anyway (it is small: share_by_last's callers).
                        work([slot.values[d] for d in group])
                except BaseException:
                    slot.failed = device
                    raise
                finally:
                    slot.done = True
                    slot.arrived.notify_all()
            deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
            while not slot.done:
                if self._failed is not None:
                    raise Aborted(f"device {device}: stopped because device "
                                  f"{self._failed[0]} failed")
                left = deadline - time.monotonic()
                gone = [d for d in group if d not in slot.values
                        and self._where[d] == "finished"]
                stalled = self._fibers is not None and self._fibers.stalled
                if left <= 0 or stalled or (gone and len(gone) + len(slot.values) == len(group)):
                    raise CollectiveTimeout(self._timeout_message(device, ins, call, group,
                                                                  slot))
                slot.arrived.wait(left)
            if slot.failed is not None and slot.failed != device:
                raise Aborted(f"device {device}: stopped because device {slot.failed} failed")
            out = [slot.values[d] for d in group]
            slot.readers += 1
            if slot.readers == len(group):
                del self._slots[key]
            self._where[device] = "running"
            return out

    def _timeout_message(self, device, ins, call, group, slot) -> str:
        missing = [d for d in group if d not in slot.values]
        stood = "; ".join(f"device {d} {self._where[d]}" for d in missing)
        if all(self._where[d] == "finished" for d in missing):
            when = "ended without reaching it"
        elif self._fibers is not None and self._fibers.stalled:
            when = "cannot arrive (every device waits at a collective)"
        else:
            when = f"did not arrive within {self.timeout:g} s"
        return (f"{ins.opcode} '{ins.name}' (call {call + 1}): "
                f"device{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} {when} "
                f"(devices {', '.join(str(d) for d in group if d in slot.values)} waited); "
                f"{stood}")
