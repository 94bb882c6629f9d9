"""Messages are one line each, in the tool's voice: sizes in the unit the user gave, plurals
right, tolerances that are not numbers 0 or more refused, an unknown custom-call target
named with at most its five closest ops, `check-plugins` one row per op and a summary line,
and tables folded to the width they print at, never cut.  (`--device cuda` without a GPU:
tests/test_cli.py::test_cuda_without_gpu_message_is_exactly_one_error.)  The commands run
in this process (tests/cli_in_process.py): what they print is the subject here; the tables'
width, $COLUMNS as a process finds it, is checked in processes (list-opcodes' only ones)."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import xlaplug
from cli_in_process import xlaplug_in_process

ROOT = Path(__file__).resolve().parents[1]
RMS = ROOT / "examples" / "rms_norm.hlo"


def xlaplug_cli(*args, columns=None):
    env = {"XLAPLUG_PLUGIN_PATH": None}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return xlaplug_in_process(*args, cwd=ROOT, env=env)


def xlaplug_process(*args, columns):
    env = {k: v for k, v in os.environ.items() if k != "XLAPLUG_PLUGIN_PATH"}
    env["COLUMNS"] = str(columns)
    return subprocess.run([sys.executable, "-m", "xlaplug", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, env=env)


def one_error(r) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    return r.stderr.strip()


@pytest.mark.parametrize("limit, need, shown", [
    ("1K", "4.2 KiB", "1 KiB"),           # the unit given, not "1.0 KiB" or "0.0 MiB"
    ("4300", "4352 bytes", "4300 bytes"),  # bytes given: bytes, not "4.2 KiB ... (4.2 KiB)"
])
def test_max_memory_speaks_the_unit_given(limit, need, shown):
    assert one_error(xlaplug_cli("run", RMS, "--max-memory", limit)) == (
        f"{RMS}: error: module needs about {need} of buffers, more than the --max-memory "
        f"({shown}); refusing to run")


@pytest.mark.parametrize("flag, value", [("--rtol", "-1"), ("--atol", "abc"),
                                         ("--rtol", "nan"), ("--atol", "-0.5")])
def test_tolerances_must_be_numbers_0_or_more(flag, value):
    assert one_error(xlaplug_cli("run", RMS, flag, value)) == (
        f"error: {flag}: must be a number 0 or more, got '{value}'")


def test_the_api_refuses_a_negative_tolerance_and_counts_right():
    exe = xlaplug.compile(str(RMS))
    x, s = np.ones((8, 64), np.float32), np.ones(64, np.float32)
    with pytest.raises(xlaplug.HloError, match=r"error: rtol: must be a number 0 or more, "
                                               r"got -1$"):
        exe.run(x, s, expected={}, rtol=-1)
    one = xlaplug.compile("HloModule m\nENTRY e {\n  x = f32[2] parameter(0)\n"
                          "  ROOT n = f32[2] negate(x)\n}\n")
    with pytest.raises(xlaplug.HloError, match=r"module 'm' takes 1 argument, got 2$"):
        one(x, s)
    assert one.thunks_text().splitlines()[-1].startswith("2 thunks in e; 1 buffer, peak ")


def test_an_unknown_target_names_at_most_five_close_ops(tmp_path):
    hlo = tmp_path / "t.hlo"
    hlo.write_text("HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT c = f32[4] "
                   "custom-call(p), custom_call_target=\"lapack_sgeqrf\"\n}\n")
    line = one_error(xlaplug_cli("run", hlo))
    assert len(line) < 400, line  # the bundled plugins' every target made a 1.5 KB line
    head, _, near = line.partition("; near matches: ")
    assert head.endswith("ops loaded: xlaplug list-plugins lists them)"), line
    names = near.split(", ")
    assert 1 <= len(names) <= 5 and names[0] == "'lapack_sgeqrf_ffi'", line


def test_check_plugins_prints_a_row_per_op_and_a_summary():
    r = xlaplug_cli("check-plugins", "horovod", "--trials", 1, columns=200)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    ops = ["HorovodAllgather", "HorovodAllreduce", "HorovodAlltoall", "HorovodBroadcast",
           "HorovodReducescatter"]
    rows = [ln.split()[0] for ln in lines if ln.startswith(" Horovod")]
    assert rows == ops  # one row each, however many examples and trials
    assert lines[-1].startswith("5 ops checked (") and lines[-1].endswith(" checks): all ok")
    verbose = xlaplug_cli("check-plugins", "horovod", "--trials", 1, "--verbose", columns=200)
    checks = int(lines[-1].split("(")[1].split()[0])
    assert sum(ln.startswith(" Horovod") for ln in verbose.stdout.splitlines()) == checks > 5
    assert verbose.stdout.splitlines()[-1] == lines[-1]


@pytest.mark.parametrize("columns", [50, 120])
def test_tables_fold_to_the_width_instead_of_cutting(columns):
    r = xlaplug_process("list-opcodes", columns=columns)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "…" not in r.stdout  # nothing cut to an ellipsis
    assert max(len(ln) for ln in lines) <= columns
    # at 50 columns the cells fold (was: pinned to 80 columns whatever the width); at 120
    # they have room, and the longest opcode stays whole on its row
    assert ("dynamic-update-slice" in r.stdout) == (columns == 120)
