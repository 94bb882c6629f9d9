"""Sessions are explicit: two sessions with different plugins and devices, in two threads at
once, each compile and run with their own plugins, device and passes.

Session "kernel" (cpu) loads a plugin whose CPU kernel computes `acme.scale`; session
"decomposed" (cuda, numba's simulator under tests/conftest.py) loads a plugin that only
decomposes it into core HLO and adds a pass.  Both load their plugin files, compile and run
at the same time (a barrier starts them together, and the CPU kernel waits, mid-run, until
the other thread has compiled), so any state shared between sessions would show up as one
session's plugin kernel, decomposition or pass in the other's module or results.
"""
import threading
from pathlib import Path

import numpy as np
import pytest

from xlaplug.runtime.driver import compile_module
from xlaplug.hlo import parse_module
from xlaplug.hlo.errors import HloError
from xlaplug.plugin import Session, load_plugins
from xlaplug.runtime.runner import execute

SCALE_HLO = """HloModule m
ENTRY e {
  x = f32[8] parameter(0)
  ROOT y = f32[8] custom-call(x), custom_call_target="acme.scale", backend_config={factor = 3.0 : f32}
}
"""

KERNEL_PLUGIN = '''
import threading

from xlaplug.plugin import Plugin

plugin = Plugin("acme_scale_kernel")
CALLS = []                  # the thread of every call of the kernel
OTHER_COMPILED = None       # a threading.Event, set by the test


@plugin.shape("acme.scale")
def shape(x, *, factor):
    return x


@plugin.kernel("acme.scale", device="cpu")
def scale_cpu(x, out, *, factor):
    CALLS.append(threading.current_thread().name)
    # Mid-run: the other session compiles now, with its own plugins.
    assert OTHER_COMPILED.wait(120), "the other session never compiled"
    out[...] = x * factor
'''

DECOMPOSITION_PLUGIN = '''
from xlaplug.plugin import Plugin

plugin = Plugin("acme_scale_decomposed")


@plugin.decomposition("acme.scale")
def scale(b, x, *, factor):
    return b.multiply(x, b.constant(factor, x.dtype))


@plugin.hlo_pass("acme-mark", after="dce")
def mark(module):
    module.name += "_marked"
    return True
'''


def _plugins_dir(path: Path, source: str) -> Path:
    path.mkdir(mode=0o755)
    (path / "scale.py").write_text(source)
    return path


def _plugin_names(session) -> set[str]:
    return {p.name for p in session.registry.plugins}


def _opcodes(module) -> set[str]:
    return {i.opcode for c in module.computations for i in c.instructions}


def test_two_sessions_in_two_threads(tmp_path, monkeypatch):
    monkeypatch.delenv("XLAPLUG_PLUGIN_PATH", raising=False)
    dirs = {"kernel": _plugins_dir(tmp_path / "k", KERNEL_PLUGIN),
            "decomposed": _plugins_dir(tmp_path / "d", DECOMPOSITION_PLUGIN)}
    devices = {"kernel": "cpu", "decomposed": "cuda"}
    x = np.arange(8, dtype=np.float32) - 3.5
    start = threading.Barrier(2, timeout=120)
    decomposed_compiled = threading.Event()
    done: dict[str, tuple] = {}
    failures: dict[str, BaseException] = {}

    def work(name: str):
        try:
            start.wait()  # both load their plugins at once
            session = Session(load_plugins([dirs[name]], entry_points=False),
                              device=devices[name])
            if name == "kernel":
                kernel = session.registry.kernel_for("acme.scale", "cpu")
                kernel.fn.__globals__["OTHER_COMPILED"] = decomposed_compiled
            module = parse_module(SCALE_HLO)
            compile_module(module, session)
            if name == "decomposed":
                decomposed_compiled.set()  # the kernel session is waiting mid-run
            done[name] = (session, module, execute(module, [x], session).outputs[0])
        except BaseException as e:  # reported by the main thread
            failures[name] = e
            decomposed_compiled.set()
            start.abort()

    threads = [threading.Thread(target=work, args=(n,), name=n) for n in devices]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads), "a session thread hung"
    assert not failures, failures

    want = x * np.float32(3.0)
    session, module, out = done["kernel"]
    # The kernel session kept the custom call and ran its plugin's CPU kernel, in its thread;
    # the other session's pass did not run on its module.
    assert "custom-call" in _opcodes(module) and module.name == "m"
    kernel = session.registry.kernel_for("acme.scale", "cpu")
    assert kernel.fn.__globals__["CALLS"] == ["kernel"]
    assert _plugin_names(session) >= {"acme_scale_kernel"}
    assert "acme_scale_decomposed" not in _plugin_names(session)
    np.testing.assert_array_equal(out, want)
    # The decomposed session lowered the op to core HLO, ran its own pass, and ran on cuda.
    session, module, out = done["decomposed"]
    assert session.device == "cuda" and session.registry.kernel_for("acme.scale", "cpu") is None
    assert "acme_scale_kernel" not in _plugin_names(session)
    assert "custom-call" not in _opcodes(module) and "multiply" in _opcodes(module)
    assert module.name == "m_marked"
    np.testing.assert_array_equal(out, want)

    # A third session, with no plugins at all, has neither: the custom call is an error.
    with pytest.raises(HloError, match="no plugin provides target 'acme.scale' on cpu"):
        compile_module(parse_module(SCALE_HLO), Session())
