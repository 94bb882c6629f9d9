"""Devices taking turns on one thread: `DeviceFibers(n).run(job)` runs job(d) for every
device d as a greenlet of the calling thread, switching to another device whenever one waits
at a collective.

Why: a small multi-device module is all dispatch.  With one OS thread per device, every
collective wakes each waiting thread through the kernel and the GIL (four devices on two
cores: ~0.1 ms a meeting, and as much again to start and end a run), which is more than
XLA:CPU's whole 4 KiB all-reduce on 4 host devices.  A greenlet switch costs under a
microsecond, and a device that waits costs nothing until the last member of its meeting
arrives.  What is lost is parallelism between devices, so runs with large arrays keep
threads (`scheduling_for`): their kernels run long enough to pay for the wake-ups, and numpy
releases the GIL for them.

The rendezvous is the threads' one (rendezvous.py) with this class's conditions: waiting
releases the rendezvous's lock and switches to the scheduler, which runs the next device
that can go on.  When none can -- every unfinished device waits at a meeting another will
never join -- the run is `stalled`: each waiter is woken and ends with the rendezvous's
error naming who did not arrive, at once rather than after the collective timeout.
"""
from __future__ import annotations

from collections import deque
from typing import Callable

import threading

import greenlet


class _Condition:
    """threading.Condition's wait / notify_all for greenlets of one thread."""

    def __init__(self, lock, scheduler: "DeviceFibers"):
        self._lock = lock
        self._scheduler = scheduler
        self._waiting: list = []

    def wait(self, timeout: float | None = None) -> None:
        """Parks this device until notified or stalled; `timeout` has no role here: only
        another device's progress can end a wait, and the scheduler sees when none can."""
        me = greenlet.getcurrent()
        self._waiting.append(me)
        self._lock.release()
        try:
            self._scheduler._park()
        finally:
            self._lock.acquire()
            if me in self._waiting:
                self._waiting.remove(me)

    def notify_all(self) -> None:
        for g in self._waiting:
            self._scheduler._ready(g)
        self._waiting.clear()


class DeviceFibers:
    """n devices run in turn on the calling thread (DeviceThreads' interface).  The greenlets
    are kept from run to run (making four afresh cost ~50 us a run, 7 us kept), one set per
    thread that runs them: a greenlet belongs to the thread it was made on."""

    def __init__(self, n: int):
        self.n = n
        self.stalled = False
        self._runnable: deque = deque()
        self._queued: set = set()
        self._hub = None
        self._fibers: list = []
        self._thread: int | None = None
        self._running: set[int] = set()  # devices whose job of this run has not returned

    def condition(self, lock) -> _Condition:
        return _Condition(lock, self)

    def run(self, job: Callable[[int], None]) -> None:
        """job(d) for every device, in turns; returns when all have returned.  A job must not
        raise (the device runner reports through the rendezvous); one that does is raised
        once all have ended."""
        if self._hub is not None:
            raise RuntimeError("DeviceFibers.run is not reentrant")
        self._hub = greenlet.getcurrent()
        self.stalled = False
        errors: list[BaseException] = []

        def guarded(d: int) -> None:
            try:
                job(d)
            except BaseException as e:  # noqa: BLE001 - raised below, after the others
                errors.append(e)
        try:
            fibers = self._kept()
            self._running = set(range(self.n))
            for g in fibers:
                self._runnable.append((g, guarded))
            while True:
                while self._runnable:
                    g, payload = self._runnable.popleft()
                    self._queued.discard(g)
                    g.switch(payload)
                if not self._running:
                    break
                # Every unfinished device waits at a meeting that cannot complete: wake them
                # all, as stalled; their rendezvous raises the missing-device error.
                self.stalled = True
                for d in self._running:
                    self._ready(fibers[d])
        finally:
            self._hub = None
            self._runnable.clear()
            self._queued.clear()
        if errors:
            raise errors[0]

    def _kept(self) -> list:
        me = threading.get_ident()
        if self._thread != me:
            self._fibers = [greenlet.greenlet(self._serve) for _ in range(self.n)]
            for d, g in enumerate(self._fibers):
                g.switch(d)  # to its first wait for a job
            self._thread = me
        return self._fibers

    def _serve(self, d: int) -> None:
        job = self._hub.switch()
        while True:
            job(d)
            self._running.discard(d)
            job = self._hub.switch()

    def _ready(self, g) -> None:
        if g not in self._queued:
            self._queued.add(g)
            self._runnable.append((g, None))

    def _park(self) -> None:
        """Back to the scheduler until this device is made ready again."""
        self._hub.switch()

    def close(self) -> None:
        """Ends the kept greenlets (those of the calling thread)."""
        if self._thread == threading.get_ident():
            for g in self._fibers:
                g.throw(greenlet.GreenletExit)
        self._fibers, self._thread = [], None

    def __enter__(self) -> "DeviceFibers":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
