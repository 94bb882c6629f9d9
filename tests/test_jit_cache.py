"""The on-disk cache of generated numba code (backends/cpu/jit_cache.py).

Fused loops and compiled while loops are written as modules under the cache directory and
compiled with numba's `cache=True`: a second process loads the machine code instead of
compiling.  Each case runs in fresh processes (XLAPLUG_CACHE_DIR in a temporary directory)
and reads numba's own cache statistics.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_SCRIPT = r"""
import json, numpy as np
from xlaplug.hlo import parse_module
from xlaplug.runtime.driver import compile_module
from xlaplug.runtime.runner import execute
from xlaplug.backends.cpu import jit_cache
text = '''HloModule m
body {
  s = (s32[], f32[300]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  v = f32[300] get-tuple-element(s), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  h = f32[] constant(0.5)
  hb = f32[300] broadcast(h), dimensions={}
  w = f32[300] multiply(v, hb)
  ROOT t = (s32[], f32[300]) tuple(j, w)
}
cond {
  s = (s32[], f32[300]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(100)
  ROOT lt = pred[] compare(i, n), direction=LT
}
argmax {
  av = f32[] parameter(0)
  ai = s32[] parameter(1)
  bv = f32[] parameter(2)
  bi = s32[] parameter(3)
  gt = pred[] compare(av, bv), direction=GT
  eq = pred[] compare(av, bv), direction=EQ
  lt = pred[] compare(ai, bi), direction=LT
  tie = pred[] and(eq, lt)
  pa = pred[] or(gt, tie)
  v = f32[] select(pa, av, bv)
  k = s32[] select(pa, ai, bi)
  ROOT t = (f32[], s32[]) tuple(v, k)
}
ENTRY e {
  x = f32[300,300] parameter(0)
  y = f32[300,300] parameter(1)
  m = f32[300,300] multiply(x, y)
  a = f32[300,300] add(m, y)
  sl = f32[1,300] slice(a), slice={[0:1], [0:300]}
  r = f32[300] reshape(sl)
  z = s32[] constant(0)
  init = (s32[], f32[300]) tuple(z, r)
  l = (s32[], f32[300]) while(init), condition=cond, body=body
  o = f32[300] get-tuple-element(l), index=1
  io = s32[300,300] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  z0 = s32[] constant(0)
  am = (f32[300], s32[300]) reduce(y, io, ninf, z0), dimensions={1}, to_apply=argmax
  ami = s32[300] get-tuple-element(am), index=1
  ROOT out = (f32[300], s32[300]) tuple(o, ami)
}
'''
m = parse_module(text)
compile_module(m, None)
x = np.full((300, 300), 2.0, np.float32)
from xlaplug.backends.cpu import compiled_while
loop = [i for c in m.computations for i in c.instructions if i.opcode == "while"][0]
ready = compiled_while.generate(loop).ready()  # before the run: in the disk cache?
y = x.copy()
y[:, 7] = 3.0  # every row's argmax: column 7
out, idx = execute(m, [x, y]).outputs
hits = sum(sum(f.stats.cache_hits.values()) for f in jit_cache._LOADED.values())
misses = sum(sum(f.stats.cache_misses.values()) for f in jit_cache._LOADED.values())
print(json.dumps({"hits": hits, "misses": misses, "functions": len(jit_cache._LOADED),
                  "value": float(out[0]), "ready": ready, "argmax": sorted(set(idx.tolist()))}))
"""


def _run(env_extra: dict) -> dict:
    env = {**os.environ, **env_extra, "NUMBA_ENABLE_CUDASIM": "0"}
    r = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_second_process_loads_compiled_code(tmp_path):
    env = {"XLAPLUG_CACHE_DIR": str(tmp_path)}
    first = _run(env)
    # the fused loop, the while loop, and the argmax reducer in its reduce driver
    # (driver_cache.py: both in one module, the driver's machine code kept like the loops')
    assert first["functions"] == 3
    assert first["hits"] == 0 and first["misses"] >= 3 and not first["ready"]
    assert first["value"] == 6.0 * 0.5 ** 100 and first["argmax"] == [7]
    files = sorted(p.name for p in (tmp_path / "jit").glob("xlaplug_jit_*.py"))
    assert len(files) == 3
    second = _run(env)
    assert second["hits"] >= 3 and second["misses"] == 0, second
    assert second["argmax"] == [7]
    assert second["ready"]  # compiled_while starts such a loop compiled from iteration 0
    assert second["value"] == first["value"]
    assert sorted(p.name for p in (tmp_path / "jit").glob("xlaplug_jit_*.py")) == files


def test_cache_off_or_unwritable_compiles_in_memory(tmp_path):
    off = _run({"XLAPLUG_CACHE_DIR": str(tmp_path), "XLAPLUG_JIT_CACHE": "0"})
    assert off["functions"] == 3 and off["hits"] == 0 and off["argmax"] == [7]
    assert not (tmp_path / "jit").exists()
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    bad = _run({"XLAPLUG_CACHE_DIR": str(blocker)})
    assert bad["functions"] == 3 and bad["value"] == off["value"]
    assert bad["argmax"] == [7]


def test_njit_options_are_part_of_the_key(tmp_path, monkeypatch):
    # numba's on-disk cache does not tell one error model from another: the same text with
    # other options must be another module (else a division by zero raises or returns inf
    # depending on which was compiled first).
    monkeypatch.setenv("XLAPLUG_CACHE_DIR", str(tmp_path))
    from xlaplug.backends.cpu import jit_cache
    src = "def f(a, b):\n    return a / b\n"
    numpy_model = jit_cache.cached_function(src, {}, "f", error_model="numpy")
    python_model = jit_cache.cached_function(src, {}, "f", error_model="python")
    assert numpy_model is not python_model
    assert numpy_model(1.0, 0.0) == float("inf")
    try:
        python_model(1.0, 0.0)
    except ZeroDivisionError:
        pass
    else:
        raise AssertionError("the python error model should raise")
    assert len(list((tmp_path / "jit").glob("xlaplug_jit_*.py"))) == 2
