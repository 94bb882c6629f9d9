"""Ctrl-C ends a run within a second, whatever it is doing.

Python runs signal handlers on the main thread only, between bytecodes, so a run on the main
thread that sits in one long call -- a compiled while loop, a fused loop, a device waiting
at a rendezvous -- hears Ctrl-C only when that call returns (minutes, or never).  So the run
goes to a worker thread, and the main thread only waits: every compiled kernel releases the
GIL (nogil), so the main thread gets it back within milliseconds, takes the
KeyboardInterrupt, says so in one line and ends the process with 130 at once.  `os._exit`,
not `sys.exit`: device threads and numba's thread pools must not hold the exit back, and
there is nothing to flush -- outputs are written whole or not at all (driver.write_atomic).
Under mpiexec the launcher forwards the signal to every rank, and each ends the same way.
"""
from __future__ import annotations

import os
import sys
import threading
from typing import Callable, TypeVar

T = TypeVar("T")

EXIT_INTERRUPTED = 130


def interruptible(fn: Callable[[], T], poll_s: float = 0.1) -> T:
    """`fn()` run on a worker thread; its value, or its exception re-raised here."""
    outcome: dict = {}

    def work():
        try:
            outcome["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the main thread as is
            outcome["error"] = e

    worker = threading.Thread(target=work, name="xlaplug-run", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(poll_s)
    except KeyboardInterrupt:
        interrupted()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def interrupted() -> None:
    """One line on stderr, then exit 130 now."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    os.write(2, b"interrupted\n")
    os._exit(EXIT_INTERRUPTED)
