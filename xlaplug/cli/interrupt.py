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

Python raises the KeyboardInterrupt wherever the main thread happens to be, and a few places
swallow it: one raised inside a `__del__` or a weakref callback is printed as "Exception
ignored" and dropped -- and numba and llvmlite free LLVM objects in `__del__`, thousands per
compile.  A run compiling when Ctrl-C came could then go on for good.  So the CLI's handler
(`armed`) raises as Python's own does, letting `finally` blocks tidy up and `handle_errors`
report it, and also starts a backstop that ends the process half a second later if nothing
else has.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Callable, TypeVar

T = TypeVar("T")

EXIT_INTERRUPTED = 130
BACKSTOP_S = 0.5  # a swallowed Ctrl-C still ends the run within a second


@contextlib.contextmanager
def armed():
    """The CLI's SIGINT handler for the command's time, on the main thread, where Python's
    default handler is in place (a shell that started us with SIGINT ignored keeps it
    ignored); the one before it afterwards (a command invoked in-process, as tests do)."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return
    signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _on_sigint(signum, frame):
    backstop = threading.Timer(BACKSTOP_S, interrupted)
    backstop.daemon = True
    backstop.start()
    raise KeyboardInterrupt


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
