"""Compiled FFI handlers kept on disk (xla/ffi/handler_cache.py): a second process loads the
handler's machine code instead of compiling it, its fallback to the Python handler still
reaches that process's handler, and an edited kernel is compiled afresh, never stale."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")

pytestmark = [pytest.mark.jax, pytest.mark.slow]  # three processes, each compiling or loading
ROOT = Path(__file__).resolve().parents[1]

KERNEL = '''
from numba import njit
from xlaplug.plugin import Plugin
plugin = Plugin("cache_test", version="1")

@plugin.kernel("cache_test.axpy", device="cpu")
@njit(["void(float32[::1], float32[::1], float32)"])
def axpy(x, out, alpha):
    if alpha < 0:
        raise ValueError("alpha must not be negative")
    for i in range(x.size):
        out[i] = x[i] * alpha + SHIFT
'''

SCRIPT = '''
import json, sys
import numpy as np, jax
from xlaplug.runtime.executable import load_session
from xlaplug.xla.ffi import register_op
from xlaplug.xla.ffi.register import _TARGETS
reg = load_session([sys.argv[1]]).registry
served = register_op("cache_test.axpy", reg.kernels[("cache_test.axpy", "cpu")])
call = jax.ffi.ffi_call("cache_test.axpy", jax.ShapeDtypeStruct((4,), np.float32))
x = np.arange(4, dtype=np.float32)
y = np.asarray(jax.jit(lambda v: call(v, alpha=np.float32(2)))(x)).tolist()
try:
    jax.jit(lambda v: call(v, alpha=np.float32(-1)))(x).block_until_ready()
    error = None
except Exception as e:
    error = str(e)
print(json.dumps({"how": served.how, "hits": _TARGETS["cache_test.axpy"].handler.cfunc.cache_hits,
                  "y": y, "error": error}))
'''


def run(plugins: Path, cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "XLAPLUG_PLUGIN_PATH"}
    env.update(PYTHONPATH=str(ROOT), XLAPLUG_CACHE_DIR=str(cache))
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(plugins)], capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_second_process_loads_the_handler_and_an_edited_kernel_is_compiled_again(tmp_path):
    plugins, cache = tmp_path / "plugins", tmp_path / "cache"
    plugins.mkdir()
    (plugins / "cache_test.py").write_text(KERNEL.replace("SHIFT", "1"))
    first, second = run(plugins, cache), run(plugins, cache)
    for got in (first, second):
        assert got["how"] == "compiled handler" and got["y"] == [1.0, 3.0, 5.0, 7.0]
        # the raising kernel goes to this process's Python handler, which names it
        assert "plugin 'cache_test' kernel for 'cache_test.axpy' raised ValueError: alpha " \
            "must not be negative" in got["error"]
    assert (first["hits"], second["hits"]) == (0, 1)
    assert len(list((cache / "jit").glob("xlaplug_ffi_*.py"))) == 1
    (plugins / "cache_test.py").write_text(KERNEL.replace("SHIFT", "10"))
    third = run(plugins, cache)
    assert third["hits"] == 0 and third["y"] == [10.0, 12.0, 14.0, 16.0]
    assert len(list((cache / "jit").glob("xlaplug_ffi_*.py"))) == 2


def test_kernels_in_no_file_are_never_mistaken_for_one_another():
    """Two kernels of one op and plugin name whose source is in no file (here: made by exec)
    have the same handler text; each is still served by its own code."""
    import jax
    import numpy as np
    from numba import njit

    from xlaplug.plugin import Plugin
    from xlaplug.xla.ffi import COMPILED, register_op
    from xlaplug.xla.ffi.handler_cache import kernel_digest

    outs = []
    for k, shift in enumerate((1, 2)):
        ns: dict = {}
        exec(f"def add(x, out):\n    for i in range(x.size):\n        out[i] = x[i] + {shift}\n",
             ns)
        kernel = njit(["void(float32[::1], float32[::1])"])(ns["add"])
        assert kernel_digest(kernel) is None
        p = Plugin("cache_test_memory")
        p.kernel("cache_test.add", device="cpu")(kernel)
        target = f"cache_test.add.{k}"
        assert register_op("cache_test.add", p.kernels[("cache_test.add", "cpu")],
                           target=target).how == COMPILED
        call = jax.ffi.ffi_call(target, jax.ShapeDtypeStruct((3,), np.float32))
        outs.append(np.asarray(jax.jit(call)(np.zeros(3, np.float32))).tolist())
    assert outs == [[1.0] * 3, [2.0] * 3]
