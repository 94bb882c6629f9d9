"""The command line: verbs, options, exit codes, and error output without tracebacks."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from xlaplug.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "mlp.hlo"

SIMPLE = """HloModule m
ENTRY e {
  p0 = f32[3]{0} parameter(0)
  p1 = f32[3]{0} parameter(1)
  ROOT a = f32[3]{0} add(p0, p1)
}
"""


def cli(*args, input=None):
    return CliRunner().invoke(main, [str(a) for a in args], input=input)


def xlaplug_proc(*args, input=None):
    """The real console entry point, as a user runs it (stderr, exit code, no traceback)."""
    return subprocess.run([sys.executable, "-m", "xlaplug.cli", *map(str, args)],
                          input=input, capture_output=True, text=True, cwd=ROOT)


@pytest.fixture
def simple(tmp_path):
    p = tmp_path / "simple.hlo"
    p.write_text(SIMPLE)
    return p


def test_compile_prints_hlo_plain_when_piped(simple):
    r = cli("compile", simple)
    assert r.exit_code == 0, r.output
    assert r.output.startswith("HloModule m")
    assert "\x1b[" not in r.output


def test_compile_stdin_and_passes_none():
    r = cli("compile", "-", "--passes", "none", input=SIMPLE)
    assert r.exit_code == 0
    assert "ROOT a = f32[3]{0} add(p0, p1)" in r.output


def test_compile_json(simple):
    r = cli("compile", simple, "--emit", "json")
    obj = json.loads(r.output)
    assert obj["module"] == "m" and obj["entry"] == "e"
    assert obj["opcode_counts"] == {"parameter": 2, "add": 1}
    assert [p["name"] for p in obj["passes"]] == ["sdy-shard-map", "custom-call-lowering",
                                                   "inline-calls", "tuple-simplify", "dce",
                                                   "loop-fusion"]


def test_compile_thunks_table(tmp_path):
    out = tmp_path / "t.txt"
    r = cli("compile", EXAMPLE, "--emit", "thunks", "-o", out)
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert text.splitlines()[0].split() == ["#", "thunk", "opcodes", "buffers", "shapes", "bytes"]
    assert "dot" in text and "peak" in text


def test_compile_output_file_and_dump_dir(tmp_path, simple):
    out = tmp_path / "o" / "out.hlo"
    r = cli("compile", simple, "-o", out, "--dump-dir", tmp_path / "dump")
    assert r.exit_code == 0
    assert out.read_text().startswith("HloModule m")
    assert sorted(p.name for p in (tmp_path / "dump").iterdir()) == [
        "00-input.hlo", "01-sdy-shard-map.hlo", "02-custom-call-lowering.hlo",
        "03-inline-calls.hlo", "04-tuple-simplify.hlo", "05-dce.hlo", "06-loop-fusion.hlo"]


@pytest.mark.parametrize("text,where,what", [
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT n = f32[2] nagate(p)\n}\n",
     ":4:19:", "unknown opcode 'nagate'"),
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT n = f32[3] negate(p)\n}\n",
     ":4:", "inferred shape f32[2] but declared f32[3]"),
    ("", ":1:1:", "empty"),
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n", ":", "end of file"),
])
def test_bad_input_exit_2_one_line_no_traceback(tmp_path, text, where, what):
    bad = tmp_path / "bad.hlo"
    bad.write_text(text)
    out = tmp_path / "never.hlo"
    r = xlaplug_proc("compile", bad, "-o", out)
    assert r.returncode == 2
    first = r.stderr.splitlines()[0]
    assert first.startswith(f"{bad}{where}") and " error: " in first and what in first, r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists()  # nothing half-written
    assert not list(tmp_path.glob(".never.hlo*"))


def test_missing_file_is_a_clear_error(tmp_path):
    r = xlaplug_proc("compile", tmp_path / "nope.hlo")
    assert r.returncode == 2 and "cannot read" in r.stderr and "Traceback" not in r.stderr


def test_unknown_pass_is_exit_2(simple):
    r = xlaplug_proc("compile", simple, "--passes", "dce,bogus")
    assert r.returncode == 2 and "unknown pass 'bogus'" in r.stderr


def test_pass_options(simple):
    """`--passes name{option=value}`: the option is the pass's dataclass field, typed."""
    r = cli("compile", simple, "--passes", "dce{remove_dead_computations=false},"
            "loop-fusion{min_elements=1}", "--emit", "json")
    assert r.exit_code == 0, r.output
    assert [p["name"] for p in json.loads(r.output)["passes"]] == ["dce", "loop-fusion"]
    chain = SIMPLE.replace("ROOT a = f32[3]{0} add(p0, p1)",
                           "a = f32[3]{0} add(p0, p1)\n  ROOT m = f32[3]{0} multiply(a, p1)")
    fused = cli("compile", "-", "--passes", "loop-fusion{min_elements=1}", input=chain)
    assert fused.exit_code == 0 and "kind=kLoop" in fused.output, fused.output
    assert "kind=kLoop" not in cli("compile", "-", "--passes", "loop-fusion", input=chain).output


@pytest.mark.parametrize("spec, message", [
    ("loop-fusion{min_elements=lots}",
     "error: pass 'loop-fusion': option 'min_elements' takes an integer, not 'lots'"),
    ("loop-fusion{threshold=1}",
     "error: pass 'loop-fusion' has no option 'threshold' (its options: min_elements)"),
])
def test_bad_pass_option_is_one_line_exit_2(simple, spec, message):
    r = xlaplug_proc("compile", simple, "--passes", spec)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == message + "\n"


# ---- run --------------------------------------------------------------------------------

def test_run_example_prints_table():
    r = cli("run", EXAMPLE)
    assert r.exit_code == 0, r.output
    assert "out0" in r.output and "f32" in r.output and "(4, 8)" in r.output


def test_run_inputs_out_expect_roundtrip(tmp_path, simple):
    x = np.arange(3, dtype=np.float32)
    y = np.ones(3, np.float32)
    np.savez(tmp_path / "in.npz", in0=x, in1=y)
    r = cli("run", simple, "--inputs", tmp_path / "in.npz", "--out", tmp_path / "out.npz")
    assert r.exit_code == 0, r.output
    got = np.load(tmp_path / "out.npz")["out0"]
    np.testing.assert_array_equal(got, x + y)  # our own plumbing, not op semantics
    # One npz holding inputs and expected outputs; a matching run exits 0 ...
    np.savez(tmp_path / "both.npz", in0=x, in1=y, out0=got)
    r = cli("run", simple, "--expect", tmp_path / "both.npz")
    assert r.exit_code == 0 and "match" in r.output
    # ... a mismatching one exits 1 and names the leaf, errors and first bad index.
    np.savez(tmp_path / "bad.npz", in0=x, in1=y, out0=got + np.float32([0, 0, 1]))
    r = xlaplug_proc("run", simple, "--expect", tmp_path / "bad.npz")
    assert r.returncode == 1
    assert "MISMATCH out0" in r.stderr and "(2,)" in r.stderr


def test_run_json_and_repeat(simple):
    r = cli("run", simple, "--json", "--repeat", "3", "--seed", "4")
    obj = json.loads(r.output)
    assert obj["repeat"] == 3 and set(obj["timings"]) == {"parse_s", "compile_s", "run_s"}
    assert obj["outputs"]["out0"]["shape"] == [3]


def test_run_input_dtype_converted_and_shape_checked(tmp_path, simple):
    np.savez(tmp_path / "f64.npz", in0=np.zeros(3), in1=np.zeros(3))
    assert cli("run", simple, "--inputs", tmp_path / "f64.npz").exit_code == 0
    np.savez(tmp_path / "bad.npz", in0=np.zeros(4, np.float32))
    r = xlaplug_proc("run", simple, "--inputs", tmp_path / "bad.npz")
    assert r.returncode == 2 and "parameter 'p0'" in r.stderr and "(4,)" in r.stderr


def test_run_memory_guard(simple, tmp_path):
    big = tmp_path / "big.hlo"
    big.write_text("HloModule m\nENTRY e {\n  c = f32[] constant(1)\n"
                   "  ROOT b = f32[1048576,1048576]{1,0} broadcast(c), dimensions={}\n}\n")
    r = xlaplug_proc("run", big)
    assert r.returncode == 2 and "refusing to run" in r.stderr
    r = xlaplug_proc("run", simple, "--max-memory", "8")
    assert r.returncode == 2 and "--max-memory" in r.stderr


def test_run_while_iteration_guard(tmp_path):
    loop = tmp_path / "loop.hlo"
    loop.write_text("""HloModule m
cond {
  p = s32[] parameter(0)
  ROOT t = pred[] constant(true)
}
body {
  p = s32[] parameter(0)
  one = s32[] constant(1)
  ROOT n = s32[] add(p, one)
}
ENTRY e {
  z = s32[] constant(0)
  ROOT w = s32[] while(z), condition=cond, body=body
}
""")
    r = xlaplug_proc("run", loop, "--max-while-iterations", "50")
    assert r.returncode == 2 and "exceeded --max-while-iterations=50" in r.stderr


def test_run_custom_call_without_plugin_names_target(tmp_path):
    f = tmp_path / "cc.hlo"
    f.write_text("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n"
                 "  ROOT c = f32[2] custom-call(p), custom_call_target=\"acme.swish\"\n}\n")
    r = xlaplug_proc("run", f)
    assert r.returncode == 2 and "acme.swish" in r.stderr and "Traceback" not in r.stderr


def test_cuda_without_gpu_is_exit_2(simple):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-m", "xlaplug.cli", "run", str(simple), "--device", "cuda"],
                       capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 2 and "--device cuda" in r.stderr and "Traceback" not in r.stderr
