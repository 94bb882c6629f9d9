"""Every module in examples/ runs as README shows it (one process; the 4-device example
also under mpiexec -n 4)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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
    p = _run([sys.executable, "-m", "xlaplug.cli", "run", str(path)])
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
