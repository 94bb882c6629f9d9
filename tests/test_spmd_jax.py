"""jax programs compiled by XLA for 4 and 8 devices (shard_map on 1-D and 2-D meshes,
automatic partitioning, a ring all-reduce from ppermute in a fori_loop, a data-parallel
training step), run on as many xlaplug devices and compared with jax's own per-device
results (tests/jax_spmd_programs.py makes them in a subprocess with 8 host devices), and
`run --reference xla` on the global programs: XLA partitions them for their own device
count and agrees with xlaplug."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cli_in_process import xlaplug_in_process
from xlaplug.backends.spmd.groups import DeviceGrid
from xlaplug.runtime.spmd.runner import run_module_devices
from xlaplug.hlo.text.parser import parse_module

pytest.importorskip("jax")
pytestmark = [pytest.mark.jax, pytest.mark.slow]

NAMES = ["shard_map_1d", "shard_map_int", "shard_map_2d", "ring_allreduce_fori",
         "auto_partitioned_matmul", "auto_partitioned_gspmd", "data_parallel_step"]
ROOT = Path(__file__).resolve().parents[1]


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


def _cli(*argv, cwd):
    """`xlaplug ...` where jax has one host device (so XLA partitions a global program in a
    subprocess of its own, on the program's device count): in this process when its jax
    has one (tests/cli_in_process.py; each command's process paid ~1.3 s of CPU for its
    imports, jax's among them), else in a process as a user runs it."""
    import jax
    if len(jax.local_devices(backend="cpu")) == 1:
        return xlaplug_in_process(*argv, cwd=cwd,
                                  env={"XLA_FLAGS": None, "XLAPLUG_PLUGIN_PATH": None})
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "XLAPLUG_PLUGIN_PATH")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run([sys.executable, "-m", "xlaplug", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


DEVICES = {"shard_map_2d": 8}


@pytest.mark.parametrize("name", NAMES)
def test_reference_xla_partitions_global_program(name, programs, tmp_path):
    """The global program as jax lowers it (psum, all_gather, ppermute, psum_scatter,
    all_to_all in shard_map; sharded matmuls, with Shardy and with GSPMD) against XLA:CPU
    partitioning it for the program's own device count, with jax's inputs."""
    i, z = programs[name]
    (tmp_path / "m.hlo").write_text(str(z[f"lowered_{i}"]))
    np.savez(tmp_path / "in.npz", **{f"in{k}": z[f"garg_{i}_{k}"]
                                     for k in range(int(z[f"nargs_{i}"]))})
    r = _cli("run", "m.hlo", "--inputs", "in.npz", "--reference", "xla", "--json",
             cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    ref = json.loads(r.stdout)["reference"]
    assert ref["ok"] and ref["devices"] == DEVICES.get(name, 4), ref
    outs = ref["outputs"]
    assert len(outs) == sum(1 for k in z.files if k.startswith(f"gout_{i}_"))
    assert all(o["ok"] for o in outs), outs


TWICE = """from xlaplug.plugin import Plugin

plugin = Plugin("twice", version="1.0")


@plugin.decomposition("test.twice")
def twice(b, x):
    return b.add(x, x)


@plugin.kernel("test.twice", device="cpu")
def twice_cpu(x, out):
    out[...] = x * FACTOR
"""


def test_reference_xla_catches_a_wrong_kernel_in_shard_map(programs, tmp_path):
    """A plugin op inside a shard_map region: xlaplug runs its kernel on each of the mesh's
    devices, XLA its decomposition; a wrong kernel (x * 3 for x + x) is a mismatch, exit 1.
    (A right kernel in a region agreeing with XLA: test_horovod_ops_in_shard_map_against_xla.)"""
    _, z = programs["shard_map_1d"]
    (tmp_path / "m.hlo").write_text(str(z["plugin_hlo"]))
    np.savez(tmp_path / "in.npz", in0=z["plugin_arg"])
    plugins = tmp_path / "plugins"
    plugins.mkdir(mode=0o755)
    (plugins / "twice.py").write_text(TWICE.replace("FACTOR", "3"))
    r = _cli("run", "m.hlo", "--inputs", "in.npz", "--reference", "xla", "--plugins-dir",
             "plugins", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "partitioning the program for 4 devices" in r.stdout
    assert "MISMATCH out0" in r.stderr
    # ... and the decomposition, run by xlaplug, agrees with XLA
    r = _cli("run", "m.hlo", "--inputs", "in.npz", "--reference", "xla", "--plugins-dir",
             "plugins", "--prefer", "decomposition", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "the output matches XLA:CPU" in r.stdout


@pytest.mark.parametrize("prefer", ["kernel", "decomposition"])
def test_horovod_ops_in_shard_map_against_xla(prefer, programs, tmp_path):
    """The Horovod ops inside a shard_map region: their kernels (the communicator over the
    region's 4 devices) or their decompositions (built for those 4 devices, not the one the
    program around them runs on) against XLA partitioning the decompositions."""
    _, z = programs["shard_map_1d"]
    (tmp_path / "m.hlo").write_text(str(z["horovod_hlo"]))
    np.savez(tmp_path / "in.npz", in0=z["horovod_arg"])
    r = _cli("run", "m.hlo", "--inputs", "in.npz", "--reference", "xla", "--prefer", prefer,
             "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    ref = json.loads(r.stdout)["reference"]
    assert ref["ok"] and ref["devices"] == 4 and len(ref["outputs"]) == 5, ref


def test_reference_xla_refuses_meshes_of_two_sizes(programs, tmp_path):
    """What the reference cannot partition is one line naming it, exit 2."""
    i, z = programs["shard_map_1d"]
    text = str(z[f"lowered_{i}"]).replace('{mesh = #sdy.mesh<["x"=4]>}',
                                          '{mesh = #sdy.mesh<["x"=4]>, two = #sdy.mesh<["y"=2]>}')
    assert "two = " in text
    (tmp_path / "m.hlo").write_text(text)
    r = _cli("run", "m.hlo", "--reference", "xla", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip() == ("error: --reference xla: meshes of 2 different sizes (2, 4 "
                                "devices) in one program are not supported")


def test_decompose_all_of_a_shard_map_program_is_one_xla_partitions(programs):
    """Issue 21 item 5: `compile --decompose-all` of jax's shard_map global program keeps
    what XLA's partitioner needs (the sdy markers, the mesh), and XLA itself runs the artifact
    on the program's own four devices to jax's outputs (one subprocess with 4 host devices;
    the other programs take the same path in the --reference xla tests above)."""
    import xlaplug
    from xlaplug.xla.global_shards import global_devices
    from xlaplug.xla.reference import run_global_reference
    i, z = programs["shard_map_1d"]
    art = xlaplug.compile(str(z[f"lowered_{i}"]), decompose_all=True)
    assert "xlaplug." not in art.hlo and "fusion" not in art.hlo
    module = parse_module(art.hlo, "<artifact>")
    devices, shardy = global_devices(module)
    assert devices == 4 and shardy
    args = [z[f"garg_{i}_{k}"] for k in range(int(z[f"nargs_{i}"]))]
    root = module.entry.root.shape
    shapes = [tuple(s.dims) for s in (root.tuple_shapes if root.is_tuple else (root,))]
    outs = run_global_reference(art.hlo, args, shapes, devices, shardy)
    want = [z[f"gout_{i}_{j}"] for j in range(sum(f.startswith(f"gout_{i}_") for f in z.files))]
    assert len(outs) == len(want)
    for o, w in zip(outs, want):
        np.testing.assert_allclose(o, w, rtol=1e-6, atol=1e-6)


def test_decompose_all_of_a_partitioned_program_is_refused_in_one_line(programs, tmp_path):
    """The program as XLA partitioned and scheduled it (`compiled.as_text()`, 4 partitions)
    is XLA's output, not its input: its bitcasts and per-device shapes fail XLA's layout
    checks when given back (tried: "layout minor_to_major field contains 3 elements, but
    shape has 2 dimensions").  `--decompose-all` refuses it in one line, exit 2, writing
    nothing, and says what to give instead; without --decompose-all xlaplug runs it (above)."""
    i, z = programs["shard_map_1d"]
    (tmp_path / "m.hlo").write_text(str(z[f"compiled_{i}"]))
    r = _cli("compile", "m.hlo", "--decompose-all", "-o", "out.hlo", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert "error: --decompose-all: module 'jit_collectives' is XLA's partitioned, scheduled" \
        in lines[0] and ".compile().as_text()" in lines[0], r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "out.hlo").exists()
