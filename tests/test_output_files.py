"""Files xlaplug writes (`run --out`, `compile -o`) get the mode any new file gets under the
user's umask (not mkstemp's 0600), and an output into a folder that does not exist is one
`error:` line, exit 2, with nothing created; `--dump-dir` creates its own folder only.
The umask is the process's: those runs are processes; the others run in the test's process
(tests/cli_in_process.py)."""
import subprocess
import sys
from pathlib import Path

import pytest

from cli_in_process import xlaplug_in_process

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "rms_norm.hlo"


# The umask is set by a small launcher that then execs xlaplug, not by a preexec_fn: that
# makes subprocess fork() the whole worker (no vfork) -- a multithreaded process holding jax,
# which warns the fork may deadlock -- instead of starting the child cheaply.
_UMASK_THEN_EXEC = "import os, sys; os.umask(int(sys.argv[1])); os.execv(sys.argv[2], sys.argv[2:])"


def xlaplug(*args, umask=None):
    if umask is None:
        return xlaplug_in_process(*args, cwd=ROOT)
    cmd = [sys.executable, "-S", "-I", "-c", _UMASK_THEN_EXEC, str(umask),
           sys.executable, "-m", "xlaplug", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_outputs_take_the_users_umask(tmp_path, umask):
    out, hlo = tmp_path / "o.npz", tmp_path / "o.hlo"
    assert xlaplug("run", EXAMPLE, "--out", out, umask=umask).returncode == 0
    assert xlaplug("compile", EXAMPLE, "-o", hlo, umask=umask).returncode == 0
    want = 0o666 & ~umask
    assert (oct(out.stat().st_mode & 0o777), oct(hlo.stat().st_mode & 0o777)) == \
        (oct(want), oct(want))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.hlo", "o.npz"]  # no temp left


@pytest.mark.parametrize("verb, flag", [("run", "--out"), ("compile", "-o")])
def test_an_output_into_a_missing_folder_is_an_error_and_creates_nothing(tmp_path, verb, flag):
    target = tmp_path / "no" / "such" / "x.out"
    r = xlaplug(verb, EXAMPLE, flag, target)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == (f"error: {flag}: cannot write '{target}': folder '{target.parent}' "
                        "does not exist\n")
    assert list(tmp_path.iterdir()) == []


def test_dump_dir_creates_its_own_folder_but_not_the_ones_above(tmp_path):
    r = xlaplug("compile", EXAMPLE, "--dump-dir", tmp_path / "a" / "dump")
    assert r.returncode == 2
    assert r.stderr == (f"error: --dump-dir: cannot create '{tmp_path / 'a' / 'dump'}': folder "
                        f"'{tmp_path / 'a'}' does not exist\n")
    assert list(tmp_path.iterdir()) == []
    assert xlaplug("compile", EXAMPLE, "--dump-dir", tmp_path / "dump").returncode == 0
    assert (tmp_path / "dump" / "00-input.hlo").is_file()
