"""`xlaplug run --trace` (issue 24, item 6): the run as a Chrome / Perfetto trace -- a
track per device and per MPI rank, a slice per kernel call nested in its run's slice, bytes
and a collective's peers in the slice's args, parse and compile phases on the host's
track -- and the progress bars of long work, drawn on a terminal only."""
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from rich.console import Console

import xlaplug
from xlaplug.cli.main import main
from xlaplug.cli.progress import progress_bar
from xlaplug.runtime.options import RunError
from xlaplug.runtime.timeline import HOST_TID

from test_profile import LOOP as PROFILE_LOOP
from test_run_path import ALLREDUCE2  # two replicas, one scalar all-reduce

ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = Path(sys.executable).with_name("mpiexec")

# test_profile's while loop (its body's kernels run inside the while's slice), then a dot,
# here with 3 iterations.
LOOP = PROFILE_LOOP.replace("n = s32[] constant(5)", "n = s32[] constant(3)")
assert LOOP != PROFILE_LOOP

# Four replicas: an all-reduce in two groups and a ring of collective-permutes.
GROUPS4 = """HloModule g, replica_count=4
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
ENTRY e {
  x = f32[16] parameter(0)
  s = f32[16] all-reduce(x), replica_groups={{0,1},{2,3}}, to_apply=add
  ROOT p = f32[16] collective-permute(s), source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
}
"""

def _run_traced(tmp_path, text: str, *extra) -> dict:
    path = tmp_path / "m.hlo"
    path.write_text(text)
    out = tmp_path / "trace.json"
    res = CliRunner().invoke(main, ["run", str(path), "--trace", str(out), *extra])
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text())


def _slices(trace: dict, **where) -> list[dict]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X"
            and all(e.get(k) == v for k, v in where.items())]


def _names(trace: dict, kind: str) -> dict:
    """{(pid, tid) or pid: name} of the trace's thread_name / process_name events."""
    return {(e["pid"], e["tid"]) if kind == "thread_name" else e["pid"]: e["args"]["name"]
            for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == kind}


def _inside(inner: dict, outer: dict) -> bool:
    eps = 1e-6  # float rounding of microseconds with three decimals
    return (outer["ts"] - eps <= inner["ts"] and
            inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + eps)


def test_one_device_trace_has_a_slice_per_kernel_call_inside_its_run(tmp_path):
    trace = _run_traced(tmp_path, LOOP, "--interpret", "--repeat", "2")
    assert trace["displayTimeUnit"] == "ms" and trace["otherData"]["module"] == "m"
    assert _names(trace, "thread_name")[(0, 0)] == "device 0"
    assert "m" in _names(trace, "process_name")[0]
    runs = _slices(trace, tid=0, cat="run")
    assert [r["name"] for r in runs] == ["run 0", "run 1"]
    device = [e for e in _slices(trace, tid=0) if e["cat"] != "run"]
    # Every kernel call of each run: the entry's kernels once, cond 4 times, body 3 times.
    exe = xlaplug.compile(str(tmp_path / "m.hlo"))
    entry = [t.ins.name for t in exe.thunks.thunks if t.ins.opcode != "parameter"]
    for run in runs:
        mine = [e for e in device if _inside(e, run)]
        names = [e["args"]["instruction"] for e in mine if e["args"]["computation"] == "e"]
        assert names == entry
        assert sum(e["args"]["instruction"] == "lt" for e in mine) == 4
        assert sum(e["args"]["instruction"] == "v2" for e in mine) == 3
        w = next(e for e in mine if e["name"] == "w")
        assert all(_inside(e, w) for e in mine if e["args"]["computation"] != "e")
    assert all(e["dur"] >= 0 for e in device)
    dot = next(e for e in device if e["name"] == "d")
    assert dot["cat"] == "dot" and dot["args"]["opcode"] == "dot"
    assert (dot["args"]["bytes_in"], dot["args"]["bytes_out"]) == (8 * 8 * 4 + 8 * 4, 8 * 4)
    assert dot["args"]["bytes_moved"] == 8 * 8 * 4 + 8 * 4 + 8 * 4
    assert "peers" not in dot["args"]
    phases = _slices(trace, tid=HOST_TID)
    assert [p["name"] for p in phases] == ["parse", "passes", "prepare"]
    assert phases[-1]["ts"] + phases[-1]["dur"] <= runs[0]["ts"] + 1e-6
    assert min(e["ts"] for e in _slices(trace)) == 0


def test_four_replicas_in_one_process_are_four_tracks_with_their_peers(tmp_path):
    trace = _run_traced(tmp_path, (ROOT / "examples" / "horovod_allreduce4.hlo").read_text())
    threads = _names(trace, "thread_name")
    assert [threads[(0, d)] for d in range(4)] == [
        f"device {d} (replica {d}, partition 0)" for d in range(4)]
    for d in range(4):
        (mean,) = _slices(trace, tid=d, name="mean")
        assert mean["args"]["target"] == "HorovodAllreduce"
        assert mean["args"]["peers"] == [0, 1, 2, 3]
        assert _inside(mean, _slices(trace, tid=d, cat="run")[0])

    trace = _run_traced(tmp_path, GROUPS4)
    for d in range(4):
        (s,) = _slices(trace, tid=d, name="s")
        assert s["args"]["peers"] == ([0, 1] if d < 2 else [2, 3])
        assert s["args"]["replica_groups"] == [[0, 1], [2, 3]]
        assert s["args"]["bytes_moved"] == 2 * 16 * 4
        (p,) = _slices(trace, tid=d, name="p")
        assert p["args"]["sends_to"] == [(d + 1) % 4]
        assert p["args"]["receives_from"] == [(d - 1) % 4]


def test_trace_into_a_missing_directory_is_exit_2_and_creates_nothing(tmp_path):
    path = tmp_path / "m.hlo"
    path.write_text(LOOP)
    target = tmp_path / "no" / "such" / "t.json"
    res = CliRunner().invoke(main, ["run", str(path), "--trace", str(target)])
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [
        f"error: --trace: cannot write '{target}': the directory '{target.parent}' does "
        f"not exist"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.hlo"]


def test_the_python_api_returns_the_trace_on_request_only():
    exe = xlaplug.compile(LOOP)
    x, m = np.ones(8, np.float32), np.eye(8, dtype=np.float32)
    assert exe.run(x, m).trace is None
    res = exe.run(x, m, trace=True)
    json.dumps(res.trace)  # ready to write as it is
    assert {e["name"] for e in _slices(res.trace, tid=0)} >= {"w", "d", "run 0"}
    assert res.profile is None  # a trace is not a profile
    # Both: the profile leaves out the first run (one-time setup), the trace shows it.
    both = exe.run(x, m, trace=True, profile=True, repeat=3)
    assert both.profile.runs == 2
    assert [e["name"] for e in _slices(both.trace, cat="run")] == ["run 0", "run 1", "run 2"]
    calls = {s.instruction: s.calls for s in both.profile.stats.values()}
    assert calls["d"] == 2 and calls["v2"] == 6
    with pytest.raises(RunError, match="trace"):
        exe.run(x, m, trace=True, engine="xla")


@pytest.mark.slow
def test_mpi_ranks_write_one_file_with_a_track_per_rank(tmp_path):
    if not MPIEXEC.exists():
        pytest.skip("no mpiexec next to python: pip install 'xlaplug[mpi]'")
    (tmp_path / "ar.hlo").write_text(ALLREDUCE2)
    r = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, "-m", "xlaplug", "run",
                        "ar.hlo", "--trace", "t.json", "--json"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=180,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ar.hlo", "t.json"]
    trace = json.loads((tmp_path / "t.json").read_text())
    assert _names(trace, "process_name") == {0: "rank 0", 1: "rank 1"}
    assert trace["otherData"]["mpi_ranks"] == 2
    for rank in (0, 1):
        (ar,) = _slices(trace, pid=rank, tid=rank, name="r")
        assert ar["args"]["peers"] == [0, 1]
        assert [p["name"] for p in _slices(trace, pid=rank, tid=HOST_TID)] == [
            "parse", "passes", "prepare"]


def test_progress_is_drawn_on_a_terminal_only():
    def work(progress):
        for k in range(1, 4):
            progress(k, 3)

    terminal = io.StringIO()
    with progress_bar("checking plugins", console=Console(file=terminal, force_terminal=True,
                                                          width=80)) as progress:
        work(progress)
    assert "checking plugins" in terminal.getvalue()
    piped = io.StringIO()
    with progress_bar("checking plugins", console=Console(file=piped)) as progress:
        work(progress)
    assert piped.getvalue() == ""
    # A delay not yet reached: quick work draws nothing, even on a terminal.
    quick = io.StringIO()
    with progress_bar("run", console=Console(file=quick, force_terminal=True),
                      delay_s=60) as progress:
        work(progress)
    assert quick.getvalue() == ""


def test_long_work_reports_progress_to_its_callback(tmp_path):
    exe = xlaplug.compile(LOOP)
    seen = []
    exe.run(np.ones(8, np.float32), np.eye(8, dtype=np.float32), repeat=3,
            progress=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 3), (2, 3), (3, 3)]
    exe4 = xlaplug.compile(GROUPS4)
    seen.clear()
    exe4.run(np.ones(16, np.float32), repeat=2, progress=lambda *a: seen.append(a))
    assert seen == [(1, 2), (2, 2)]

    from xlaplug.runtime.check import check_plugins
    from xlaplug.runtime.conformance import run_cases
    session = xlaplug.load_session()
    seen.clear()
    check_plugins(session, ("HorovodAllreduce", "HorovodBroadcast"), trials=1,
                  progress=lambda *a: seen.append(a))
    assert seen == [(1, 2), (2, 2)]
    cases = []
    for k in range(2):
        cases.append(tmp_path / f"c{k}.hlo")
        cases[-1].write_text("HloModule c\nENTRY e {\n  ROOT k = f32[] constant(1)\n}\n")
    seen.clear()
    results = run_cases(cases, progress=lambda *a: seen.append(a))
    assert [r.status for r in results] == ["pass", "pass"] and seen == [(1, 2), (2, 2)]

