"""Bad paths, bad options and hostile messages: one line, exit code 2, nothing written."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from xlaplug.cli.main import main
from xlaplug.runtime.conformance import expect_close, expect_eq
from xlaplug.hlo.errors import HloError
from xlaplug.hlo.text.parser import parse_module

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "mlp.hlo"


def _one_line_error(result, *words):
    assert result.exit_code == 2, result.output
    out = result.output.strip()
    assert "Traceback" not in out
    head = out.splitlines()[0]
    assert len(out.splitlines()) == 1, out
    for w in words:
        assert w in head, head
    return head


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def afile(tmp_path):
    f = tmp_path / "afile"
    f.write_text("keep")
    return f


def test_compile_output_naming_a_directory(tmp_path):
    _one_line_error(cli("compile", EXAMPLE, "-o", tmp_path), "-o: cannot write",
                    "it is a directory")
    assert list(tmp_path.iterdir()) == []


def test_compile_output_under_a_regular_file(afile):
    head = _one_line_error(cli("compile", EXAMPLE, "-o", afile / "x.hlo"), "is not a directory")
    assert head.startswith("error: -o:")
    assert afile.read_text() == "keep"


def test_compile_output_somewhere_unwritable():
    # /proc takes no new files, even for root (a chmod-ed folder would not stop root).
    _one_line_error(cli("compile", EXAMPLE, "-o", "/proc/xlaplug-test.hlo"), "-o: cannot write")


def test_dump_dir_naming_a_file(afile):
    _one_line_error(cli("compile", EXAMPLE, "--dump-dir", afile), "--dump-dir",
                    "is not a directory")
    assert afile.read_text() == "keep"


def test_dump_dir_that_cannot_be_created():
    _one_line_error(cli("compile", EXAMPLE, "--dump-dir", "/proc/xlaplug-dump"),
                    "--dump-dir: cannot create")


def test_run_out_naming_a_directory(tmp_path):
    _one_line_error(cli("run", EXAMPLE, "--out", tmp_path), "--out: cannot write",
                    "it is a directory")
    assert list(tmp_path.iterdir()) == []


def test_failed_write_leaves_nothing_behind(tmp_path, monkeypatch):
    import xlaplug.runtime.driver as driver

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(driver.os, "replace", broken_replace)
    target = tmp_path / "out.hlo"
    with pytest.raises(HloError, match="No space left"):
        driver.write_atomic(str(target), "text", "-o")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("size, words", [
    ("1e400G", "too large"), ("inf", "too large"), ("nan", "too large"),
    ("-1", "must be a positive size"), ("0", "must be a positive size"),
    ("lots", "cannot read 'lots' as a size"),
])
def test_max_memory_values(size, words):
    head = _one_line_error(cli("run", EXAMPLE, "--max-memory", size), "--max-memory", words)
    assert "MiB" not in head


def test_inputs_that_are_not_an_npz(tmp_path):
    npy = tmp_path / "x.npy"
    np.save(npy, np.zeros(3))
    pkl = tmp_path / "x.pkl"
    pkl.write_bytes(b"\x80\x04K\x01.")
    for f in (npy, pkl):
        head = _one_line_error(cli("run", EXAMPLE, "--inputs", f), "it is not an .npz file")
        assert "allow_pickle" not in head and "pickled" not in head
    _one_line_error(cli("run", EXAMPLE, "--inputs", tmp_path / "missing.npz"), "no such file")


def test_inputs_npz_with_object_arrays(tmp_path):
    f = tmp_path / "obj.npz"
    np.savez(f, in0=np.array([object()], dtype=object))
    head = _one_line_error(cli("run", EXAMPLE, "--inputs", f), "pickled (object) arrays")
    assert "allow_pickle" not in head


@pytest.mark.parametrize("text", [
    # A token spanning lines, quoted in the message.
    "HloModule m\nENTRY e {\n  p = f32[] parameter(0)\n  ROOT r = f32[] add(p, p) add(p,\np)\n}\n",
    "HloModule m\nENTRY e {\n  p = f32[] parameter(0)\n"
    "  ROOT r = f32[] add(p, p), to_apply={\n}\n}\n",
])
def test_headlines_hold_no_raw_newline(text):
    with pytest.raises(HloError) as e:
        parse_module(text, "t.hlo")
    head = e.value.headline()
    assert "\n" not in head and "\\n" in head


def test_subprocess_error_is_one_line_without_traceback(tmp_path):
    r = subprocess.run([sys.executable, "-m", "xlaplug.cli", "compile", str(EXAMPLE), "-o",
                        str(tmp_path)], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0


def test_check_messages_print_plain_values():
    msg = expect_eq(np.array([64, 1], np.uint8), np.array([65, 1], np.uint8))
    assert "got 64, expected 65" in msg and "np." not in msg


def test_close_check_on_a_nan_says_so_not_zero_ulp():
    msg = expect_close(np.array([np.nan, 1], np.float32), np.array([2, 1], np.float32))
    assert "NaN or infinite" in msg and "max 0 ULP" not in msg
    msg = expect_close(np.array([1, 1], np.float32), np.array([1.001, 1], np.float32))
    assert "ULP, allowed 1" in msg and "NaN" not in msg


def test_a_constant_larger_than_memory_is_refused_where_it_is_written(tmp_path):
    # XLA's short form fills the shape with one value: 2^40 f32 elements are 4 TiB.
    hlo = tmp_path / "big.hlo"
    hlo.write_text("HloModule m\nENTRY e {\n  ROOT c = f32[1099511627776] constant(1)\n}\n")
    r = cli("compile", hlo)
    head = r.output.strip().splitlines()[0]
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert head.startswith(f"{hlo}:3:40: error: constant 'c': the short form fills all of "
                           "f32[1099511627776]: 4096.0 GiB, more than the memory available"), head
