"""Where xlaplug's numba machine code is kept on disk, whose files it trusts, and how a damaged
entry heals.

Every function xlaplug compiles with numba's on-disk cache -- its own loops (`cached_njit`)
and the generated modules of jit_cache.py -- keeps its index (.nbi) and data (.nbc) files
under one directory, `cache_dir()`: `$XLAPLUG_CACHE_DIR/jit`, else
`$XDG_CACHE_HOME/xlaplug/jit` or `~/.cache/xlaplug/jit` (generated modules in it, their
numba files in `__pycache__`, the package's own in `pkg/`).  Not numba's default places (the
package's `__pycache__`, `NUMBA_CACHE_DIR`): a read-only install with no writable HOME then
has no cache, and compiles in memory, instead of failing numba's "no locator available".

Trust: the files are pickles numba loads, so the directory is created 0700 and one owned
by another user or writable by group or others is refused (one warning, in-memory compiles).
Damage: each file is written whole (a temporary file, then a rename) and starts with the
SHA-256 of the rest; one that does not verify, or does not load, is deleted and its function
compiled and written again, with one warning -- never a traceback, and the next run is warm.
`XLAPLUG_JIT_CACHE=0` turns the disk off: everything compiles in memory.
"""
from __future__ import annotations

import functools
import hashlib
import os
import stat
import threading
import warnings
from pathlib import Path

_REFUSED: set[str] = set()  # directories already warned about (one warning each)
_HEALED: set[str] = set()   # entries already rebuilt in this process (one warning each)
_SEAL = b"xlaplug-sha256\n"


class UnsafeCache(Exception):
    """The cache directory or one of its files could be written by someone else."""


class DamagedEntry(Exception):
    """A cache file that does not hold what was written (truncated, edited, foreign)."""


def cache_dir() -> Path | None:
    """Where the cache goes, or None when the on-disk cache is off."""
    if os.environ.get("XLAPLUG_JIT_CACHE", "1") == "0":
        return None
    base = os.environ.get("XLAPLUG_CACHE_DIR")
    if not base:
        try:
            base = os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                os.path.join(Path.home(), ".cache"), "xlaplug")
        except RuntimeError:  # no home directory: compile in memory
            return None
    return Path(base) / "jit"


def unsafe(path: Path) -> str | None:
    """Why `path` must not be trusted, or None: owned by another user, or writable by group
    or others."""
    st = path.stat()
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"'{path}' is owned by another user"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"'{path}' is writable by group or others (chmod go-w '{path}')"
    return None


def check(path: Path) -> None:
    why = unsafe(path)
    if why is not None:
        raise UnsafeCache(why)


def refuse(d: Path, why: str) -> None:
    if str(d) not in _REFUSED:
        _REFUSED.add(str(d))
        warnings.warn(f"JIT cache not used: {why}; compiling in memory")


def healed(path: Path, why: str) -> None:
    """One warning per damaged entry: it was removed and is being rebuilt."""
    if str(path) not in _HEALED:
        _HEALED.add(str(path))
        warnings.warn(f"JIT cache: removed a damaged entry '{path}' ({why}); rebuilding it")


def usable_dir(d: Path) -> bool:
    """Whether `d` exists (made 0700 if not), is writable and can be trusted; a refusal
    warns once."""
    if str(d) in _REFUSED:
        return False
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        check(d)
        return os.access(d, os.W_OK | os.X_OK)
    except UnsafeCache as e:
        refuse(d, str(e))
    except OSError:
        pass  # not writable (HOME read-only, ...): in memory, silently
    return False


def seal(payload: bytes) -> bytes:
    return _SEAL + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


def unseal(path: str, blob: bytes) -> bytes:
    head = len(_SEAL) + 65
    if not blob.startswith(_SEAL) or len(blob) < head:
        raise DamagedEntry(f"'{path}' is not an xlaplug cache file")
    payload = blob[head:]
    if hashlib.sha256(payload).hexdigest().encode() != blob[len(_SEAL):head - 1]:
        raise DamagedEntry(f"'{path}' does not match its checksum")
    return payload


def cached_njit(fn=None, *, lazy: bool = False, **options):
    """`numba.njit(**options)` with machine code kept in xlaplug's cache (HealingCache), or
    compiled in memory when there is no usable cache (`XLAPLUG_JIT_CACHE=0`, nothing
    writable): never numba's "cannot cache function ...: no locator available".
    `lazy=True`: a DeferredKernel -- numba is imported, and the dispatcher made, on the
    first call or attribute read -- for a plugin kernel, so loading the plugin costs no
    numba import (0.15-0.25 s) in a process that never runs the kernel (`compile`,
    `list-plugins`).  Not for a function other njit code calls: numba types only its own
    dispatchers."""
    def wrap(f):
        if lazy:
            return DeferredKernel(f, options)
        from .jit_numba_cache import numba_cached_njit
        return numba_cached_njit(f, options)
    return wrap(fn) if fn is not None else wrap


class DeferredKernel:
    """`cached_njit(f, **options)`, made on first use: calling it calls the dispatcher, and
    any other public attribute (`signatures`, `py_func`, `compile`, ...) is the
    dispatcher's.  `inspect.signature` reads `f`'s without making it."""

    def __init__(self, f, options: dict):
        functools.update_wrapper(self, f)  # __name__, __doc__, __wrapped__ (signature)
        self.py_func = f
        self._options = dict(options)
        self._dispatcher = None
        self._lock = threading.Lock()

    def dispatcher(self):
        """The numba dispatcher (made once, under a lock: kernels run on device threads)."""
        if self._dispatcher is None:
            with self._lock:
                if self._dispatcher is None:
                    from .jit_numba_cache import numba_cached_njit
                    self._dispatcher = numba_cached_njit(self.py_func, self._options)
        return self._dispatcher

    def __call__(self, *args, **kwargs):
        return self.dispatcher()(*args, **kwargs)

    def __getattr__(self, name: str):
        if name.startswith("__"):  # probes (__signature__, __array__, ...): not numba's
            raise AttributeError(name)
        return getattr(self.dispatcher(), name)

    def __repr__(self) -> str:
        return f"<DeferredKernel {self.__qualname__} (numba njit, made on first use)>"


def resolved(fn):
    """`fn`, or the numba dispatcher a DeferredKernel stands for (for isinstance checks)."""
    return fn.dispatcher() if isinstance(fn, DeferredKernel) else fn
