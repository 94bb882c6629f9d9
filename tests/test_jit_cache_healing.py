"""A damaged JIT cache heals itself, and no cache at all is no failure (issue 27).

Each kind of damage -- a truncated, empty, garbage or foreign numba index or data file, a
generated module that is not UTF-8, truncated or edited -- is removed and rebuilt with one
warning, and the run after is warm again (numba's own hit counter).  With no writable cache
location (HOME unwritable, a read-only package) or `XLAPLUG_JIT_CACHE=0`, everything,
xlaplug's own numba loops included, compiles in memory."""
import os
import pickle
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from xlaplug.backends.cpu import jit_cache, jit_store

ROOT = Path(__file__).resolve().parents[1]
SRC = "def plus_one(x):\n    return x + 1\n"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XLAPLUG_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("XLAPLUG_JIT_CACHE", raising=False)
    monkeypatch.setattr(jit_cache, "_LOADED", {})
    monkeypatch.setattr(jit_store, "_REFUSED", set())
    monkeypatch.setattr(jit_store, "_HEALED", set())
    return tmp_path / "jit"


def _compile_and_call():
    """(warnings, numba cache hits) of a fresh load of SRC, as a new process would see it."""
    jit_cache._LOADED.clear()
    jit_store._HEALED.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn = jit_cache.cached_function(SRC, {}, "plus_one")
        assert fn(41) == 42
    return [str(w.message) for w in caught], sum(fn.stats.cache_hits.values())


def _files(cache):
    (module,) = cache.glob("xlaplug_jit_*.py")
    (index,) = (cache / "__pycache__").glob(f"{module.stem}.*.nbi")
    (data,) = (cache / "__pycache__").glob(f"{module.stem}.*.nbc")
    return {"module": module, "index": index, "data": data}


def _damage(path: Path, how: str) -> None:
    blob = path.read_bytes()
    path.write_bytes({"truncated": blob[:len(blob) // 2], "empty": b"",
                      "garbage": os.urandom(64) + b"\x80\x04garbage",
                      "foreign": pickle.dumps("0.0") + pickle.dumps(((0, 0), {})),
                      "not-utf8": blob + b"\n# \xff\xfe\n",
                      "edited": blob.replace(b"x + 1", b"x + 2")}[how])


CASES = [("index", h) for h in ("truncated", "empty", "garbage", "foreign")] + \
        [("data", h) for h in ("truncated", "empty", "garbage")] + \
        [("module", h) for h in ("not-utf8", "truncated", "edited")]


@pytest.mark.parametrize("which,how", CASES, ids=[f"{w}-{h}" for w, h in CASES])
def test_damaged_entry_is_rebuilt_with_one_warning_then_warm(cache, which, how):
    assert _compile_and_call() == ([], 0)  # cold: compiled and written
    assert _compile_and_call() == ([], 1)  # warm: loaded
    _damage(_files(cache)[which], how)
    msgs, _ = _compile_and_call()
    assert len(msgs) == 1, msgs
    assert "removed a damaged entry" in msgs[0] and "rebuilding it" in msgs[0]
    assert _compile_and_call() == ([], 1)  # warm again: the rebuilt entry loads
    files = _files(cache)
    assert files["module"].read_text() == jit_cache.module_text(SRC, {})
    for kind in ("index", "data"):  # sealed: the checksum header, then numba's pickle
        jit_store.unseal(str(files[kind]), files[kind].read_bytes())


def test_cache_files_are_written_whole(cache):
    _compile_and_call()
    leftovers = [p for p in cache.rglob("*") if ".tmp" in p.name]
    assert leftovers == []


def test_cache_off_gives_plain_in_memory_dispatchers(monkeypatch, tmp_path):
    monkeypatch.setenv("XLAPLUG_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("XLAPLUG_JIT_CACHE", "0")
    fn = jit_store.cached_njit(lambda x: x * 2)
    assert fn(21) == 42
    assert type(fn._cache).__name__ == "NullCache"
    assert not (tmp_path / "jit").exists()


# ---- whole runs, in fresh processes ---------------------------------------------------------

# A complex dot (dot_complex._four_sums), an integer divide (elementwise_loops) and a fused
# loop (a generated module): every kind of numba function xlaplug caches.
MODULE = """HloModule kinds
ENTRY e {
  a = c64[4,8] parameter(0)
  b = c64[8,3] parameter(1)
  d = c64[4,3] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  i = s32[64] parameter(2)
  j = s32[64] parameter(3)
  q = s32[64] divide(i, j)
  x = f32[64] parameter(4)
  e = f32[64] exponential(x)
  m = f32[64] multiply(e, x)
  s = f32[64] add(m, x)
  ROOT t = (c64[4,3], s32[64], f32[64]) tuple(d, q, s)
}
"""


def _env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("XLAPLUG_CACHE_DIR", "NUMBA_CACHE_DIR", "XDG_CACHE_HOME",
                        "XLAPLUG_JIT_CACHE")}
    env.update(NUMBA_ENABLE_CUDASIM="0", PYTHONDONTWRITEBYTECODE="1", **extra)
    return env


def _run(hlo, env, cwd=ROOT, python_path=None):
    code = ("import sys, xlaplug; print('xlaplug from', xlaplug.__file__); "
            "from xlaplug.cli import main; main(sys.argv[1:])")
    if python_path is not None:
        env = {**env, "PYTHONPATH": str(python_path)}
    return subprocess.run([sys.executable, "-c", code, "run", str(hlo), "--seed", "3"],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


@pytest.mark.slow
def test_damaged_run_heals_and_the_next_run_is_clean(tmp_path):
    hlo = tmp_path / "kinds.hlo"
    hlo.write_text(MODULE)
    env = _env(XLAPLUG_CACHE_DIR=str(tmp_path / "c"))
    first = _run(hlo, env)
    assert first.returncode == 0 and first.stderr == "", first.stderr
    jit = tmp_path / "c" / "jit"
    entries = sorted(jit.rglob("*.nbi")) + sorted(jit.rglob("*.nbc")) + \
        sorted(jit.glob("xlaplug_jit_*.py"))
    assert any("pkg" in p.parts for p in entries)  # the package's own loops, in our dir
    for k, p in enumerate(entries):  # every entry damaged, a different way each
        p.write_bytes([b"", b"\x80\x04garbage", p.read_bytes()[:7] + b"\xff"][k % 3])
    second = _run(hlo, env)
    assert second.returncode == 0, second.stderr
    assert "Traceback" not in second.stderr and "Aborted" not in second.stderr
    lines = second.stderr.splitlines()
    assert lines and all("removed a damaged entry" in ln for ln in lines), lines
    assert second.stdout == first.stdout.replace(first.stdout.splitlines()[-1],
                                                 second.stdout.splitlines()[-1])
    third = _run(hlo, env)
    assert third.returncode == 0 and third.stderr == "", third.stderr


def _unusable_package_copy(tmp_path) -> Path:
    """A copy of the package where nothing can be written: every `__pycache__` a file."""
    dest = tmp_path / "ro"
    shutil.copytree(ROOT / "xlaplug", dest / "xlaplug",
                    ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc"))
    for d in [dest, *[p for p in dest.rglob("*") if p.is_dir()]]:
        (d / "__pycache__").write_text("not a directory")
    return dest


@pytest.mark.slow
@pytest.mark.parametrize("jit_off", [False, True], ids=["no-writable-home", "cache-off"])
def test_no_writable_cache_location_compiles_in_memory(tmp_path, jit_off):
    hlo = tmp_path / "kinds.hlo"
    hlo.write_text(MODULE)
    blocker = tmp_path / "file"
    blocker.write_text("HOME below a file: nothing can be created there, even by root")
    pkg = _unusable_package_copy(tmp_path)
    env = _env(HOME=str(blocker / "home"), **({"XLAPLUG_JIT_CACHE": "0"} if jit_off else {}))
    p = _run(hlo, env, cwd=tmp_path, python_path=pkg)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.startswith(f"xlaplug from {pkg / 'xlaplug'}")
    assert p.stderr == ""  # no "cannot cache function", no warning, no traceback
    written = [q for q in pkg.rglob("*") if q.suffix in (".nbi", ".nbc", ".pyc")]
    assert written == []
