"""Devices meeting per collective call, one thread per device (as XLA:CPU's in-process
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
from typing import Any

from ..common.errors import ExecutionError


class CollectiveTimeout(ExecutionError):
    pass


class Aborted(ExecutionError):
    """Raised in a waiting device when another device failed (that failure is the report)."""


@dataclass
class _Slot:
    values: dict[int, Any] = field(default_factory=dict)
    readers: int = 0


class Rendezvous:
    """Meeting points of one multi-device run of `n` devices."""

    def __init__(self, n: int, timeout: float = 60.0):
        self.n = n
        self.timeout = timeout
        self._cond = threading.Condition()
        self._slots: dict[tuple, _Slot] = {}
        self._calls: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._where: dict[int, str] = {d: "running" for d in range(n)}
        self._failed: tuple[int, BaseException] | None = None

    # ---- status, for the messages ----------------------------------------------------
    def finished(self, device: int) -> None:
        with self._cond:
            self._where[device] = "finished"
            self._cond.notify_all()

    def abort(self, device: int, error: BaseException) -> None:
        with self._cond:
            self._where[device] = f"failed ({type(error).__name__})"
            if self._failed is None:
                self._failed = (device, error)
            self._cond.notify_all()

    @property
    def failure(self) -> tuple[int, BaseException] | None:
        return self._failed

    # ---- the meeting -----------------------------------------------------------------
    def exchange(self, device: int, ins, group: tuple[int, ...], value: Any) -> list[Any]:
        """`value` of every member of `group` (in group order), once all have deposited."""
        with self._cond:
            call = self._calls[device][ins.name]
            self._calls[device][ins.name] = call + 1
            key = (ins.name, call, group)
            slot = self._slots.setdefault(key, _Slot())
            slot.values[device] = value
            self._where[device] = f"waiting at {ins.opcode} '{ins.name}' (call {call + 1})"
            self._cond.notify_all()
            deadline = time.monotonic() + self.timeout
            while len(slot.values) < len(group):
                if self._failed is not None:
                    raise Aborted(f"device {device}: stopped because device "
                                  f"{self._failed[0]} failed")
                left = deadline - time.monotonic()
                gone = [d for d in group if d not in slot.values
                        and self._where[d] == "finished"]
                if left <= 0 or (gone and len(gone) + len(slot.values) == len(group)):
                    raise CollectiveTimeout(self._timeout_message(device, ins, call, group,
                                                                  slot))
                self._cond.wait(left)
            out = [slot.values[d] for d in group]
            slot.readers += 1
            if slot.readers == len(group):
                del self._slots[key]
            self._where[device] = "running"
            return out

    def _timeout_message(self, device, ins, call, group, slot) -> str:
        missing = [d for d in group if d not in slot.values]
        stood = "; ".join(f"device {d} {self._where[d]}" for d in missing)
        when = ("ended without reaching it" if all(self._where[d] == "finished" for d in missing)
                else f"did not arrive within {self.timeout:g} s")
        return (f"{ins.opcode} '{ins.name}' (call {call + 1}): "
                f"device{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} {when} "
                f"(devices {', '.join(str(d) for d in group if d in slot.values)} waited); "
                f"{stood}")
