"""`run --expect` checks every output: a missing key, an extra key, a shape or a dtype that
differs is exit 1 naming it, never "all N outputs match" (issue 27).  The expected values are
the module's own outputs (`--out`): what is under test is the bookkeeping, not op semantics."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from xlaplug.cli import main
from xlaplug.runtime.expect_keys import key_problems

ROOT = Path(__file__).resolve().parents[1]

TWO_OUTPUTS = """HloModule two
ENTRY e {
  p0 = f32[3] parameter(0)
  p1 = f32[3] parameter(1)
  a = f32[3] add(p0, p1)
  n = s32[] constant(7)
  ROOT t = (f32[3], s32[]) tuple(a, n)
}
"""


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def case(tmp_path):
    """(module path, inputs npz, the module's own outputs as a dict)."""
    hlo = tmp_path / "two.hlo"
    hlo.write_text(TWO_OUTPUTS)
    np.savez(tmp_path / "in.npz", in0=np.arange(3, dtype=np.float32),
             in1=np.ones(3, np.float32))
    r = cli("run", hlo, "--inputs", tmp_path / "in.npz", "--out", tmp_path / "out.npz")
    assert r.exit_code == 0, r.output
    return hlo, tmp_path / "in.npz", dict(np.load(tmp_path / "out.npz"))


def _run_expect(tmp_path, case, **want):
    hlo, inputs, _ = case
    np.savez(tmp_path / "want.npz", **want)
    return cli("run", hlo, "--inputs", inputs, "--expect", tmp_path / "want.npz")


def _mismatches(r) -> list[str]:
    return [ln for ln in r.output.splitlines() if ln.startswith("MISMATCH")]


def test_all_keys_present_and_equal_match(tmp_path, case):
    r = _run_expect(tmp_path, case, **case[2])
    assert r.exit_code == 0, r.output
    assert "all 2 outputs match" in r.output


def test_keys_that_match_no_output_fail(tmp_path, case):
    r = _run_expect(tmp_path, case, result=case[2]["out0"], value=case[2]["out1"])
    assert r.exit_code == 1, r.output
    assert "outputs match" not in r.output
    lines = _mismatches(r)
    assert "MISMATCH out0: missing from the expected file" in lines
    assert "MISMATCH out1: missing from the expected file" in lines
    assert any(ln.startswith("MISMATCH result: in the expected file but not an output key")
               for ln in lines), lines


def test_only_some_keys_fail_naming_the_missing_one(tmp_path, case):
    r = _run_expect(tmp_path, case, out0=case[2]["out0"])
    assert r.exit_code == 1
    assert _mismatches(r) == ["MISMATCH out1: missing from the expected file"]


def test_an_extra_output_key_fails(tmp_path, case):
    r = _run_expect(tmp_path, case, **case[2], out2=np.zeros(3, np.float32))
    assert r.exit_code == 1
    assert _mismatches(r) == ["MISMATCH out2: in the expected file but no output: the "
                              "module has 2 outputs (out0, out1)"]


def test_input_keys_beside_the_outputs_are_no_extra(tmp_path, case):
    r = _run_expect(tmp_path, case, **case[2], in0=np.arange(3, dtype=np.float32),
                    in1=np.ones(3, np.float32))
    assert r.exit_code == 0, r.output


def test_a_dtype_that_differs_fails(tmp_path, case):
    want = dict(case[2], out0=case[2]["out0"].astype(np.float64))  # same values, f64
    r = _run_expect(tmp_path, case, **want)
    assert r.exit_code == 1
    assert _mismatches(r) == ["MISMATCH out0: dtype f32 != expected f64"]


def test_a_shape_that_differs_fails(tmp_path, case):
    want = dict(case[2], out1=np.array([7], np.int32))
    r = _run_expect(tmp_path, case, **want)
    assert r.exit_code == 1
    assert _mismatches(r) == ["MISMATCH out1: shape () != expected (1,)"]


def test_multi_device_run_checks_the_keys_once(tmp_path, case):
    hlo, inputs, outs = case
    np.savez(tmp_path / "want.npz", out0=outs["out0"])  # out1 missing, for both devices
    r = cli("run", hlo, "--replicas", 2, "--inputs", inputs, "--expect",
            tmp_path / "want.npz")
    assert r.exit_code == 1, r.output
    assert _mismatches(r) == ["MISMATCH out1: missing from the expected file"]
    assert "match" not in r.output.replace("MISMATCH", "")


def test_cli_subprocess_exit_code_and_message(tmp_path, case):
    hlo, inputs, outs = case
    np.savez(tmp_path / "want.npz", out1=outs["out1"])
    p = subprocess.run([sys.executable, "-m", "xlaplug.cli", "run", str(hlo), "--inputs",
                        str(inputs), "--expect", str(tmp_path / "want.npz")],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 1
    assert p.stderr == "MISMATCH out0: missing from the expected file\n"
    assert "match" not in p.stdout


def test_key_problems_names_long_output_lists_briefly():
    (key, msg), = key_problems(9, {f"out{k}": 0 for k in range(10)})
    assert key == "out9" and msg.endswith("the module has 9 outputs (out0, out1, out2, out3, "
                                          "..., out8)")
    assert key_problems(1, {"out0": 0, "in0": 0, "in12": 0}) == []
    assert [k for k, _ in key_problems(1, {"out0": 0, "out01": 0})] == ["out01"]
