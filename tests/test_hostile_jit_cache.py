"""The JIT cache is code every later process runs: a directory or file someone else could
write is refused (one warning, in-memory compiles), the directory is created 0700, and a
module whose text is not the one its name hashes is never imported."""
import os
import stat
import warnings

import pytest

from xlaplug.backends.cpu import jit_cache, jit_store

SRC = "def plus_one(x):\n    return x + 1\n"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XLAPLUG_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("XLAPLUG_JIT_CACHE", raising=False)
    monkeypatch.setattr(jit_cache, "_LOADED", {})
    monkeypatch.setattr(jit_store, "_REFUSED", set())
    monkeypatch.setattr(jit_store, "_HEALED", set())
    return tmp_path / "jit"


def _compile(src=SRC):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn = jit_cache.cached_function(src, {}, "plus_one")
    assert fn(41) == 42
    return [str(w.message) for w in caught]


def _module_files(d):
    return sorted(d.glob("xlaplug_jit_*.py"))


def test_directory_is_created_private_and_used(cache):
    assert _compile() == []
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    (module,) = _module_files(cache)
    assert stat.S_IMODE(module.stat().st_mode) & 0o077 == 0


def test_directory_others_can_write_is_refused_with_one_warning(cache):
    cache.mkdir(mode=0o700)
    cache.chmod(0o707)  # o+w
    first = _compile()
    second = _compile("def plus_one(x):\n    return 1 + x\n")
    assert len(first) == 1 and "writable by group or others" in first[0]
    assert "compiling in memory" in first[0]
    assert second == []  # one warning per process
    assert _module_files(cache) == []


def test_directory_owned_by_another_user_is_refused(cache, monkeypatch):
    cache.mkdir(mode=0o700)
    monkeypatch.setattr(jit_cache.os, "getuid", lambda: cache.stat().st_uid + 1)
    msgs = _compile()
    assert len(msgs) == 1 and "owned by another user" in msgs[0]
    assert _module_files(cache) == []


def test_tampered_module_is_not_imported(cache, tmp_path):
    assert _compile() == []
    (module,) = _module_files(cache)
    marker = tmp_path / "ran"
    module.write_text(module.read_text() +
                      f"\nopen({str(marker)!r}, 'w').write('tampered')\n")
    jit_cache._LOADED.clear()
    msgs = _compile()
    assert len(msgs) == 1 and "does not hold the text its name is the hash of" in msgs[0]
    assert not marker.exists()


def test_module_file_others_can_write_is_refused(cache):
    assert _compile() == []
    (module,) = _module_files(cache)
    module.chmod(0o666)
    jit_cache._LOADED.clear()
    msgs = _compile()
    assert len(msgs) == 1 and str(module) in msgs[0]


def test_numba_cache_files_others_can_write_are_refused(cache):
    assert _compile() == []
    pycache = cache / "__pycache__"
    pycache.mkdir(exist_ok=True)
    pycache.chmod(0o777)
    jit_cache._LOADED.clear()
    msgs = _compile()
    assert len(msgs) == 1 and "__pycache__" in msgs[0]
