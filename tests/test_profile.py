"""`xlaplug run --profile`: the profile's structure, and that its figures add up.

No time is asserted: only that the parts sum to the whole and that counts are right.
"""
import json
import math

import pytest
from click.testing import CliRunner

from xlaplug.runtime.profiler import Profiler
from xlaplug.cli.main import main
from xlaplug.hlo import parse_module
from xlaplug.runtime.runner import execute

# A while loop of 5 iterations (an interpreted body runs its thunks 5 times), then a dot.
LOOP = """HloModule m
cond {
  s = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  v = f32[8] get-tuple-element(s), index=1
  v2 = f32[8] multiply(v, v)
  ROOT t = (s32[], f32[8]) tuple(i2, v2)
}
ENTRY e {
  x = f32[8] parameter(0)
  m = f32[8,8] parameter(1)
  zero = s32[] constant(0)
  t0 = (s32[], f32[8]) tuple(zero, x)
  w = (s32[], f32[8]) while(t0), condition=cond, body=body
  r = f32[8] get-tuple-element(w), index=1
  ROOT d = f32[8] dot(m, r), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


def _profile(tmp_path, *extra):
    path = tmp_path / "loop.hlo"
    path.write_text(LOOP)
    res = CliRunner().invoke(main, ["run", str(path), "--profile", "--json", "--interpret",
                                    *extra])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)["profile"]


def test_profile_parts_sum_to_the_run(tmp_path):
    p = _profile(tmp_path, "--repeat", "3")
    assert p["runs"] == 2  # the first of 3 runs (one-time setup) is not profiled
    rows = p["thunks"]
    assert math.isclose(p["kernel_s"] + p["dispatch_s"], p["wall_s"], rel_tol=1e-9)
    assert math.isclose(sum(r["time_s"] for r in rows), p["wall_s"], rel_tol=1e-9)
    assert math.isclose(sum(r["share"] for r in rows), 1.0, rel_tol=1e-9)
    for r in rows:
        assert math.isclose(r["kernel_s"] + r["dispatch_s"], r["time_s"], rel_tol=1e-9)
        assert r["kernel_s"] >= 0 and r["dispatch_s"] >= 0
    times = [r["time_s"] for r in rows]
    assert times == sorted(times, reverse=True)


def test_profile_counts_calls_and_bytes(tmp_path):
    rows = {(r["computation"], r["instruction"]): r for r in _profile(tmp_path)["thunks"]}
    assert rows[("body", "v2")]["calls"] == 5      # once per iteration
    assert rows[("cond", "lt")]["calls"] == 6      # the last test ends the loop
    assert rows[("e", "w")]["calls"] == 1
    dot = rows[("e", "d")]
    assert (dot["bytes_in"], dot["bytes_out"]) == (8 * 8 * 4 + 8 * 4, 8 * 4)
    assert dot["bytes_moved"] == dot["bytes_in"] + dot["bytes_out"]
    assert rows[("e", "r")]["bytes_out"] == 0      # get-tuple-element aliases its operand
    assert {r["kind"] for r in rows.values()} >= {"parameter", "constant", "while", "kernel"}


def test_profile_table_fits_80_columns(tmp_path):
    path = tmp_path / "loop.hlo"
    path.write_text(LOOP)
    res = CliRunner().invoke(main, ["run", str(path), "--profile", "--interpret"])
    assert res.exit_code == 0, res.output
    table = res.output[res.output.index("share"):]
    lines = table.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert any(line.endswith("  while w") for line in lines)
    assert any(line.endswith("  body/multiply v2") for line in lines)
    assert "kernel calls, dispatch" in lines[-1]


def test_profiler_off_records_nothing_and_on_does():
    module = parse_module(LOOP)
    args = [[1.0] * 8, [[1.0] * 8] * 8]
    off = Profiler()
    execute(module, args, interpret=True)  # no profiler handed in
    assert off.stats == {} and off.runs == 0
    on = Profiler()
    execute(module, args, interpret=True, profiler=on, repeat=1)
    assert on.runs == 1 and len(on.stats) > 0


def test_a_run_that_compiles_is_left_out():
    """numba compiling during a run (a small fusion's ninth call) leaves that run out of the
    totals, which are put back as they were, and counts it; a run that compiles nothing
    is counted."""
    import numba
    from xlaplug.cli.profile_report import profile_json, profile_table
    module = parse_module(LOOP)
    prof = Profiler()
    execute(module, [[1.0] * 8, [[1.0] * 8] * 8], interpret=True, profiler=prof, repeat=2)
    before = {k: (s.calls, s.kernel_s, s.dispatch_s) for k, s in prof.stats.items()}
    assert prof.runs == 1 and prof.compiled_runs == 0
    with prof.run():
        for st in prof.stats.values():
            st.calls, st.kernel_s = st.calls + 1, st.kernel_s + 1.0
        numba.njit(lambda x: x + 1)(1)  # a new function: always compiled
    assert prof.runs == 1 and prof.compiled_runs == 1
    assert {k: (s.calls, s.kernel_s, s.dispatch_s) for k, s in prof.stats.items()} == before
    with prof.run():
        pass
    assert prof.runs == 2 and prof.compiled_runs == 1
    p = profile_json(prof, "e")
    assert p["compiled_runs"] == 1
    assert "left out: 1 run(s) during which numba compiled" in profile_table(p)


def test_profile_on_many_devices_is_a_usage_error(tmp_path):
    path = tmp_path / "r.hlo"
    path.write_text(LOOP.replace("HloModule m", "HloModule m, replica_count=2"))
    res = CliRunner().invoke(main, ["run", str(path), "--profile"])
    assert res.exit_code == 2
    assert "--profile" in res.output and "Traceback" not in res.output


@pytest.mark.cuda
def test_profile_on_cuda_adds_up(tmp_path):
    """CUDA kernels are waited for one by one (numba's simulator here unless
    NUMBA_ENABLE_CUDASIM=0): the parts still sum to the run."""
    p = _profile(tmp_path, "--device", "cuda")
    assert p["runs"] == 1
    assert math.isclose(sum(r["time_s"] for r in p["thunks"]), p["wall_s"], rel_tol=1e-9)
    rows = {(r["computation"], r["instruction"]): r for r in p["thunks"]}
    assert rows[("body", "v2")]["calls"] == 5
