"""XLA:CPU through jaxlib alone (xla/cpu_client.py, xla/host_arrays.py): a process that
has not imported jax runs `run --engine xla` / `--reference xla` without importing it, and
gets the values the jax path gives -- bit for bit: the same XLA, the same options.  Each
case runs the CLI in a fresh interpreter twice, once with jax imported first (jax's client
and arrays) and once without, and compares the two processes' `--out` archives.  The
engine's worker process and each MPI rank are checked not to import jax either (a
sitecustomize reports every process at its exit)."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from xlaplug.xla import cpu_client  # noqa: E402
from xlaplug.xla.global_shards import numpy_indices  # noqa: E402

pytestmark = pytest.mark.jax

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

# The CLI called in this interpreter, then whether jax was imported and the exit status.
DRIVER = """
import sys
if {jax}:
    import jax
from xlaplug.cli.main import main
code = 0
try:
    main({args!r})
except SystemExit as e:
    code = e.code
print({{"exit": code, "jax": "jax" in sys.modules}}, file=sys.stderr)
"""

# One global program (GSPMD's shardings, as jax prints it with Shardy off) on 2 devices.
GLOBAL = """HloModule g, num_partitions=2
ENTRY e {
  x = f32[8,6] parameter(0), sharding={devices=[2,1]<=[2]}
  w = f32[6] parameter(1), sharding={replicated}
  b = f32[8,6] broadcast(w), dimensions={1}, sharding={devices=[2,1]<=[2]}
  y = f32[8,6] multiply(x, b), sharding={devices=[2,1]<=[2]}
  ROOT t = f32[8,6] tanh(y), sharding={devices=[1,2]<=[2]}
}
"""

# Outputs of the types DLPack carries in codes numpy lacks (bf16), and bool, s64, c64, f64.
TYPES = """HloModule types
ENTRY e {
  x = f32[3,5] parameter(0)
  b = bf16[3,5] convert(x)
  z = f32[] constant(0)
  zs = f32[3,5] broadcast(z), dimensions={}
  p = pred[3,5] compare(x, zs), direction=GT
  i = s64[3,5] convert(x)
  d = f64[3,5] convert(x)
  c = c64[3,5] complex(x, x)
  e = f32[0,4] constant({})
  tr = f32[5,3] transpose(x), dimensions={1,0}
  ROOT t = (bf16[3,5], pred[3,5], s64[3,5], f64[3,5], c64[3,5], f32[0,4], f32[5,3]) tuple(b, p, i, d, c, e, tr)
}
"""


def _cli(args: list[str], with_jax: bool, devices: int = 1) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if devices > 1:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    proc = subprocess.run([sys.executable, "-c", DRIVER.format(jax=with_jax, args=args)],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    got = ast.literal_eval(proc.stderr.strip().splitlines()[-1])
    assert got["exit"] == 0, proc.stderr
    return got


def _both(tmp_path, args: list[str], devices: int = 1) -> tuple[dict, dict]:
    """The `--out` archives of the jax path and of the jaxlib path, each checked to be it."""
    out = []
    for with_jax in (True, False):
        path = tmp_path / f"{'jax' if with_jax else 'jaxlib'}.npz"
        got = _cli([*args, "--out", str(path)], with_jax, devices)
        assert got["jax"] is with_jax  # the jaxlib path never imported jax
        out.append(dict(np.load(path)))
    return out[0], out[1]


def _same_bits(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b) and a
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert a[k].tobytes() == b[k].tobytes(), k


@pytest.mark.parametrize("example,devices", [("mlp", 1), ("rms_norm", 1),
                                             ("horovod_allreduce4", 4)])
def test_engine_xla_without_jax_gives_the_jax_paths_values(tmp_path, example, devices):
    """mlp: plain XLA; rms_norm: the bundled plugin's kernel served as an FFI target (XLA
    refuses the module without it); horovod_allreduce4: 4 devices in this process, its
    all-reduce a communicator kernel across XLA's device threads."""
    a, b = _both(tmp_path, ["run", "--engine", "xla", str(EXAMPLES / f"{example}.hlo")],
                 devices)
    _same_bits(a, b)


def test_a_global_program_without_jax_gives_the_jax_paths_values(tmp_path):
    """XLA's SPMD partitioner cuts it; each argument is cut by the executable's parameter
    shardings (global_shards.numpy_indices), the outputs put back together."""
    hlo = tmp_path / "global.hlo"
    hlo.write_text(GLOBAL)
    a, b = _both(tmp_path, ["run", "--engine", "xla", str(hlo)], devices=2)
    _same_bits(a, b)


def test_every_output_type_is_read_back_as_the_jax_path_reads_it(tmp_path):
    hlo = tmp_path / "types.hlo"
    hlo.write_text(TYPES)
    a, b = _both(tmp_path, ["run", "--engine", "xla", str(hlo)])
    _same_bits(a, b)  # (npz keeps bf16 as its raw 2 bytes)
    assert b["out1"].dtype == np.bool_ and b["out5"].shape == (0, 4)


SUB_BYTE = """HloModule sub_byte
ENTRY e {
  x = f32[3,5] parameter(0)
  s = s4[3,5] convert(x)
  u = u4[3,5] convert(x)
  ROOT t = (s4[3,5], u4[3,5]) tuple(s, u)
}
"""


def test_sub_byte_outputs_are_read_as_the_jax_path_reads_them(tmp_path):
    """DLPack has no code for s4 / u4: such an output is read through jax, imported then --
    the client stays jaxlib's own -- where it was an error."""
    hlo = tmp_path / "sub_byte.hlo"
    hlo.write_text(SUB_BYTE)
    out = []
    for with_jax in (True, False):
        path = tmp_path / f"{'jax' if with_jax else 'jaxlib'}.npz"
        got = _cli(["run", "--engine", "xla", str(hlo), "--seed", "3", "--out", str(path)],
                   with_jax)
        out.append(dict(np.load(path)))
    _same_bits(*out)


def test_reference_xla_without_jax():
    got = _cli(["run", "--reference", "xla", str(EXAMPLES / "mlp.hlo")], with_jax=False)
    assert got == {"exit": 0, "jax": False}


def test_where_jax_is_imported_its_cpu_client_is_the_one():
    """One process, one CPU client: with jax imported (as here) the bridge takes jax's."""
    from jax._src import xla_bridge
    assert cpu_client.cpu_backend("test") is xla_bridge.get_backend("cpu")
    assert not cpu_client.uses_own_client()


@pytest.mark.parametrize("dims,devices,last_replicated", [
    ([2, 1], 2, False), ([1, 2], 2, False), ([2, 2], 4, False), ([2, 1, 2], 4, True),
    ([4], 4, False)])
def test_numpy_indices_are_jaxs(dims, devices, last_replicated):
    from jax._src.lib import xla_client as xc
    from jax._src.op_shardings import op_sharding_to_numpy_indices
    op = xc.OpSharding()
    op.type = xc.OpSharding.Type.OTHER
    op.tile_assignment_dimensions = dims
    op.tile_assignment_devices = list(reversed(range(devices)))
    op.replicate_on_last_tile_dim = last_replicated
    hs = xc.HloSharding.from_proto(op)
    shape = tuple(4 * d for d in dims[:len(dims) - last_replicated])
    ours = numpy_indices(hs, shape, devices, xc)
    assert list(ours) == list(op_sharding_to_numpy_indices(hs, shape, devices))
    replicated = xc.HloSharding.replicate()
    assert list(numpy_indices(replicated, (3, 2), 2, xc)) == \
        list(op_sharding_to_numpy_indices(replicated, (3, 2), 2))


# Imported by every Python process started with its directory on PYTHONPATH: at exit, each
# process says whether it imported jax (the CLI's worker processes and MPI ranks too).
SITECUSTOMIZE = """
import atexit, os, sys
def _say():
    with open({log!r}, "a") as f:
        f.write(repr((" ".join(sys.argv[:2]), "jax" in sys.modules)) + "\\n")
atexit.register(_say)
"""


def _processes(tmp_path, cmd: list[str]) -> list[tuple[str, bool]]:
    site, log = tmp_path / "site", tmp_path / "processes.log"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(log=str(log)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)])}
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    return [ast.literal_eval(line) for line in log.read_text().splitlines()]


def test_the_engine_worker_process_runs_without_jax(tmp_path):
    """4 replicas where this process has 1 host device: a worker process on 4 runs them."""
    got = _processes(tmp_path, [sys.executable, "-m", "xlaplug.cli", "run", "--engine", "xla",
                                str(EXAMPLES / "horovod_allreduce4.hlo")])
    assert any("engine_worker" in argv for argv, _ in got) and len(got) == 2, got
    assert [jax for _, jax in got] == [False, False], got


def test_each_mpi_rank_runs_without_jax(tmp_path):
    from test_multi_device_cli import _mpiexec
    got = _processes(tmp_path, [_mpiexec(), "-n", "4", sys.executable, "-m", "xlaplug.cli",
                                "run", "--engine", "xla",
                                str(EXAMPLES / "horovod_allreduce4.hlo")])
    assert len(got) == 4 and [jax for _, jax in got] == [False] * 4, got
