"""The state of rng ops across repeated runs of one executable, with XLA as the oracle.

XLA keeps rng-get-and-update-state's state in the executable (XLA:CPU's
RngGetAndUpdateStateThunk), and expands `rng` into arithmetic on it: every execution of one
executable continues where the last left off, while rng-bit-generator (its state an operand)
draws the same bits for the same key.  xlaplug does the same for `--repeat N`, repeated API
calls and devices in one process; a new executable starts over.  rng-get-and-update-state
and rng-bit-generator are compared bit for bit; `rng`'s values differ from XLA's by design
(backends/cpu/rng_draws.py's counter-based stream), so there the oracle is whether a run draws
what the one before it drew.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

import xlaplug

pytest.importorskip("jax")

_BODY = """
  lo = f32[] constant(0)
  hi = f32[] constant(1)
  r = f32[8] rng(lo, hi), distribution=rng_uniform
  st = u64[2] rng-get-and-update-state(), delta=7
  k = u64[2] parameter(0)
  g = (u64[2], u32[4]) rng-bit-generator(k), algorithm=rng_philox
  b = u32[4] get-tuple-element(g), index=1
  ROOT t = (f32[8], u64[2], u32[4]) tuple(r, st, b)
}
"""
ONE = "HloModule rng_state\n\nENTRY main {" + _BODY
TWO = "HloModule rng_state2, replica_count=2\n\nENTRY main {" + _BODY
KEY = np.array([1, 2], np.uint64)
RUNS = 3


def _xla_runs(text: str, per_device: list[list[np.ndarray]], replicas: int = 1) -> list:
    """[run][device][leaf]: XLA:CPU running one compiled executable RUNS times."""
    from xlaplug.xla.xla_executables import run_on_xla_cpu
    runs: list = []
    run_on_xla_cpu(text, per_device, replicas, repeat=RUNS, what="test", runs=runs)
    return runs


def _check(got: list, want: list) -> None:
    """got / want: [run][leaf] of one device.  rng-get-and-update-state and
    rng-bit-generator equal XLA's in every run; rng's draws change from run to run where
    XLA's do (and stay where XLA's stay)."""
    assert len(got) == len(want) == RUNS
    for k in range(RUNS):
        np.testing.assert_array_equal(got[k][1], want[k][1], err_msg=f"state, run {k}")
        np.testing.assert_array_equal(got[k][2], want[k][2], err_msg=f"bits, run {k}")
        if k:
            xla_same = np.array_equal(want[k][0], want[k - 1][0])
            ours_same = np.array_equal(got[k][0], got[k - 1][0])
            assert ours_same == xla_same, f"rng draws of run {k} vs run {k - 1}"
        assert got[k][0].min() >= 0 and got[k][0].max() < 1


@pytest.fixture(scope="module")
def xla_one():
    return [run[0] for run in _xla_runs(ONE, [[KEY]])]


def test_xla_advances_rng_between_executions(xla_one):
    """What the oracle says (so the checks below compare against a behaviour, not a guess)."""
    states = [int(run[1][0]) for run in xla_one]
    assert states == [0x7012395 + 7 * k for k in range(RUNS)]
    assert not np.array_equal(xla_one[0][0], xla_one[1][0])
    np.testing.assert_array_equal(xla_one[0][2], xla_one[1][2])


def test_repeated_api_calls_continue_the_state(xla_one):
    exe = xlaplug.compile(ONE)
    _check([list(exe(KEY)) for _ in range(RUNS)], xla_one)
    # A freshly compiled executable starts over, as a fresh XLA executable does.
    again = xlaplug.compile(ONE)
    _check([list(again(KEY)) for _ in range(RUNS)], xla_one)


def test_repeat_n_is_n_executions(xla_one):
    exe = xlaplug.compile(ONE)
    res = exe.run(KEY, repeat=RUNS)
    np.testing.assert_array_equal(res.outputs[1], xla_one[-1][1])  # the last run's state
    # The next call continues after the RUNS runs of --repeat.
    nxt = exe.run(KEY)
    assert int(nxt.outputs[1][0]) == 0x7012395 + 7 * RUNS
    # Other executor settings (interpret) run the same executable: the state is shared.
    after = exe.run(KEY, interpret=True)
    assert int(after.outputs[1][0]) == 0x7012395 + 7 * (RUNS + 1)


def test_cli_repeat_prints_the_last_runs_state(tmp_path, xla_one):
    from xlaplug.cli.main import main
    path = tmp_path / "m.hlo"
    path.write_text(ONE)
    np.savez(tmp_path / "in.npz", in0=KEY)
    outs = []
    for repeat in (1, RUNS):
        out = tmp_path / f"out{repeat}.npz"
        r = CliRunner().invoke(main, ["run", str(path), "--inputs", str(tmp_path / "in.npz"),
                                      "--repeat", str(repeat), "--out", str(out)])
        assert r.exit_code == 0, r.output
        outs.append(np.load(out))
    np.testing.assert_array_equal(outs[0]["out1"], xla_one[0][1])
    np.testing.assert_array_equal(outs[1]["out1"], xla_one[-1][1])
    np.testing.assert_array_equal(outs[1]["out2"], xla_one[-1][2])


_TWO_DEVICES = """
import json, os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
import numpy as np
from xlaplug.xla.xla_executables import run_on_xla_cpu
runs = []
key = np.array([1, 2], np.uint64)
run_on_xla_cpu(sys.argv[1], [[key], [key]], 2, repeat=int(sys.argv[2]), what="test", runs=runs)
print(json.dumps([[[leaf.tolist() for leaf in dev] for dev in run] for run in runs]))
"""


def test_devices_in_one_process_keep_their_state_across_calls():
    """On two devices, each execution advances the state, in one call's repeats and across
    calls, as XLA's executable on two host devices does (in a subprocess: the host device
    count is fixed when jax starts).  XLA:CPU keeps one state for all the devices of an
    executable (one RngGetAndUpdateStateThunk), which the devices advance in whatever order
    their threads reach it (measured: run 0 gave devices 0, 1 the offsets 7, 0 or 0, 7);
    xlaplug keeps one per device, so a run is reproducible and an MPI rank draws what the
    same device draws in one process.  Compared: the values of each run advance past the
    last run's in both, and each xlaplug device's sequence is the one-device sequence."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    p = subprocess.run([sys.executable, "-c", _TWO_DEVICES, TWO, str(RUNS)],
                       capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr
    xla = json.loads(p.stdout)  # [run][device][leaf]
    xla_states = [sorted(dev[1][0] - 0x7012395 for dev in run) for run in xla]
    assert xla_states == [[14 * k, 14 * k + 7] for k in range(RUNS)]  # shared, advancing
    exe = xlaplug.compile(TWO)
    got = [exe.run(KEY).per_device for _ in range(RUNS)]
    for d in range(2):
        mine = [run[d] for run in got]
        assert [int(run[1][0]) - 0x7012395 for run in mine] == [7 * k for k in range(RUNS)]
        for k in range(RUNS):
            np.testing.assert_array_equal(mine[k][2], np.asarray(xla[k][d][2], np.uint32))
            if k:  # XLA's rng draws change between executions on every device: ours too
                assert not np.array_equal(xla[k][d][0], xla[k - 1][d][0])
                assert not np.array_equal(mine[k][0], mine[k - 1][0])
    # --repeat within one call, then one more call: the state counts every execution.
    exe = xlaplug.compile(TWO)
    res = exe.run(KEY, repeat=RUNS - 1)
    assert [int(dev[1][0]) for dev in res.per_device] == [0x7012395 + 7 * (RUNS - 2)] * 2
    res = exe.run(KEY)
    assert [int(dev[1][0]) for dev in res.per_device] == [0x7012395 + 7 * (RUNS - 1)] * 2
