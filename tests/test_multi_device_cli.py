"""`xlaplug run` on many devices: threads in one process, and processes under mpiexec
(`mpiexec -n 2` and `-n 4`, MPICH from PyPI), with the npz layout of README's multi-device
section; the expected values come from the same module run in one process, whose
collectives are checked against XLA in test_spmd_collectives.py.  Runs on threads that can
only end by themselves run in this process (tests/cli_in_process.py); runs that wait for a
collective timeout keep a process, which a hang could not outlive."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from cli_in_process import xlaplug_in_process

ROOT = Path(__file__).resolve().parent.parent
# Each test starts xlaplug processes (and mpiexec): out of the fast loop.
pytestmark = pytest.mark.slow
ALLREDUCE = """HloModule allreduce, replica_count={n}

add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}

ENTRY e {{
  x = f32[8] parameter(0)
  w = f32[8] parameter(1)
  s = f32[8] all-reduce(x), replica_groups={{}}, to_apply=add
  g = f32[{g}] all-gather(x), replica_groups={{}}, dimensions={{0}}
  id = u32[] replica-id()
  ROOT t = (f32[8], f32[{g}], u32[], f32[8]) tuple(s, g, id, w)
}}
"""
DISAGREE = """HloModule disagree, num_partitions={n}

add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}

yes {{
  p = f32[4] parameter(0)
  ROOT r = f32[4] all-reduce(p), channel_id=1, replica_groups=[1,{n}]<=[{n}], use_global_device_ids=true, to_apply=add
}}

no {{
  p = f32[4] parameter(0)
  ROOT r = f32[4] negate(p)
}}

ENTRY e {{
  x = f32[4] parameter(0)
  id = u32[] partition-id()
  z = u32[] constant(0)
  c = pred[] compare(id, z), direction=EQ
  ROOT r = f32[4] conditional(c, x, x), true_computation=yes, false_computation=no
}}
"""


def _env():
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def xlaplug(*args, mpi: int = 0, timeout: float = 120):
    cmd = [sys.executable, "-m", "xlaplug.cli", *map(str, args)]
    if mpi:
        cmd = [_mpiexec(), "-n", str(mpi), *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env(),
                          stdin=subprocess.DEVNULL)


def xlaplug_here(*args):
    """`xlaplug ARGS` with every device a thread of this process."""
    return xlaplug_in_process(*args)


def threads_or_mpi(*args, mpi: int):
    """Under mpiexec with `mpi` ranks, or (0) on threads in this process."""
    return xlaplug(*args, mpi=mpi) if mpi else xlaplug_here(*args)


def _mpiexec() -> str:
    exe = shutil.which("mpiexec", path=str(Path(sys.executable).parent) + os.pathsep +
                       os.environ.get("PATH", ""))
    if exe is None:
        pytest.skip("no mpiexec: pip install 'xlaplug[mpi]'")
    return exe


@pytest.fixture
def allreduce_case(tmp_path):
    def make(n):
        hlo = tmp_path / f"ar{n}.hlo"
        hlo.write_text(ALLREDUCE.format(n=n, g=8 * n))
        x = np.arange(8 * n, dtype=np.float32).reshape(n, 8)  # one row per device
        w = np.full(8, 3.0, np.float32)                        # the same for every device
        np.savez(tmp_path / f"in{n}.npz", in0=x, in1=w)
        return hlo, x, w
    return make


def _expected(x, w, n):
    return {"out0": np.tile(x.sum(0), (n, 1)), "out1": np.tile(x.reshape(-1), (n, 1)),
            "out2": np.arange(n, dtype=np.uint32), "out3": np.tile(w, (n, 1))}


@pytest.mark.parametrize("mpi", [0, 2, 4], ids=["threads", "mpi2", "mpi4"])
def test_allreduce_module(allreduce_case, tmp_path, mpi):
    n = mpi or 4
    hlo, x, w = allreduce_case(n)
    np.savez(tmp_path / "want.npz", **_expected(x, w, n))
    out = tmp_path / "out.npz"
    p = threads_or_mpi("run", hlo, "--inputs", tmp_path / f"in{n}.npz", "--expect",
                       tmp_path / "want.npz", "--out", out, mpi=mpi)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count(f"all 4 outputs of {n} devices match") == 1, p.stdout
    got = np.load(out)
    for k, v in _expected(x, w, n).items():
        assert np.array_equal(got[k], v), k


@pytest.mark.parametrize("mpi", [0, 2], ids=["threads", "mpi2"])
def test_mismatch_names_the_device(allreduce_case, tmp_path, mpi):
    n = mpi or 4
    hlo, x, w = allreduce_case(n)
    want = _expected(x, w, n)
    want["out3"][1, 0] += 1  # device 1's copy of w is "wrong"
    np.savez(tmp_path / "want.npz", **want)
    p = threads_or_mpi("run", hlo, "--inputs", tmp_path / f"in{n}.npz", "--expect",
                       tmp_path / "want.npz", mpi=mpi)
    assert p.returncode == 1, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("MISMATCH")]
    assert len(lines) == 1 and lines[0].startswith("MISMATCH out3 device 1:"), p.stderr


@pytest.mark.parametrize("mpi", [0, 4], ids=["threads", "mpi4"])
def test_devices_that_disagree_end_within_the_timeout(tmp_path, mpi):
    hlo = tmp_path / "disagree.hlo"
    hlo.write_text(DISAGREE.format(n=4))
    t0 = time.monotonic()
    p = xlaplug("run", hlo, "--collective-timeout", 3, mpi=mpi, timeout=60)
    took = time.monotonic() - t0
    assert p.returncode == 2, (p.stdout, p.stderr)
    errors = [ln for ln in p.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1, p.stderr  # reported once, by the device that waited
    assert "device 0: all-reduce 'r' (call 1): devices 1, 2, 3" in errors[0], errors[0]
    assert "device 1 finished" in errors[0]
    assert took < 45, took  # not a timing test: a hang would run into the 60 s limit


def test_devices_waiting_elsewhere_are_named_with_their_collective(tmp_path):
    # Device 0 waits in 'r' (all four devices), device 1 in 'q' (devices 0 and 1), 2 and 3
    # finish: whichever times out first says where the others stand (each rank's answer to
    # a status query, written out only when asked).
    hlo = tmp_path / "elsewhere.hlo"
    hlo.write_text(DISAGREE.format(n=4).replace(
        "  ROOT r = f32[4] negate(p)",
        "  ROOT q = f32[4] all-reduce(p), channel_id=2, replica_groups={{0,1},{2,3}}, "
        "use_global_device_ids=true, to_apply=add"))
    p = xlaplug("run", hlo, "--collective-timeout", 3, mpi=4, timeout=60)
    assert p.returncode == 2, (p.stdout, p.stderr)
    errors = [ln for ln in p.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1, p.stderr
    if "device 0: all-reduce 'r'" in errors[0]:
        assert "all-reduce 'r' (call 1): devices 1, 2, 3 did not arrive within 3 s; " \
               "device 1 waiting at all-reduce 'q' (call 1); device 2 finished" in errors[0], \
            errors[0]
    else:
        assert "all-reduce 'q' (call 1): device 0 did not arrive within 3 s; device 0 " \
               "waiting at all-reduce 'r' (call 1)" in errors[0], errors[0]


def test_rank_count_that_does_not_fit(allreduce_case):
    hlo, _, _ = allreduce_case(4)
    p = xlaplug("run", hlo, mpi=3)
    assert p.returncode == 2
    assert p.stderr.strip().endswith("the module runs on 4 devices (4 replicas x 1 "
                                     "partition) but mpiexec started 3 processes: use "
                                     "mpiexec -n 4 (or a divisor of 4: several devices per "
                                     "process)"), p.stderr
    assert p.stderr.count("error:") == 1


# Groups within a rank, across ranks, and both, when 2 ranks run 2 devices each.
PER_RANK = """HloModule per_rank, replica_count=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

maxi {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT m = s32[] maximum(a, b)
}

ENTRY e {
  x = f32[6] parameter(0)
  q = s32[4] parameter(1)
  all = f32[6] all-reduce(x), replica_groups={}, to_apply=add
  across = s32[4] all-reduce(q), replica_groups={{0,2},{1,3}}, to_apply=maxi
  within = f32[6] all-reduce(x), replica_groups={{1,0},{3,2}}, to_apply=add
  g = f32[12] all-gather(x), replica_groups={{3,0},{1,2}}, dimensions={0}
  rs = f32[3] reduce-scatter(x), replica_groups={{0,1},{2,3}}, dimensions={0}, to_apply=add
  cp = f32[6] collective-permute(x), source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  id = u32[] replica-id()
  ROOT t = (f32[6], s32[4], f32[6], f32[12], f32[3], f32[6], u32[]) tuple(all, across, within, g, rs, cp, id)
}
"""


def _threads_then_mpi(tmp_path, name: str, text: str, seed: int, ranks: int):
    """(stdout of the MPI run, threads' outputs, MPI's): one module run on threads here,
    then by `ranks` MPI processes expecting the first run's outputs."""
    hlo = tmp_path / f"{name}.hlo"
    hlo.write_text(text)
    threads = xlaplug_here("run", hlo, "--seed", seed, "--out", tmp_path / "threads.npz")
    assert threads.returncode == 0, threads.stderr
    p = xlaplug("run", hlo, "--seed", seed, "--out", tmp_path / "mpi.npz", "--expect",
                tmp_path / "threads.npz", mpi=ranks)
    assert p.returncode == 0, p.stderr
    return p.stdout, np.load(tmp_path / "threads.npz"), np.load(tmp_path / "mpi.npz")


def test_two_devices_per_rank_match_threads(tmp_path):
    out, want, got = _threads_then_mpi(tmp_path, "per_rank", PER_RANK, 3, 2)
    assert "all 7 outputs of 4 devices match" in out, out
    assert sorted(got) == sorted(want)
    for k in want:  # rank-order reductions: the same bits as threads in one process
        assert got[k].tobytes() == want[k].tobytes(), k


RANK_0 = """HloModule rank_0, replica_count=4
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[] parameter(0)
  i = s32[] parameter(1)
  r = f32[] all-reduce(x), replica_groups={}, to_apply=add
  v = (f32[], f32[]) all-reduce(x, r), replica_groups={{0,1},{2,3}}, to_apply=add
  cp = s32[] collective-permute(i), source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  ROOT t = (f32[], (f32[], f32[]), s32[]) tuple(r, v, cp)
}
"""


def test_rank_0_values_over_mpi_match_threads(tmp_path):
    # Scalars keep their rank through MPI's one-call all-reduce and its fused buffers (the
    # threads' results are checked against XLA's: test_spmd_collectives, rank_0_operands).
    _, want, got = _threads_then_mpi(tmp_path, "rank_0", RANK_0, 5, 4)
    for k in want:  # (a float sum in one MPI call is rounded in MPI's order: 1 ULP)
        assert got[k].shape == want[k].shape == (4,), k
        assert np.allclose(got[k], want[k], rtol=1e-6, atol=0), k
    assert got["out3"].tobytes() == want["out3"].tobytes()  # the permuted integers


def test_a_rank_that_never_comes_ends_within_the_timeout(tmp_path):
    hlo = tmp_path / "disagree.hlo"  # devices 0 and 1 (rank 0) reduce, 2 and 3 (rank 1) do not
    hlo.write_text(DISAGREE.format(n=4).replace("constant(0)", "constant(2)").replace(
        "direction=EQ", "direction=LT"))
    p = xlaplug("run", hlo, "--collective-timeout", 3, mpi=2, timeout=60)
    assert p.returncode == 2, (p.stdout, p.stderr)
    errors = [ln for ln in p.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1, p.stderr
    assert "device 0: all-reduce 'r' (call 1): rank 1 did not arrive within 3 s; rank 1 " \
           "finished" in errors[0], errors[0]


def test_input_of_the_wrong_stacked_shape(allreduce_case, tmp_path):
    hlo, x, w = allreduce_case(4)
    np.savez(tmp_path / "bad.npz", in0=x[:3], in1=w)
    p = xlaplug_here("run", hlo, "--inputs", tmp_path / "bad.npz")
    assert p.returncode == 2
    assert "input in0 for parameter 'x' is f32[3,8]; the parameter is f32[8]: give f32[8] " \
           "(every device gets it) or f32[4,8] (stacked: one per device, 4 devices)" \
           in p.stderr, p.stderr


def test_replicas_flag_overrides_the_header(allreduce_case):
    hlo, _, _ = allreduce_case(2)  # written for 2 replicas: all-gather makes f32[16]
    p = xlaplug_here("run", hlo, "--replicas", 4)
    assert p.returncode == 2
    assert re.search(r"error: device \d: all-gather 'g': the group's values make \[32\], the "
                     r"instruction declares f32\[16\] \(does the device count fit the "
                     r"module\?\)$", p.stderr.strip()), p.stderr
    assert xlaplug_here("run", hlo, "--replicas", 2).returncode == 0


def test_memory_preflight_counts_every_device_of_a_rank(tmp_path):
    hlo = tmp_path / "big.hlo"  # 256 KiB in and out per device: ~0.5 MiB of buffers each
    hlo.write_text(ALLREDUCE_BIG)
    one = xlaplug("run", hlo, "--max-memory", "600K", mpi=4)  # one device per rank: fits
    assert one.returncode == 0, one.stderr
    two = xlaplug("run", hlo, "--max-memory", "600K", mpi=2)  # two per rank: does not
    assert two.returncode == 2, (two.stdout, two.stderr)
    errors = [ln for ln in two.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and "buffers on 2 devices, more than the --max-memory" in errors[0]


# The all-reduce module above with 64K-element operands, its all-gather and tuple dropped.
ALLREDUCE_BIG = ALLREDUCE.format(n=4, g=32).split("ENTRY")[0] + """ENTRY e {
  x = f32[65536] parameter(0)
  ROOT r = f32[65536] all-reduce(x), replica_groups={}, to_apply=add
}
"""


COUNT_CALLS = r"""
import numpy as np
from xlaplug.backends.spmd.groups import DeviceGrid
from xlaplug.backends.spmd.mpi import MpiTransport
from xlaplug.runtime.spmd.runner import collective_groups
from xlaplug.hlo.text.parser import parse_module
m = parse_module('''HloModule m, replica_count=2
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[4] parameter(0)
  ROOT r = f32[4] all-reduce(x), replica_groups={}, to_apply=add
}''')
t = MpiTransport(timeout=20)
t.prepare(collective_groups(m, DeviceGrid(2, 1)))
ins = m.entry.root
for _ in range(3):  # a plugin communicator's path: one small array per call
    out = t.allreduce(t.rank, ins, (0, 1), [np.ones(4, np.float32)], "add")[0]
assert out.tolist() == [2.0] * 4
# Rank 0 prints every rank's count: two ranks writing to one pipe may interleave their lines.
from mpi4py import MPI
counts = MPI.COMM_WORLD.gather(t._calls[ins.name], root=0)
if t.rank == 0:
    print(counts)
"""


def test_the_transport_counts_each_all_reduce_once(tmp_path):
    # The call number names a collective in the timeout messages ("all-reduce 'r' (call
    # 3)"): three calls through MpiTransport.allreduce are calls 1, 2 and 3 on every rank.
    script = tmp_path / "count.py"
    script.write_text(COUNT_CALLS)
    p = subprocess.run([_mpiexec(), "-n", "2", sys.executable, str(script)],
                       capture_output=True, text=True, timeout=60, env=_env(),
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[3, 3]", p.stdout
