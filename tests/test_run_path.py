"""One run path (issue 21): the CLI, `exe(*arrays)` and MPI ranks go through
`Executable.run`, so an option means the same everywhere -- `--repeat` under mpiexec, the
run's device count in decompositions, Ctrl-C in compiled loops and on many devices, and the
Python API under mpiexec taking part in the collectives."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import xlaplug
from xlaplug.runtime.options import RunError, RunOptions

ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = Path(sys.executable).with_name("mpiexec")

# A loop that never ends: compiled (a counted body XLA's rules call a while loop) after 32
# interpreted iterations, it runs inside one numba call.
FOREVER = """HloModule forever{header}
cond {{
  s = (s32[], f32[64]) parameter(0)
  ROOT t = pred[] constant(true)
}}
body {{
  s = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[64] get-tuple-element(s), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  y = f32[64] sine(x)
  ROOT r = (s32[], f32[64]) tuple(j, y)
}}
ENTRY e {{
  x = f32[64] parameter(0)
  z = s32[] constant(0)
  s = (s32[], f32[64]) tuple(z, x)
  w = (s32[], f32[64]) while(s), condition=cond, body=body
  ROOT o = f32[64] get-tuple-element(w), index=1
}}
"""

ALLREDUCE2 = """HloModule ar, replica_count=2
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
ENTRY e {
  x = f32[] parameter(0)
  ROOT r = f32[] all-reduce(x), replica_groups={{0,1}}, to_apply=add
}
"""


_DEFAULT_SIGINT_THEN_EXEC = ("import os, signal, sys\n"
                             "signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
                             "os.execv(sys.argv[1], sys.argv[1:])\n")


def _interrupt_after(tmp_path, header: str, wait_s: float):
    path = tmp_path / "forever.hlo"
    path.write_text(FOREVER.format(header=header))
    # SIGINT as at a terminal: a suite started in the background by a shell without job
    # control (`pytest &`) ignores SIGINT, every child inherits that, and Python keeps an
    # ignored SIGINT ignored (as `xlaplug run` must: that is how nohup works).  A launcher
    # restores it and execs xlaplug (the same process): a preexec_fn would make subprocess
    # fork() the whole multithreaded worker, which jax warns may deadlock.
    p = subprocess.Popen([sys.executable, "-S", "-I", "-c", _DEFAULT_SIGINT_THEN_EXEC,
                          sys.executable, "-m", "xlaplug", "run", str(path)], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(wait_s)
    assert p.poll() is None, p.communicate()
    t0 = time.perf_counter()
    p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # say what the child made of the signal, then end it
        state = _signal_state(p.pid)
        p.kill()
        out, err = p.communicate()
        pytest.fail(f"no end 30 s after SIGINT; the child's {state}; stderr: {err[-1500:]}")
    return p.returncode, time.perf_counter() - t0, err


def _signal_state(pid: int) -> str:
    """The process's signal masks and what each of its threads waits in, from /proc."""
    try:
        with open(f"/proc/{pid}/status") as f:
            masks = [ln.strip() for ln in f if ln.startswith(("SigBlk", "SigIgn", "SigCgt"))]
        waits = []
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/wchan") as f:
                waits.append(f.read())
        return f"{masks}, threads waiting in {sorted(waits)}"
    except OSError as e:
        return f"state unreadable ({e})"


@pytest.mark.slow
@pytest.mark.parametrize("header", ["", ", replica_count=4"], ids=["compiled-loop", "4-devices"])
def test_ctrl_c_ends_a_run_within_a_second(tmp_path, header):
    code, waited, err = _interrupt_after(tmp_path, header, 6.0)
    assert code == 130, err
    assert err.strip().splitlines()[-1] == "interrupted"
    assert waited < 1.5, waited


def test_run_options_are_checked_and_named():
    with pytest.raises(RunError, match="repeat: must be 1 or more"):
        RunOptions(repeat=0)
    with pytest.raises(RunError, match="unknown run option 'repeats'"):
        RunOptions.of(repeats=2)
    assert RunOptions.of(RunOptions(seed=3), repeat=2) == RunOptions(seed=3, repeat=2)


def test_repeat_through_the_api_reports_every_run():
    exe = xlaplug.compile(str(ROOT / "examples" / "mlp.hlo"))
    res = exe.run(repeat=3, seed=1)
    assert len(res.run_times) == 3 and res.timings["run_s"] == sorted(res.run_times)[1]
    assert res.grid.count == 1 and res.transport == "local"


def test_the_runs_device_count_reaches_the_decompositions():
    """--replicas 4 on a header-less module: the Horovod decomposition averages over the 4
    devices of the run, as the kernel does."""
    text = (ROOT / "examples" / "horovod_allreduce4.hlo").read_text().replace(
        ", replica_count=4", "")
    x = np.arange(4 * 1024, dtype=np.float32).reshape(4, 1024)
    w = np.ones(1024, np.float32)
    outs = [xlaplug.compile(text, prefer=prefer, replicas=4)(w, x)[0]
            for prefer in ("kernel", "decomposition")]
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-6)
    np.testing.assert_allclose(outs[0][0], w - 0.1 * x.mean(axis=0), rtol=1e-6)


def _mpi(n: int, args: list[str], cwd, timeout=180):
    if not MPIEXEC.exists():
        pytest.skip("no mpiexec next to python: pip install 'xlaplug[mpi]'")
    return subprocess.run([str(MPIEXEC), "-n", str(n), sys.executable, *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.slow
def test_repeat_under_mpi_runs_every_repeat(tmp_path):
    path = tmp_path / "ar.hlo"
    path.write_text(ALLREDUCE2)
    r = _mpi(2, ["-m", "xlaplug", "run", str(path), "--repeat", "4", "--json"], tmp_path)
    assert r.returncode == 0, r.stderr
    obj = json.loads(r.stdout)
    assert obj["repeat"] == 4 and len(obj["run_times"]) == 4
    assert obj["timings"]["run_s"] == pytest.approx(float(np.median(obj["run_times"])))
    assert obj["transport"] == "mpi"


@pytest.mark.slow
def test_the_python_api_under_mpiexec_runs_this_ranks_device(tmp_path):
    (tmp_path / "ar.hlo").write_text(ALLREDUCE2)
    (tmp_path / "api.py").write_text(
        "import numpy as np, xlaplug\n"
        "from mpi4py import MPI\n"
        "rank = MPI.COMM_WORLD.Get_rank()\n"
        "exe = xlaplug.compile('ar.hlo')\n"
        "(y,) = exe(np.float32(rank + 1))\n"
        # one file per rank: two ranks printing to one pipe interleave their words
        "open(f'rank{rank}.txt', 'w').write(f'{float(y)} {y.shape}')\n")
    r = _mpi(2, ["api.py"], tmp_path)
    assert r.returncode == 0, r.stderr
    got = [(tmp_path / f"rank{k}.txt").read_text() for k in range(2)]
    assert got == ["3.0 ()", "3.0 ()"], r.stdout
