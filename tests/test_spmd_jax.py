"""jax programs compiled by XLA for 4 and 8 devices (shard_map on 1-D and 2-D meshes,
automatic partitioning, a ring all-reduce from ppermute in a fori_loop, a data-parallel
training step), run on as many xlaplug devices and compared with jax's own per-device
results (tests/jax_spmd_programs.py makes them in a subprocess with 8 host devices)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from xlaplug.backends.spmd.groups import DeviceGrid
from xlaplug.runtime.spmd.runner import run_module_devices
from xlaplug.hlo.text.parser import parse_module

pytest.importorskip("jax")
pytestmark = [pytest.mark.jax, pytest.mark.slow]

NAMES = ["shard_map_1d", "shard_map_int", "shard_map_2d", "ring_allreduce_fori",
         "auto_partitioned_matmul", "data_parallel_step"]


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    path = tmp_path_factory.mktemp("jax_spmd") / "programs.npz"
    subprocess.run([sys.executable, str(Path(__file__).with_name("jax_spmd_programs.py")),
                    str(path)], check=True, timeout=600)
    z = np.load(path)
    return {str(z[f"name_{i}"]): (i, z) for i in range(int(z["n"]))}


def _leaves(v):
    if isinstance(v, tuple):
        return [x for e in v for x in _leaves(e)]
    return [np.asarray(v)]


@pytest.mark.parametrize("name", NAMES)
def test_compiled_program_matches_jax(name, programs):
    i, z = programs[name]
    module = parse_module(str(z[f"compiled_{i}"]))
    parts = int(z[f"parts_{i}"])
    grid = DeviceGrid.of_module(module)
    assert grid == DeviceGrid(1, parts), (grid, parts)
    nargs = len(module.entry.parameters)
    args = [[z[f"arg_{i}_{k}_{p}"] for k in range(nargs)] for p in range(parts)]
    ours = run_module_devices(module, args, grid, timeout=30)
    for p in range(parts):
        got = _leaves(ours[p])
        for j, g in enumerate(got):
            want = z[f"out_{i}_{j}_{p}"]
            assert g.shape == want.shape and g.dtype == want.dtype, (name, p, j)
            if g.dtype.kind in "iub":
                assert np.array_equal(g, want), (name, p, j)
            else:  # XLA's dots and reductions may round differently in the last bits
                np.testing.assert_allclose(g, want, rtol=2e-5, atol=1e-6,
                                           err_msg=f"{name}: partition {p}, output {j}")
        # Every device holds the same bits of a replicated value (a psum, the new params).
        if name in ("shard_map_1d", "data_parallel_step") and p:
            first = _leaves(ours[0])
            for j in (0, 1) if name == "data_parallel_step" else (0, 1, 4):
                assert got[j].tobytes() == first[j].tobytes(), (name, p, j)


@pytest.mark.parametrize("name", NAMES)
def test_global_program_matches_jax(name, programs):
    """The program as jax lowers it, before partitioning, runs on one device: shardings do
    not change values, and each shard_map region runs its body on every device of the mesh
    (passes/sdy_shard_map.py)."""
    from xlaplug.runtime.driver import compile_module
    from xlaplug.runtime.executor import run_module
    i, z = programs[name]
    module = parse_module(str(z[f"lowered_{i}"]))
    compile_module(module)
    args = [z[f"garg_{i}_{k}"] for k in range(int(z[f"nargs_{i}"]))]
    got = _leaves(run_module(module, args))
    for j, g in enumerate(got):
        want = z[f"gout_{i}_{j}"]
        assert g.shape == want.shape and g.dtype == want.dtype, (name, j)
        if g.dtype.kind in "iub":
            assert np.array_equal(g, want), (name, j)
        else:
            np.testing.assert_allclose(g, want, rtol=2e-5, atol=1e-6, err_msg=f"{name}: {j}")
