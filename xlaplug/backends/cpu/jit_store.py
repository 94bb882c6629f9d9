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

import hashlib
import io
import os
import pickle
import stat
import warnings
from pathlib import Path

from numba import njit
from numba.core import caching

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


class _SealedFiles(caching.IndexDataCacheFile):
    """numba's index and data files, each sealed with its checksum (numba writes them
    through a temporary file and a rename already)."""

    def _load_index(self):
        try:
            with open(self._index_path, "rb") as f:
                blob = f.read()
        except FileNotFoundError:
            return {}
        check(Path(self._index_path))
        stream = io.BytesIO(unseal(self._index_path, blob))
        if pickle.load(stream) != self._version:
            return {}
        stamp, overloads = pickle.loads(stream.read())
        return overloads if stamp == self._source_stamp else {}

    def _save_index(self, overloads):
        payload = pickle.dumps(self._version, protocol=-1) + \
            self._dump((self._source_stamp, overloads))
        with self._open_for_write(self._index_path) as f:
            f.write(seal(payload))

    def _load_data(self, name):
        path = self._data_path(name)
        with open(path, "rb") as f:
            blob = f.read()
        check(Path(path))
        return pickle.loads(unseal(path, blob))

    def _save_data(self, name, data):
        with self._open_for_write(self._data_path(name)) as f:
            f.write(seal(self._dump(data)))


class _Locator(caching.InTreeCacheLocator):
    """A generated module's numba files go next to it (`__pycache__`), the package's own
    functions' under `pkg/`; no cache when the directory is off, unwritable or untrusted."""

    def __init__(self, py_func, py_file):
        super().__init__(py_func, py_file)
        d = cache_dir()
        if Path(py_file).resolve().parent != d.resolve():
            self._cache_path = str(d / "pkg" / self.get_suitable_cache_subpath(py_file))

    def ensure_cache_path(self):
        path = Path(self.get_cache_path())
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        check(path)
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError(f"'{path}' is not writable")

    @classmethod
    def from_function(cls, py_func, py_file):
        d = cache_dir()
        if d is None or not os.path.exists(py_file) or not usable_dir(d):
            return None
        try:
            return super().from_function(py_func, py_file)
        except UnsafeCache as e:
            refuse(d, str(e))
            return None


class _Impl(caching.CompileResultCacheImpl):
    _locator_classes = [_Locator]


class HealingCache(caching.FunctionCache):
    """numba's per-function cache on sealed files: an entry that does not verify or load is
    removed (one warning) and numba compiles the function and writes it again."""
    _impl_class = _Impl

    def __init__(self, py_func):
        super().__init__(py_func)
        self._cache_file = _SealedFiles(self._cache_path, self._impl.filename_base,
                                        self._impl.locator.get_source_stamp())

    def load_overload(self, sig, target_context):
        # numba's FunctionCache.load_overload refreshes the target context first: it imports
        # and installs every lowering registry (numba.np.arraymath, linalg -- which imports
        # scipy.linalg --, npyimpl, ...), 0.25 s of a warm `xlaplug run`.  Linking machine
        # code needs only the symbols the code calls: the runtime's (NRT, which that refresh
        # starts) and the hash secret numba.cpython.hashing publishes -- numba's C helpers
        # and math functions are published when the context is made, a parfor's threads
        # start through the entry's reload_init.  A miss compiles, and numba's compiler
        # refreshes both contexts itself (CompilerBase), so compiling is unchanged.
        try:
            link_ready(target_context)
            with self._guard_against_spurious_io_errors():
                return self._load_overload(sig, target_context)
        except UnsafeCache as e:
            self.disable()
            refuse(Path(self._cache_path), str(e))
        except Exception as e:  # noqa: BLE001 -- any failure to load is a damaged entry
            self._remove(e)
        return None

    def save_overload(self, sig, data):
        for attempt in range(2):
            try:
                return super().save_overload(sig, data)
            except (DamagedEntry, pickle.UnpicklingError, EOFError, ValueError) as e:
                self._remove(e)  # the index it updates is damaged: remove, write afresh
            except (OSError, UnsafeCache):
                return None  # cannot be written: the compiled code stays in memory

    def _remove(self, why: Exception) -> None:
        cf = self._cache_file
        for p in Path(self._cache_path).glob(f"{self._impl.filename_base}.*"):
            if p.name == cf._index_name or p.suffix == ".nbc":
                try:
                    p.unlink()
                except OSError:
                    pass
        healed(Path(cf._index_path), str(why).splitlines()[0][:200] or type(why).__name__)


def link_ready(target_context) -> None:
    """What cached machine code links against, without numba's full context refresh:
    the runtime's symbols (NRT) and the hash secret."""
    from numba.core.runtime import rtsys
    import numba.cpython.hashing  # noqa: F401 -- publishes _numba_hashsecret_* on import
    rtsys.initialize(target_context)


def cached_njit(fn=None, **options):
    """`numba.njit(**options)` with machine code kept in xlaplug's cache (HealingCache), or
    compiled in memory when there is no usable cache (`XLAPLUG_JIT_CACHE=0`, nothing
    writable): never numba's "cannot cache function ...: no locator available"."""
    def wrap(f):
        disp = njit(**options)(f)
        try:
            cache = HealingCache(f)
        except RuntimeError:  # no locator: no usable cache directory
            return disp
        disp._cache = cache  # what numba's enable_caching() sets for cache=True
        return disp
    return wrap(fn) if fn is not None else wrap
