"""`--engine xla` on many devices with a plugin's override of a core opcode: every device's
instruction of the opcode runs the override kernel in that device's interpreter context
(xla/devices_rewrite.py), as the interpreter's device threads run it -- never XLA's own op
in its place -- in the worker process (more devices than jax has here) and in this
process (jax started with the devices, a subprocess).  And what the many-device engine
says: the run's summary names who ran the devices, its errors name the many-device path
(not MPI's)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

jax = pytest.importorskip("jax")

from xlaplug.cli import main  # noqa: E402

pytestmark = pytest.mark.jax
ROOT = Path(__file__).resolve().parents[1]

# negate is not XLA's (0.25 - x: shows which ran); all-reduce takes a communicator and
# doubles the sum: served across the devices, as the interpreter's
PLUGIN = '''
import numpy as np
from xlaplug.plugin import Plugin
plugin = Plugin("dovr", version="1")

@plugin.kernel("negate", device="cpu")
def negate(x, out, **attrs):
    np.subtract(x.dtype.type(0.25), x, out=out)

@plugin.kernel("all-reduce", device="cpu", communicator=True)
def all_reduce(x, out, *, comm, **attrs):
    out[...] = comm.allreduce(x) * 2
'''

MODULE = '''HloModule m, replica_count=2
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[3,4] parameter(0)
  n = f32[3,4] negate(x)
  r = f32[3,4] all-reduce(n), replica_groups={}, to_apply=add
  ROOT t = f32[3,4] negate(r)
}
'''


def setup(tmp_path, module=MODULE):
    d = tmp_path / "plugins"
    d.mkdir(exist_ok=True)
    (d / "dovr.py").write_text(PLUGIN)
    (tmp_path / "m.hlo").write_text(module)
    return d


def cli(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    return r.exit_code, r.output


def want(x):
    """The module's value per device, as the overrides compute it (x: [device, 3, 4])."""
    n = np.float32(0.25) - x
    return np.float32(0.25) - 2 * n.sum(axis=0)


X = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 8  # device d's x: X[d]


@pytest.fixture
def one_host_device(monkeypatch):
    """jax here as a process that started it with one host device: the module's two devices
    go to the worker (a test before this one in the process may have started jax with 8)."""
    from xlaplug.runtime import engine_devices
    monkeypatch.setattr(engine_devices, "host_devices", lambda: 1)


@pytest.mark.slow  # a worker process of XLA on 2 host devices, ~2 s
def test_overrides_on_many_devices_in_the_worker_match_the_interpreter(tmp_path,
                                                                       one_host_device):
    """More devices than jax has here: the worker loads the overriding plugin from its file
    and each device runs the override kernels (not XLA's negate and all-reduce)."""
    import xlaplug
    d = setup(tmp_path)
    exe = xlaplug.compile(str(tmp_path / "m.hlo"), plugins=[str(d)], engine="xla")
    got = exe.run(X)
    interp = xlaplug.compile(str(tmp_path / "m.hlo"), plugins=[str(d)]).run(X)
    program = exe.contexts.devices_engine_program(exe.source_text, got.grid)
    assert not program.here and program.overrides == ["all-reduce", "negate"]
    assert got.outputs[0].shape == (2, 3, 4) and got.transport == "xla-worker"
    np.testing.assert_allclose(got.outputs[0], interp.outputs[0], rtol=1e-6, atol=1e-6)
    for dev in range(2):
        np.testing.assert_allclose(got.outputs[0][dev], want(X), rtol=1e-6, atol=1e-6)


def test_the_summary_says_the_worker_ran_the_devices(tmp_path, one_host_device):
    m = tmp_path / "m.hlo"
    m.write_text(MODULE.replace("negate", "abs"))  # (core ops only: no plugin in the worker)
    code, out = cli("run", m, "--seed", "1", "--engine", "xla")
    assert code == 0, out
    assert out.splitlines()[0] == ("2 devices (2 replicas x 1 partition) run by XLA:CPU in a "
                                   "worker process; outputs stacked by device"), out
    code, out = cli("run", m, "--seed", "1", "--engine", "xla", "--json")
    assert code == 0 and json.loads(out)["transport"] == "xla-worker", out
    code, out = cli("run", m, "--seed", "1")  # the interpreter's device threads
    assert code == 0 and out.splitlines()[0].endswith(
        "partition) in one process; outputs stacked by device"), out


IN_PROCESS = """
import os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
import numpy as np
import xlaplug
plugins, module, out = sys.argv[1:]
X = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 8
exe = xlaplug.compile(module, plugins=[plugins], engine="xla")
res = exe.run(X)
program = exe.contexts.devices_engine_program(exe.source_text, res.grid)
np.savez(out, got=res.outputs[0], here=program.here, transport=res.transport,
         overrides=",".join(program.overrides))
"""


@pytest.mark.slow  # a subprocess starting jax on 2 host devices
def test_overrides_on_many_devices_in_this_process(tmp_path):
    d = setup(tmp_path)
    out = tmp_path / "out.npz"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p), JAX_PLATFORMS="cpu")
    subprocess.run([sys.executable, "-c", IN_PROCESS, str(d), str(tmp_path / "m.hlo"),
                    str(out)], check=True, timeout=300, env=env)
    z = np.load(out)
    assert z["here"] and str(z["transport"]) == "xla"
    assert str(z["overrides"]) == "all-reduce,negate"
    for dev in range(2):
        np.testing.assert_allclose(z["got"][dev], want(X), rtol=1e-6, atol=1e-6)


REFUSED = """
from xlaplug.plugin import Plugin
plugin = Plugin("dwhile", version="1")

@plugin.kernel("while", device="cpu")
def loop(*args, **attrs):
    raise AssertionError("never called")
"""

LOOP = """HloModule loop, replica_count=2

cond {
  c = s32[] parameter(0)
  k = s32[] constant(3)
  ROOT lt = pred[] compare(c, k), direction=LT
}

body {
  b = s32[] parameter(0)
  one = s32[] constant(1)
  ROOT n = s32[] add(b, one)
}

ENTRY e {
  x = s32[] parameter(0)
  ROOT w = s32[] while(x), condition=cond, body=body
}
"""


def test_an_override_many_devices_cannot_serve_is_a_one_line_error_at_its_line(tmp_path):
    """Refused before the worker starts, at the instruction's line in the file."""
    d = tmp_path / "plugins"
    d.mkdir()
    (d / "dwhile.py").write_text(REFUSED)
    m = tmp_path / "loop.hlo"
    m.write_text(LOOP)
    code, out = cli("run", m, "--plugins-dir", d, "--engine", "xla")
    assert code == 2, out
    assert out.splitlines()[0] == (
        f"{m}:17:8: error: while 'w': plugin 'dwhile' overrides core opcode 'while', which "
        "--engine xla cannot serve as a custom call: it is control flow or structure XLA "
        "must run itself"), out


REDUCER = """HloModule red, replica_count=2
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  h = f32[] custom-call(b), custom_call_target="HorovodAllreduce", backend_config={reduce_op = "sum"}
  ROOT s = f32[] add(a, h)
}
ENTRY e {
  x = f32[4] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(x, z), dimensions={0}, to_apply=add
}
"""


def test_a_communicator_call_in_a_reducer_says_many_devices_not_mpi(tmp_path):
    m = tmp_path / "red.hlo"
    m.write_text(REDUCER)
    code, out = cli("run", m, "--engine", "xla")
    assert code == 2, out
    first = out.splitlines()[0]
    assert first == (
        f"{m}:11:8: error: reduce 'r' calls 'add', which holds communicator calls or "
        "overridden instructions: --engine xla on many devices serves them in the entry, "
        "while loops, conditionals and calls only"), out
    assert "MPI" not in out


GLOBAL = """HloModule g

ENTRY e {
  x = f32[4,6] parameter(0), sharding={devices=[2,1]0,1}

  ROOT n = f32[4,6] negate(x), sharding={devices=[2,1]0,1}
}
"""


def test_an_override_in_a_global_program_is_a_one_line_error(tmp_path):
    """XLA's partitioner cuts a global program and knows nothing of xlaplug's calls: the
    override is refused at its line, not replaced by XLA's own negate."""
    d = setup(tmp_path, GLOBAL)
    m = tmp_path / "m.hlo"
    code, out = cli("run", m, "--plugins-dir", d, "--engine", "xla")
    assert code == 2, out
    assert out.splitlines()[0] == (
        f"{m}:6:8: error: negate 'n': plugin 'dovr' overrides core opcode 'negate', which "
        "--engine xla does not serve in a global program XLA partitions (shard_map as jax "
        "prints it); the interpreter engine runs the override"), out
