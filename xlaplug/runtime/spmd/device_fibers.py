"""Devices taking turns on one thread, or on a few: `DeviceFibers(n).run(job)` runs job(d)
for every device d as a greenlet of the calling thread, switching to another device whenever
one waits at a collective; `DeviceFibers(n, threads=k)` spreads the n devices over k threads
(the calling one and k - 1 kept threads), each running its block of devices as greenlets.

Why: a small multi-device module is all dispatch.  With one OS thread per device, every
collective wakes each waiting thread through the kernel and the GIL (four devices on two
cores: ~0.1 ms a meeting, and as much again to start and end a run), which is more than
XLA:CPU's whole 4 KiB all-reduce on 4 host devices.  A greenlet switch costs under a
microsecond, and a device that waits costs nothing until the last member of its meeting
arrives.  What one thread loses is parallelism between devices; a compute-heavy module gets
one thread per core (runner.devices_for), so its kernels overlap while most meetings stay
switches, and no more threads than cores compete for the cores and the GIL.

The rendezvous is the threads' one (rendezvous.py) with this class's conditions: waiting
releases the rendezvous's lock and switches to its thread's scheduler (the hub), which runs
the next device of that thread that can go on, or sleeps until another thread readies one.
When none can anywhere -- every unfinished device waits at a meeting another will never
join -- the run is `stalled`: each waiter is woken and ends with the rendezvous's error
naming who did not arrive, at once rather than after the collective timeout.  On several
threads a wait also ends at its timeout (a device of another thread may be stuck in a
kernel, which is no stall); on one thread the stall is the only way a wait can end.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Callable

import greenlet

from .device_threads import DeviceThreads


class _Condition:
    """threading.Condition's wait / notify_all for the devices' greenlets."""

    def __init__(self, lock, scheduler: "DeviceFibers"):
        self._lock = lock
        self._scheduler = scheduler
        self._waiting: list = []

    def wait(self, timeout: float | None = None) -> None:
        """Parks this device until notified, stalled or (on several threads) past
        `timeout`; on one thread only another device's progress can end a wait, and the
        scheduler sees when none can."""
        me = greenlet.getcurrent()
        self._waiting.append(me)
        self._lock.release()
        try:
            several = self._scheduler.threads > 1 and timeout is not None
            self._scheduler._park(time.monotonic() + timeout if several else None)
        finally:
            self._lock.acquire()
            if me in self._waiting:
                self._waiting.remove(me)

    def notify_all(self) -> None:
        for g in self._waiting:
            self._scheduler._ready(g)
        self._waiting.clear()


class DeviceFibers:
    """n devices as greenlets on `threads` threads (DeviceThreads' interface); device d runs
    on thread d * threads // n.  The greenlets are kept from run to run (making four afresh
    cost ~50 us a run, 7 us kept), one set per thread that runs them: a greenlet belongs to
    the thread it was made on."""

    def __init__(self, n: int, threads: int = 1):
        if not 1 <= threads <= max(n, 1):
            raise ValueError(f"{threads} threads for {n} device fibers")
        self.n, self.threads = n, threads
        self.stalled = False
        self._cv = threading.Condition(threading.Lock())  # guards the scheduling state
        self._runnable = [deque() for _ in range(threads)]  # (greenlet, payload) per thread
        self._queued: set = set()
        self._parked: dict = {}  # greenlet -> its wait's deadline (None: none)
        self._slot: dict = {}  # greenlet -> the thread slot it belongs to
        self._hubs: list = [None] * threads
        self._fibers: list[list] = [[] for _ in range(threads)]
        self._of_device: dict[int, object] = {}  # device -> its greenlet
        self._owner: list[int | None] = [None] * threads  # thread ident of each slot's set
        self._running: set[int] = set()  # devices whose job of this run has not returned
        self._pool = DeviceThreads(threads) if threads > 1 else None
        self._busy = False
        self._closed = False

    @property
    def parallel(self) -> bool:
        """Whether devices run at once (on several threads)."""
        return self.threads > 1

    def slot_of(self, device: int) -> int:
        """The thread slot that runs `device` (blocks of consecutive devices)."""
        return device * self.threads // self.n

    def devices_of(self, slot: int) -> list[int]:
        return [d for d in range(self.n) if self.slot_of(d) == slot]

    def condition(self, lock) -> _Condition:
        return _Condition(lock, self)

    def run(self, job: Callable[[int], None]) -> None:
        """job(d) for every device, in turns; returns when all have returned.  A job must not
        raise (the device runner reports through the rendezvous); one that does is raised
        once all have ended."""
        if self._busy:
            raise RuntimeError("DeviceFibers.run is not reentrant")
        if self._closed:
            raise RuntimeError("DeviceFibers used after close")
        self._busy = True
        self.stalled = False
        errors: list[BaseException] = []

        def guarded(d: int) -> None:
            try:
                job(d)
            except BaseException as e:  # noqa: BLE001 - raised below, after the others
                errors.append(e)
        try:
            self._running = set(range(self.n))
            if self._pool is None:
                self._hub(0, guarded)
            else:
                self._pool.run(lambda slot: self._hub(slot, guarded))
        finally:
            self._busy = False
            for q in self._runnable:
                q.clear()
            self._queued.clear()
            self._parked.clear()
        if errors:
            raise errors[0]

    def _hub(self, slot: int, guarded) -> None:
        """The scheduler of one thread: runs its devices' greenlets until all have ended."""
        self._hubs[slot] = greenlet.getcurrent()
        try:
            fibers = self._kept(slot)
            with self._cv:
                self._runnable[slot].extend((g, guarded) for g in fibers)
            mine = set(self.devices_of(slot))
            while True:
                with self._cv:
                    item = self._next(slot, mine)
                if item is None:
                    return
                g, payload = item
                g.switch(payload)
        finally:
            self._hubs[slot] = None

    def _next(self, slot: int, mine: set[int]):
        """(greenlet, payload) this thread runs next, or None when its devices have all
        ended; sleeps while its devices wait on others.  Under self._cv."""
        q = self._runnable[slot]
        while True:
            if q:
                g, payload = q.popleft()
                self._queued.discard(g)
                return g, payload
            if not self._running & mine:
                return None
            # (a device whose thread has not made its greenlet yet is not waiting)
            if all(self._of_device.get(d) in self._parked for d in self._running):
                # Every unfinished device waits at a meeting that cannot complete: wake them
                # all, as stalled; their rendezvous raises the missing-device error.
                self.stalled = True
                for d in self._running:
                    self._ready_locked(self._of_device[d])
                continue
            due = [(dl, g) for g, dl in self._parked.items()
                   if dl is not None and self._slot[g] == slot]
            if not due:
                self._cv.wait()
                continue
            left = min(dl for dl, _ in due) - time.monotonic()
            if left > 0:
                self._cv.wait(left)
                continue
            now = time.monotonic()
            for dl, g in due:  # past its timeout: it re-checks and raises
                if dl <= now:
                    self._ready_locked(g)

    def _kept(self, slot: int) -> list:
        me = threading.get_ident()
        if self._owner[slot] != me:
            for g in self._fibers[slot]:
                self._slot.pop(g, None)
            self._fibers[slot] = [greenlet.greenlet(self._serve) for _ in self.devices_of(slot)]
            for d, g in zip(self.devices_of(slot), self._fibers[slot]):
                self._slot[g], self._of_device[d] = slot, g
                g.switch(d)  # to its first wait for a job
            self._owner[slot] = me
        return self._fibers[slot]

    def _serve(self, d: int) -> None:
        slot = self.slot_of(d)
        job = self._hubs[slot].switch()
        while True:
            job(d)
            with self._cv:
                self._running.discard(d)
                self._cv.notify_all()  # another thread's hub may now see a stall
            hub = self._hubs[slot]
            if hub is None:  # ended by close() in the middle of a run that failed
                return
            job = hub.switch()

    def _ready(self, g) -> None:
        with self._cv:
            self._ready_locked(g)

    def _ready_locked(self, g) -> None:
        if g not in self._queued:
            self._queued.add(g)
            self._parked.pop(g, None)
            self._runnable[self._slot[g]].append((g, None))
            if self.threads > 1:
                self._cv.notify_all()

    def _park(self, deadline: float | None = None) -> None:
        """Back to this thread's scheduler until this device is made ready again."""
        me = greenlet.getcurrent()
        with self._cv:
            if me not in self._queued:  # not readied already, between wait and here
                self._parked[me] = deadline
                if self.threads > 1:
                    self._cv.notify_all()  # another hub may now see a stall
        self._hubs[self._slot[me]].switch()

    def close(self) -> None:
        """Ends the kept greenlets (each thread its own) and the kept threads; on one thread
        (no kept threads) a later run makes its greenlets afresh."""
        if self._pool is None:
            self._end_slot(0)
        elif not self._closed:
            self._closed = True
            self._pool.run(self._end_slot)
            self._pool.close()

    def _end_slot(self, slot: int) -> None:
        if self._owner[slot] == threading.get_ident():
            for g in self._fibers[slot]:
                g.throw(greenlet.GreenletExit)
        self._fibers[slot], self._owner[slot] = [], None

    def __enter__(self) -> "DeviceFibers":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
