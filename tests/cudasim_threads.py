"""numba's CUDA simulator with a block manager that waits instead of spinning (tests only).

The simulator runs a block's CUDA threads as Python threads, and its BlockManager.run polls
them in a busy loop -- every live thread's `is_alive()` and flags, again and again, until
all are blocked in syncthreads() or done -- holding the GIL the threads need for the kernel
itself: in tests/test_linalg.py + test_gather_scatter.py (cold JIT cache, one process)
that polling was 35 of the run's 68 s (27 million is_alive calls).  `install()` replaces
the manager with one that sleeps on a condition: a thread counts itself in when it blocks
in syncthreads() or ends, and the last one wakes the manager, which releases the blocked
ones -- the same rounds as numba's (all live threads blocked, or done), the same abort of
the others and re-raise of a thread's exception, and the kernels run unchanged.
"""
from __future__ import annotations

import threading

import numpy as np


def install() -> None:
    """Use the waiting manager for every kernel the simulator launches from now on."""
    from numba.cuda.simulator import kernel as K

    class Thread(K.BlockThread):
        def run(self):
            try:
                super().run()  # (records the kernel's exception in self.exception)
            finally:
                m = self._manager
                with m.cv:
                    m.arrived += 1
                    m.failed = m.failed or self.exception is not None
                    if m.arrived == m.threads or m.failed:
                        m.cv.notify()

        def syncthreads(self):
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads call")
            m = self._manager
            with m.cv:
                self.syncthreads_blocked = True
                m.arrived += 1
                if m.arrived == m.threads:
                    m.cv.notify()
            self.syncthreads_event.wait()
            self.syncthreads_event.clear()
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads clear")

    class Manager(K.BlockManager):
        def run(self, grid_point, *args):
            self.cv = threading.Condition()
            self.arrived, self.failed = 0, False
            threads = []
            for block_point in np.ndindex(*self._block_dim):
                def target():
                    self._f(*args)
                threads.append(Thread(target, self, grid_point, block_point, self._debug))
            self.threads = len(threads)
            for t in threads:
                t.start()
            with self.cv:
                while True:
                    while self.arrived < self.threads and not self.failed:
                        self.cv.wait()
                    blocked = [t for t in threads if t.syncthreads_blocked]
                    if self.failed or not blocked:
                        break
                    self.arrived -= len(blocked)  # every live thread is blocked: release them
                    for t in blocked:
                        t.syncthreads_blocked = False
                        t.syncthreads_event.set()
            for t in threads:
                if t.exception:
                    for other in threads:  # as numba's: abort the others, do not join them
                        other.abort = True
                        other.syncthreads_blocked = False
                        other.syncthreads_event.set()
                    raise t.exception[0].with_traceback(t.exception[1])

    K.BlockManager = Manager
