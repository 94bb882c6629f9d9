"""numba's on-disk cache on xlaplug's sealed files (jit_store.py says where they go and whose
are trusted): the classes that subclass numba's, apart from jit_store so that importing
jit_store -- as a plugin file does for `cached_njit` -- does not import numba."""
from __future__ import annotations

import io
import os
import pickle
from pathlib import Path

from numba import njit
from numba.core import caching

from . import jit_locks
from .jit_options import entry_options
from .jit_store import (DamagedEntry, UnsafeCache, cache_dir, check, healed, refuse, seal,
                        unseal, usable_dir)


class _SealedFiles(caching.IndexDataCacheFile):
    """numba's index and data files, each sealed with its checksum (numba writes them
    through a temporary file and a rename already); an index is read with its data under a
    shared lock and updated under an exclusive one (jit_locks.py: other processes share the
    directory)."""

    def load(self, key):
        with jit_locks.index_lock(self._lock_path(), exclusive=False):
            return super().load(key)

    def save(self, key, data):
        with jit_locks.index_lock(self._lock_path(), exclusive=True):
            return super().save(key, data)

    def _lock_path(self) -> str:
        return self._index_path[:-len(".nbi")] + ".lock"

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

    # Seconds a miss waits for another process compiling the same function (jit_locks.py);
    # 0: no compile lock.  Set by numba_cached_njit, whose dispatcher releases the lock after
    # a compile that fails (a compile that succeeds releases it when saved).
    compile_wait = 0.0

    def __init__(self, py_func):
        super().__init__(py_func)
        self._cache_file = _SealedFiles(self._cache_path, self._impl.filename_base,
                                        self._impl.locator.get_source_stamp())
        self._compile_lock = os.path.join(self._cache_path,
                                          self._impl.filename_base + ".compile.lock")

    def load_overload(self, sig, target_context):
        found = self._load(sig, target_context)
        if found is None and self.compile_wait and self._enabled and self._lockable():
            # A miss: compile under the function's lock, or load what the process that held
            # it saved meanwhile.
            if jit_locks.acquire(self._compile_lock, self.compile_wait):
                found = self._load(sig, target_context)
                if found is not None:
                    self.release_compile()
        return found

    def release_compile(self) -> None:
        jit_locks.release(self._compile_lock)

    def _lockable(self) -> bool:
        try:
            self._impl.locator.ensure_cache_path()
            return True
        except (OSError, UnsafeCache):
            return False

    def _load(self, sig, target_context):
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
        try:
            for attempt in range(2):
                try:
                    return super().save_overload(sig, data)
                except (DamagedEntry, pickle.UnpicklingError, EOFError, ValueError) as e:
                    self._remove(e)  # the index it updates is damaged: remove, write afresh
                except (OSError, UnsafeCache):
                    return None  # cannot be written: the compiled code stays in memory
        finally:
            self.release_compile()

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


def numba_cached_njit(f, options: dict):
    """`numba.njit(**options)(f)` with HealingCache, or in memory without a usable cache."""
    disp = njit(**entry_options(options))(f)
    try:
        cache = HealingCache(f)
    except RuntimeError:  # no locator: no usable cache directory
        return disp
    disp._cache = cache  # what numba's enable_caching() sets for cache=True
    cache.compile_wait = jit_locks.COMPILE_WAIT
    compile_ = disp.compile

    def compile(sig):
        try:
            return compile_(sig)
        finally:  # a compile that raised (a typing error) never saved: let the others on
            cache.release_compile()
    disp.compile = compile  # numba compiles through it, from Python and from njit callers
    return disp
