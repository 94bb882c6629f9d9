"""The bundled Horovod plugin on many devices: every op's kernel (the communicator, threads
and MPI) against its decomposition (core collectives), in a replicas-only and in a
partitions-only module; the decomposition against XLA:CPU on as many host devices."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from xlaplug.backends.spmd.groups import DeviceGrid
from xlaplug.runtime.spmd.runner import run_module_devices
from xlaplug.runtime.driver import compile_module
from xlaplug.hlo.text.parser import parse_module
from xlaplug.hlo.text.printer import module_to_text
from xlaplug.plugin import load_plugins
from xlaplug.plugin.session import Session
from cli_in_process import xlaplug_in_process


def horovod_module(header: str, d: int) -> str:
    return f"""HloModule horovod, {header}

ENTRY main {{
  g = f32[8,3]{{1,0}} parameter(0)
  k = s32[8]{{0}} parameter(1)
  sum = f32[8,3]{{1,0}} custom-call(g), custom_call_target="HorovodAllreduce", backend_config={{reduce_op = "sum"}}
  avg = f32[8,3]{{1,0}} custom-call(g), custom_call_target="HorovodAllreduce", backend_config={{reduce_op = "average"}}
  mx = s32[8]{{0}} custom-call(k), custom_call_target="HorovodAllreduce", backend_config={{reduce_op = "max"}}
  iavg = s32[8]{{0}} custom-call(k), custom_call_target="HorovodAllreduce", backend_config={{reduce_op = "average"}}
  ag = f32[{8 * d},3]{{1,0}} custom-call(g), custom_call_target="HorovodAllgather"
  bc = s32[8]{{0}} custom-call(k), custom_call_target="HorovodBroadcast", backend_config={{root_rank = 2}}
  a2a = f32[8,3]{{1,0}} custom-call(g), custom_call_target="HorovodAlltoall"
  rs = f32[{8 // d},3]{{1,0}} custom-call(g), custom_call_target="HorovodReducescatter", backend_config={{reduce_op = "sum"}}
  ROOT t = (f32[8,3]{{1,0}}, f32[8,3]{{1,0}}, s32[8]{{0}}, s32[8]{{0}}, f32[{8 * d},3]{{1,0}}, s32[8]{{0}}, f32[8,3]{{1,0}}, f32[{8 // d},3]{{1,0}}) tuple(sum, avg, mx, iavg, ag, bc, a2a, rs)
}}
"""


GRIDS = {"replicas": ("replica_count=4", DeviceGrid(4, 1)),
         "partitions": ("num_partitions=4", DeviceGrid(1, 4)),
         "both": ("replica_count=2, num_partitions=2", DeviceGrid(2, 2))}


def _inputs(d: int):
    g = np.random.default_rng(5)
    return [[g.standard_normal((8, 3)).astype(np.float32),
             g.integers(-50, 50, 8).astype(np.int32)] for _ in range(d)]


def _leaves(v):
    if isinstance(v, tuple):
        return [x for e in v for x in _leaves(e)]
    return [np.asarray(v)]


def _compiled(text: str, prefer: str, passes: str | None = None):
    session = Session(load_plugins(), prefer=prefer)
    module = parse_module(text)
    compile_module(module, session, passes)
    return module, session


@pytest.mark.parametrize("mode", GRIDS)
def test_kernels_match_decompositions(mode):
    header, grid = GRIDS[mode]
    text = horovod_module(header, grid.count)
    args = _inputs(grid.count)
    km, ks = _compiled(text, "kernel")
    dm, ds = _compiled(text, "decomposition")
    assert "custom-call" in module_to_text(km) and "custom-call" not in module_to_text(dm)
    kern = run_module_devices(km, args, grid, ks)
    deco = run_module_devices(dm, args, grid, ds)
    for d in range(grid.count):
        for j, (a, b) in enumerate(zip(_leaves(kern[d]), _leaves(deco[d]))):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (mode, d, j, a, b)


def _portable_text(mode: str) -> str:
    """The mode's portable artifact (every plugin op lowered; XLA takes no fusion of
    xlaplug's, and small-regions makes some) as text, with its module and session."""
    header, grid = GRIDS[mode]
    dm, ds = _compiled(horovod_module(header, grid.count), "decomposition", "portable")
    return module_to_text(dm), dm, ds


@pytest.fixture(scope="module")
def xla_runs(tmp_path_factory):
    """XLA:CPU's outputs for every mode's artifact from one tests/xla_devices.py process
    (its host devices fixed when jax starts, so not this one): {mode: (texts sent, case
    index, outputs)} -- one jax start for the three modes, not one a mode."""
    from xla_devices import _raw
    d = tmp_path_factory.mktemp("horovod_xla")
    data, texts = {"n": np.array(len(GRIDS))}, {}
    for i, (mode, (_, grid)) in enumerate(GRIDS.items()):
        texts[mode] = _portable_text(mode)[0]
        data.update({f"text_{i}": np.array(texts[mode]),
                     f"grid_{i}": np.array([grid.replicas, grid.partitions]),
                     f"nargs_{i}": np.array(2)})
        for dev, row in enumerate(_inputs(grid.count)):
            for k, a in enumerate(row):
                data[f"arg_{i}_{k}_{dev}"], data[f"dtype_{i}_{k}"] = _raw(a)
    np.savez(d / "c.npz", **data)
    subprocess.run([sys.executable, str(Path(__file__).with_name("xla_devices.py")),
                    str(d / "c.npz"), str(d / "o.npz")], check=True, timeout=300)
    out = np.load(d / "o.npz")
    return {mode: (texts[mode], i, out) for i, mode in enumerate(GRIDS)}


@pytest.mark.jax
@pytest.mark.parametrize("mode", GRIDS)
def test_decomposition_runs_the_same_on_xla(mode, xla_runs):
    """The portable artifact (every plugin op lowered) on XLA:CPU with 4 host devices."""
    pytest.importorskip("jax")
    _, grid = GRIDS[mode]
    text, i, xla = xla_runs[mode]
    got_text, dm, ds = _portable_text(mode)
    assert got_text == text  # the program XLA ran is the one run here
    assert f"error_{i}" not in xla, str(xla[f"error_{i}"])
    ours = run_module_devices(dm, _inputs(grid.count), grid, ds)
    for d in range(grid.count):
        for j, a in enumerate(_leaves(ours[d])):
            want = xla[f"out_{i}_{j}_{d}"]
            assert a.tobytes() == want.tobytes(), (mode, d, j, a, want)


def test_kernels_over_mpi_match_threads(tmp_path):
    """The same kernels, each device a process (one MPI call per native all-reduce)."""
    import os
    mpiexec = Path(sys.executable).with_name("mpiexec")
    if not mpiexec.exists():
        pytest.skip("no mpiexec next to python: pip install 'xlaplug[mpi]'")
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=str(root))
    (tmp_path / "h.hlo").write_text(horovod_module("replica_count=4", 4))
    args = _inputs(4)
    np.savez(tmp_path / "in.npz", in0=np.stack([a[0] for a in args]),
             in1=np.stack([a[1] for a in args]))
    cli = [sys.executable, "-m", "xlaplug.cli", "run", "h.hlo", "--inputs", "in.npz"]
    # the threads' run in this process (tests/cli_in_process.py), the ranks' under mpiexec
    threads = xlaplug_in_process(*cli[3:], "--out", "threads.npz", cwd=tmp_path)
    assert threads.returncode == 0, threads.stderr
    mpi = subprocess.run([str(mpiexec), "-n", "4", *cli, "--expect", "threads.npz"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert mpi.returncode == 0, mpi.stderr
    assert "all 8 outputs of 4 devices match threads.npz" in mpi.stdout
