"""Device threads kept across runs: `DeviceThreads(n)` starts n threads once; `run(job)` calls
job(d) on thread d for every d and returns when all have returned.

Starting and joining 4 threads costs about 1 ms on this project's 2-core machine, five times
XLA:CPU's whole 4 KiB all-reduce on 4 host devices; a caller that runs one module many times
(`xlaplug run --repeat`, the benchmarks) keeps one `DeviceThreads` for all the runs, as XLA
keeps its executable's threads.  A job must not raise (the device runner catches everything
and reports it through the rendezvous); one that does is re-raised by `run` all the same.
"""
from __future__ import annotations

import queue
import threading
from typing import Callable


class DeviceThreads:
    def __init__(self, n: int):
        self.n = n
        self._inbox: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in range(n)]
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()  # one run at a time
        self._threads = [threading.Thread(target=self._serve, args=(d,), daemon=True,
                                          name=f"xlaplug-device-{d}") for d in range(n)]
        for t in self._threads:
            t.start()
        self._closed = False

    def _serve(self, d: int) -> None:
        while True:
            job = self._inbox[d].get()
            if job is None:
                return
            try:
                job(d)
                self._done.put(None)
            except BaseException as e:  # noqa: BLE001 - handed to the caller of run
                self._done.put(e)

    def run(self, job: Callable[[int], None]) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("DeviceThreads used after close")
            for inbox in self._inbox:
                inbox.put(job)
            errors = [e for e in (self._done.get() for _ in range(self.n)) if e is not None]
        if errors:
            raise errors[0]

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for inbox in self._inbox:
                inbox.put(None)
        for t in self._threads:
            t.join()

    def __enter__(self) -> "DeviceThreads":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
