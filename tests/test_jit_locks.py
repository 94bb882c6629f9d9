"""Processes sharing one JIT cache directory (backends/cpu/jit_locks.py): those that miss
the same function at once compile it once between them, and saves of several signatures of
one function at once all land in its index, each with its own machine code.

Each case starts its processes together (they wait for a file after their imports) on a
fresh XLAPLUG_CACHE_DIR and reads numba's own cache statistics.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, os, sys, time
import numpy as np
from xlaplug.backends.cpu import jit_cache
fn = jit_cache.cached_function(
    "def twice(x):\n    out = np.empty_like(x)\n    out[0] = x[0] * 2 + 1\n    return out\n",
    {}, "twice")
go, ready, types = sys.argv[1], sys.argv[2], sys.argv[3:]
open(ready, "w").close()
while not os.path.exists(go):
    time.sleep(0.002)
values = [fn(np.full(1, 20, t)) for t in types]  # out: x's type
print(json.dumps({"hits": sum(fn.stats.cache_hits.values()),
                  "misses": sum(fn.stats.cache_misses.values()),
                  "values": [[float(v[0]), v.dtype.name] for v in values]}))
"""


def _together(tmp_path, cache, type_lists: list[list[str]]) -> list[dict]:
    """Runs a child per list of types, all released at once; their reports."""
    go = tmp_path / "go"
    go.unlink(missing_ok=True)
    env = {**os.environ, "XLAPLUG_CACHE_DIR": str(cache), "NUMBA_ENABLE_CUDASIM": "0"}
    procs, readies = [], []
    for i, types in enumerate(type_lists):
        ready = tmp_path / f"ready{i}"
        ready.unlink(missing_ok=True)
        readies.append(ready)
        procs.append(subprocess.Popen([sys.executable, "-c", _CHILD, str(go), str(ready),
                                       *types], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT))
    try:
        deadline = time.monotonic() + 240
        while not all(r.exists() for r in readies):
            assert time.monotonic() < deadline, "children did not start"
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            time.sleep(0.01)
        go.touch()
        outs = [p.communicate(timeout=240) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]


def test_processes_missing_one_function_at_once_compile_it_once(tmp_path):
    reports = _together(tmp_path, tmp_path / "cache", [["float32"]] * 3)
    assert sum(r["misses"] for r in reports) == 1, reports
    assert sum(r["hits"] for r in reports) == 2, reports
    assert all(r["values"] == [[41.0, "float32"]] for r in reports), reports


def test_signatures_saved_at_once_all_load_with_their_own_code(tmp_path):
    types = ["int32", "int64", "float32", "float64"]
    cache = tmp_path / "cache"
    reports = _together(tmp_path, cache, [[t] for t in types])
    assert sum(r["misses"] for r in reports) == 4, reports
    # A later process finds every signature in the index, each with its own machine code.
    again = _together(tmp_path, cache, [types])[0]
    assert again["misses"] == 0 and again["hits"] == 4, again
    assert again["values"] == [[41.0, t] for t in types]


def test_a_compile_that_fails_lets_the_lock_go(tmp_path, monkeypatch):
    from numba.core.errors import TypingError

    from xlaplug.backends.cpu import jit_cache, jit_locks
    monkeypatch.setenv("XLAPLUG_CACHE_DIR", str(tmp_path))
    fn = jit_cache.cached_function("def halve(x):\n    return x / 2  # test_jit_locks\n",
                                   {}, "halve")
    with pytest.raises(TypingError):
        fn("not a number")
    assert not jit_locks._HELD
    assert fn(np.float64(3.0)) == 1.5
    assert not jit_locks._HELD


def test_a_lock_held_elsewhere_is_waited_for_then_taken(tmp_path):
    from xlaplug.backends.cpu import jit_locks
    path = str(tmp_path / "f.compile.lock")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time\n"
         "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(1.0)\n", path],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert not jit_locks.acquire(path, wait=0.1)  # held elsewhere: not within 0.1 s
        start = time.monotonic()
        assert jit_locks.acquire(path, wait=30)  # taken once the holder exits
        assert time.monotonic() - start < 29
        assert not jit_locks.acquire(path, wait=0.1)  # this process holds it already
    finally:
        jit_locks.release(path)
        holder.kill()
        holder.wait()
    assert not jit_locks._HELD
