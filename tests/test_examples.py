"""Every module in examples/ runs as README shows it (`xlaplug run`, in this process:
tests/cli_in_process.py -- test_readme's tour runs two of them as processes; the 4-device
example also under mpiexec -n 4)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli_in_process import xlaplug_in_process

ROOT = Path(__file__).resolve().parent.parent
# Each test starts xlaplug processes (and mpiexec): out of the fast loop.
pytestmark = pytest.mark.slow
EXAMPLES = sorted((ROOT / "examples").glob("*.hlo"))


def _run(cmd):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env,
                          cwd=ROOT, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(path):
    p = xlaplug_in_process("run", path, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert "out0" in p.stdout


def test_horovod_example_over_mpi():
    mpiexec = Path(sys.executable).with_name("mpiexec")
    if not mpiexec.exists():
        pytest.skip("no mpiexec next to python: pip install 'xlaplug[mpi]'")
    p = _run([str(mpiexec), "-n", "4", sys.executable, "-m", "xlaplug.cli", "run",
              "examples/horovod_allreduce4.hlo"])
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("4 devices (4 replicas x 1 partition) in processes (MPI)")
