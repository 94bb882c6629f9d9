"""The command line: verbs, options, exit codes, and error output without tracebacks."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from xlaplug.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "mlp.hlo"

SIMPLE = """HloModule m
ENTRY e {
  p0 = f32[3]{0} parameter(0)
  p1 = f32[3]{0} parameter(1)
  ROOT a = f32[3]{0} add(p0, p1)
}
"""


SIMPLE_CANONICAL = """HloModule m

ENTRY e {
  p0 = f32[3]{0} parameter(0)
  p1 = f32[3]{0} parameter(1)
  ROOT a = f32[3]{0} add(p0, p1)
}
"""


def cli(*args, input=None):
    return CliRunner().invoke(main, [str(a) for a in args], input=input)


def without_timings(text: str) -> str:
    """The run summary line with its (never deterministic) times replaced by `T`."""
    return re.sub(r"\b\d+(\.\d+)? ms\b", "T ms", text)


@pytest.fixture
def wide_console(monkeypatch):
    """rich lays tables out for $COLUMNS (80 when unset): fix it, so a table is one layout."""
    monkeypatch.setenv("COLUMNS", "100")


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
    assert r.output == SIMPLE_CANONICAL  # no colour codes either


def test_compile_stdin_and_passes_none():
    r = cli("compile", "-", "--passes", "none", input=SIMPLE)
    assert r.exit_code == 0
    assert r.output == SIMPLE_CANONICAL


def test_compile_json(simple):
    r = cli("compile", simple, "--emit", "json")
    assert r.exit_code == 0, r.output
    param = {"kind": "parameter", "opcode": "parameter", "inputs": [], "buffer": None,
             "shape": "f32[3]{0}", "bytes": 0, "frees": [], "nested": []}
    assert json.loads(r.output) == {
        "module": "m", "entry": "e", "attributes": {}, "instruction_count": 3,
        "opcode_counts": {"parameter": 2, "add": 1},
        "computations": [{"name": "e", "is_entry": True, "parameters": ["f32[3]{0}"] * 2,
                          "result": "f32[3]{0}", "instructions": 3}],
        "passes": [{"name": n, "changed": False} for n in
                   ["sdy-shard-map", "custom-call-lowering", "inline-calls", "tuple-simplify",
                    "dce", "excess-precision", "reduce-fusion", "loop-fusion",
                    "dot-epilogue", "small-regions"]],
        "thunks": {"computation": "e", "buffers": 1, "buffer_bytes": [12], "peak_bytes": 12,
                   "total_peak_bytes": 12, "thunks": [
                       {"index": 0, **param, "instruction": "p0"},
                       {"index": 1, **param, "instruction": "p1"},
                       {"index": 2, "kind": "kernel", "opcode": "add", "instruction": "a",
                        "inputs": [0, 1], "buffer": 0, "shape": "f32[3]{0}", "bytes": 12,
                        "frees": [0, 1], "nested": []}]}}


def test_compile_thunks_table(tmp_path, simple):
    """The plain table a file gets (tests/golden/thunks.txt has more cases)."""
    out = tmp_path / "t.txt"
    r = cli("compile", simple, "--emit", "thunks", "-o", out)
    assert r.exit_code == 0 and r.output == "", r.output
    assert out.read_text() == (
        "#  thunk      opcodes         buffers       shapes     bytes\n"
        "0  parameter  parameter (p0)  alias         f32[3]{0}  -\n"
        "1  parameter  parameter (p1)  alias         f32[3]{0}  -\n"
        "2  kernel     add (a)         %0, %1 -> b0  f32[3]{0}  12 B\n"
        "3 thunks in e; 1 buffer, peak 12 B (with nested sequences 12 B)\n")


def test_compile_thunks_of_the_example_name_every_instruction(tmp_path):
    out = tmp_path / "t.txt"
    r = cli("compile", EXAMPLE, "--emit", "thunks", "-o", out)
    assert r.exit_code == 0, r.output
    lines = out.read_text().splitlines()
    assert lines[0].split() == ["#", "thunk", "opcodes", "buffers", "shapes", "bytes"]
    # (the GELU's multiply-adds are fused, as XLA contracts them into FMAs at any size, and
    # the first product with them: dot-epilogue; then the runs of small-array instructions
    # between the products are small regions, one thunk each; the scalar constants a region
    # copies into its body leave the entry when nothing else reads them)
    assert lines[-1] == "8 thunks in main.3; 2 buffers, peak 640 B (with nested sequences " \
        "2.6 KiB)"
    firsts = [ln.split()[0] for ln in lines[1:-1]]
    assert [f for f in firsts if "." not in f] == [str(i) for i in range(8)]
    assert all(f.split(".")[0] in firsts for f in firsts)  # a fusion's body under its row


def test_compile_output_file_and_dump_dir(tmp_path, simple):
    out = tmp_path / "o" / "out.hlo"
    (tmp_path / "o").mkdir()  # -o creates no folder (tests/test_output_files.py)
    r = cli("compile", simple, "-o", out, "--dump-dir", tmp_path / "dump")
    assert r.exit_code == 0
    assert out.read_text().startswith("HloModule m")
    assert sorted(p.name for p in (tmp_path / "dump").iterdir()) == [
        "00-input.hlo", "01-sdy-shard-map.hlo", "02-custom-call-lowering.hlo",
        "03-inline-calls.hlo", "04-tuple-simplify.hlo", "05-dce.hlo",
        "06-excess-precision.hlo", "07-reduce-fusion.hlo", "08-loop-fusion.hlo",
        "09-dot-epilogue.hlo", "10-small-regions.hlo"]


@pytest.mark.parametrize("text,message", [
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT n = f32[2] nagate(p)\n}\n",
     ":4:19: error: unknown opcode 'nagate' (did you mean 'negate'?)\n"
     "  ROOT n = f32[2] nagate(p)\n"
     "                  ^\n"),
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT n = f32[3] negate(p)\n}\n",
     ":4:8: error: instruction 'n' (negate): inferred shape f32[2] but declared f32[3]\n"
     "  ROOT n = f32[3] negate(p)\n"
     "       ^\n"),
    ("", ":1:1: error: empty module: no HloModule header and no computations\n\n^\n"),
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n",
     ":3:26: error: unexpected end of file: computation 'e' (line 2) is missing its closing "
     "'}'\n"
     "  p = f32[2] parameter(0)\n"
     "                         ^\n"),
], ids=["unknown-opcode", "shape-mismatch", "empty", "unclosed"])
def test_bad_input_exit_2_one_line_no_traceback(tmp_path, text, message):
    """The one-line error, then the source line and a caret under the column."""
    bad = tmp_path / "bad.hlo"
    bad.write_text(text)
    out = tmp_path / "never.hlo"
    r = xlaplug_proc("compile", bad, "-o", out)
    assert r.returncode == 2
    assert r.stdout == "" and r.stderr == f"{bad}{message}"
    assert not out.exists()  # nothing half-written
    assert not list(tmp_path.glob(".never.hlo*"))


def test_missing_file_is_a_clear_error(tmp_path):
    nope = tmp_path / "nope.hlo"
    r = xlaplug_proc("compile", nope)
    assert r.returncode == 2
    assert r.stderr == f"{nope}: error: cannot read '{nope}': No such file or directory\n"


def test_unknown_pass_is_exit_2(simple):
    r = xlaplug_proc("compile", simple, "--passes", "dce,bogus")
    assert r.returncode == 2
    assert r.stderr == ("error: unknown pass 'bogus' (known passes: "
                        "custom-call-lowering, dce, dot-epilogue, excess-precision, inline-calls, "
                        "loop-fusion, reduce-fusion, sdy-shard-map, small-regions, "
                        "tuple-simplify)\n")


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
     "error: pass 'loop-fusion' has no option 'threshold' (its options: min_elements, max_instructions)"),
])
def test_bad_pass_option_is_one_line_exit_2(simple, spec, message):
    r = xlaplug_proc("compile", simple, "--passes", spec)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == message + "\n"


# ---- run --------------------------------------------------------------------------------

def cells(line: str) -> list[str]:
    """A table row's cells (columns are set apart by two or more spaces)."""
    return re.split(r"\s{2,}", line.strip())


def test_run_example_prints_table(wide_console):
    """Random inputs from the default seed.  The layout is fixed; the values are those the
    Python API computes on the same inputs (the CLI is a layer over it): a dot's and a
    tanh's last bits depend on the host (its BLAS kernel, as XLA:CPU's own answer does), so
    no literal digits are pinned here.  SIMPLE_TABLE below pins a host-independent table."""
    import xlaplug
    r = cli("run", EXAMPLE)
    assert r.exit_code == 0, r.output
    out = xlaplug.compile(EXAMPLE).run(seed=0).outputs[0]
    lines = without_timings(r.output).splitlines()
    assert len(lines) == 5 and lines[0] == "outputs" and set(lines[2]) == {"─"}
    assert cells(lines[1]) == ["name", "dtype", "shape", "min", "max", "mean", "first values"]
    first = ", ".join(f"{x:.6g}" for x in out.ravel()[:3]) + ", ..."
    assert cells(lines[3]) == ["out0", "f32", "(4, 8)", f"{out.min():.6g}", f"{out.max():.6g}",
                               f"{out.mean():.6g}", first]
    assert lines[4] == "parse T ms, compile T ms, run T ms (median)"


SIMPLE_TABLE = """\
outputs
 name  dtype  shape  min  max  mean  first values 
──────────────────────────────────────────────────
 out0  f32    (3,)     1    3     2  1, 2, 3      
parse T ms, compile T ms, run T ms (median)
"""


def test_run_inputs_out_expect_roundtrip(tmp_path, simple, wide_console):
    x = np.arange(3, dtype=np.float32)
    y = np.ones(3, np.float32)
    np.savez(tmp_path / "in.npz", in0=x, in1=y)
    r = cli("run", simple, "--inputs", tmp_path / "in.npz", "--out", tmp_path / "out.npz")
    assert r.exit_code == 0, r.output
    assert without_timings(r.output) == SIMPLE_TABLE
    got = np.load(tmp_path / "out.npz")["out0"]
    np.testing.assert_array_equal(got, x + y)  # our own plumbing, not op semantics
    # One npz holding inputs and expected outputs; a matching run exits 0 ...
    np.savez(tmp_path / "both.npz", in0=x, in1=y, out0=got)
    r = cli("run", simple, "--expect", tmp_path / "both.npz")
    assert r.exit_code == 0
    assert without_timings(r.output) == \
        SIMPLE_TABLE + f"the output matches {tmp_path / 'both.npz'}\n"
    # ... a mismatching one exits 1 and names the leaf, errors and first bad index.
    np.savez(tmp_path / "bad.npz", in0=x, in1=y, out0=got + np.float32([0, 0, 1]))
    r = xlaplug_proc("run", simple, "--expect", tmp_path / "bad.npz")
    assert r.returncode == 1
    assert r.stderr == ("MISMATCH out0: 1 of 3 elements differ; max abs err 1, max rel err "
                        "0.25; first at (2,): got 3.0, expected 4.0\n")


def test_run_json_and_repeat(simple):
    r = cli("run", simple, "--json", "--repeat", "3", "--seed", "4")
    obj = json.loads(r.output)
    timings = obj.pop("timings")
    assert set(timings) == {"parse_s", "compile_s", "run_s"}
    assert obj.pop("engine") == "interpreter"
    run_times = obj.pop("run_times")  # every run's wall time; run_s is their median
    assert len(run_times) == 3 and timings["run_s"] == sorted(run_times)[1]
    assert all(isinstance(v, float) and v >= 0 for v in timings.values())
    # inputs drawn from numpy's default_rng(4); f32 add is exact, so the summary is fixed
    assert obj == {"module": "m", "device": "cpu", "peak_bytes": 36, "repeat": 3,
                   "outputs": {"out0": {"dtype": "f32", "shape": [3],
                                        "min": -1.8161145448684692, "max": 1.6585206985473633,
                                        "mean": -0.05007908741633097,
                                        "first": ["0.007356584", "-1.8161145", "1.6585207"]}}}


def test_run_input_dtype_converted_only_with_cast_and_shape_checked(tmp_path, simple):
    # An f64 file for f32 parameters is an error naming the parameter; --cast converts it.
    np.savez(tmp_path / "f64.npz", in0=np.zeros(3), in1=np.zeros(3))
    r = xlaplug_proc("run", simple, "--inputs", tmp_path / "f64.npz")
    assert r.returncode == 2
    assert r.stderr == (f"{simple}: error: input in0 for parameter 'p0' is f64[3]; the "
                        "parameter is f32[3] (--cast, or cast=True in the API, converts it)\n")
    assert cli("run", simple, "--inputs", tmp_path / "f64.npz", "--cast").exit_code == 0
    np.savez(tmp_path / "bad.npz", in0=np.zeros(4, np.float32), in1=np.zeros(3, np.float32))
    r = xlaplug_proc("run", simple, "--inputs", tmp_path / "bad.npz")
    assert r.returncode == 2
    assert r.stderr == (f"{simple}: error: input in0 for parameter 'p0' is f32[4]; the "
                        "parameter is f32[3]\n")


def test_run_memory_guard(simple, tmp_path):
    big = tmp_path / "big.hlo"
    big.write_text("HloModule m\nENTRY e {\n  c = f32[] constant(1)\n"
                   "  ROOT b = f32[1048576,1048576]{1,0} broadcast(c), dimensions={}\n}\n")
    r = xlaplug_proc("run", big)
    assert r.returncode == 2
    # the machine's free memory is the one figure that varies
    assert re.sub(r"available memory \([\d.]+ [GMK]iB\)", "available memory (M MiB)", r.stderr) == (
        f"{big}: error: module needs about 4096.0 GiB of buffers, more than the available "
        "memory (M MiB); refusing to run\n")
    r = xlaplug_proc("run", simple, "--max-memory", "8")
    assert r.returncode == 2
    # sizes in the unit that keeps them readable (36 bytes, not "0.0 MiB")
    assert r.stderr == (f"{simple}: error: module needs about 36 bytes of buffers, more than the "
                        "--max-memory (8 bytes); refusing to run\n")


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
    assert r.returncode == 2
    assert r.stderr == f"{loop}: error: while loop 'w' exceeded --max-while-iterations=50\n"


def test_run_custom_call_without_plugin_names_target(tmp_path):
    f = tmp_path / "cc.hlo"
    f.write_text("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n"
                 "  ROOT c = f32[2] custom-call(p), custom_call_target=\"acme.swish\"\n}\n")
    r = xlaplug_proc("run", f, "--no-plugins")
    assert r.returncode == 2
    assert r.stderr == (f"{f}:4:8: error: custom-call 'c': no plugin provides target "
                        "'acme.swish' on cpu (no kernel for cpu, no decomposition); no plugins "
                        "are loaded\n")
    # with the bundled plugins loaded, the one line counts them and names none: none is near
    r = xlaplug_proc("run", f)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1
    assert re.fullmatch(f"{re.escape(str(f))}:4:8: error: custom-call 'c': no plugin provides "
                        r"target 'acme.swish' on cpu \(no kernel for cpu, no decomposition\); no "
                        r"loaded plugin provides it \(\d+ ops loaded: xlaplug list-plugins lists "
                        r"them\)\n", r.stderr), r.stderr


def _env_without_simulator() -> dict:
    return {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}


@pytest.fixture(scope="module")
def no_gpu():
    """Skips where numba.cuda, without the simulator, finds a GPU: there --device cuda runs."""
    r = subprocess.run([sys.executable, "-c", "from numba import cuda; print(cuda.is_available())"],
                       capture_output=True, text=True, env=_env_without_simulator())
    if r.stdout.strip() == "True":
        pytest.skip("a CUDA GPU is present (numba.cuda.is_available() without the simulator): "
                    "--device cuda runs instead of failing")


@pytest.fixture(scope="module")
def cuda_run(no_gpu, tmp_path_factory):
    """`xlaplug run SIMPLE --device cuda` without the simulator, in a process: one run for
    the two tests below, which read the same exit status and stderr."""
    simple = tmp_path_factory.mktemp("cuda_run") / "simple.hlo"
    simple.write_text(SIMPLE)
    return subprocess.run([sys.executable, "-m", "xlaplug.cli", "run", str(simple), "--device",
                           "cuda"], capture_output=True, text=True, env=_env_without_simulator(),
                          cwd=ROOT)


def test_cuda_without_gpu_is_exit_2(cuda_run):
    r = cuda_run
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr
    assert "--device cuda is not available: numba.cuda finds no CUDA driver or GPU (set " \
        "NUMBA_ENABLE_CUDASIM=1 to use numba's simulator)" in r.stderr


def test_cuda_without_gpu_message_is_exactly_one_error(cuda_run):
    # an option the machine cannot serve: about no place in the file, so no file prefix
    r = cuda_run
    assert r.stderr == ("error: --device cuda is not available: numba.cuda finds no "
                        "CUDA driver or GPU (set NUMBA_ENABLE_CUDASIM=1 to use numba's "
                        "simulator)\n")
