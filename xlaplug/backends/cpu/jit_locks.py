"""Locks between processes on xlaplug's numba cache files (flock), for jit_numba_cache.py.

numba writes each cache file whole (a temporary file, then a rename), but adding an entry is a
read-modify-write of the function's index: two processes saving two signatures of one function
at once can lose one entry, or -- both picking the same data file name -- leave an index entry
naming the other signature's machine code.  So an index is read (with its data file) under a
shared lock and updated under an exclusive one (`index_lock`).

Processes that start together (`pytest -n`, `mpiexec -n 4 xlaplug run`) also meet the same
cold cache and compile the same functions at once, each paying numba's 0.1-2 s.  A process
that misses takes the function's compile lock (`CompileLocks`) before compiling; another that
misses meanwhile waits for it, then loads what the first one saved.  The wait is bounded
(COMPILE_WAIT): past it, or where locks are not available, a process compiles as before.
"""
from __future__ import annotations

import contextlib
import os
import time

try:
    import fcntl
except ImportError:  # not POSIX: no locks; each process compiles for itself, as before
    fcntl = None

# Longer than any one compile takes on a loaded machine: a waiter that gives up compiles too.
COMPILE_WAIT = 120.0
_POLL = 0.02

# The compile locks this process holds, by path.  flock belongs to the open file: a second
# open in this process (a function compiled with other types while its first compile still
# holds the lock) would wait on itself, so the holder is recorded per process.
_HELD: dict[str, int] = {}


def _open(path: str) -> int | None:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return None


@contextlib.contextmanager
def index_lock(path: str, exclusive: bool):
    """Holds `path` shared (reading an index and its data) or exclusive (updating them);
    without flock, or when the lock file cannot be made, holds nothing."""
    fd = _open(path) if fcntl is not None else None
    if fd is None:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        except OSError:
            pass  # a file system without flock: unlocked, as numba itself is
        yield
    finally:
        os.close(fd)  # (closing releases the lock)


def acquire(path: str, wait: float = COMPILE_WAIT) -> bool:
    """Takes the compile lock `path`, waiting up to `wait` seconds for another process that
    holds it; True when this call took it (release it with `release`), False when this
    process holds it already, it could not be had in time, or there are no locks."""
    if fcntl is None or path in _HELD:
        return False
    fd = _open(path)
    if fd is None:
        return False
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            _HELD[path] = fd
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                break
            time.sleep(_POLL)
        except OSError:
            break
    os.close(fd)
    return False


def release(path: str) -> None:
    fd = _HELD.pop(path, None)
    if fd is not None:
        os.close(fd)
