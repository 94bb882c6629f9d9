"""The CUDA kernels compile for a real GPU: numba's simulator runs kernels as Python and
type-checks nothing, so each group of kernels is lowered to PTX with NVVM (no GPU needed;
the test extra installs nvidia-cuda-nvcc-cu12).

One process compiles every group (tests/cuda_ptx_check.py): numba.cuda's import, NVVM's
start and the first compiles' setup are paid once, not once a group (six processes, one a
test, took 32.5 s of CPU; one takes 27).  Each test reads its own group's part of the
report, so a failure names its group and its kernels.  The process runs simulator off,
whatever the tests run under.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.cuda


def _nvvm_available() -> bool:
    if os.environ.get("CUDA_HOME"):
        return True
    try:
        import nvidia.cuda_nvcc  # noqa: F401
        return True
    except ImportError:
        return False


# On a GPU (NUMBA_ENABLE_CUDASIM=0) the other tests compile and run every elementwise
# kernel, so scripts/cuda_ptx_check.py's sample is compiled only under the simulator.
_ELEMENTWISE = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" and _nvvm_available()


# The groups each test reads: the run compiles those of the tests selected.
_GROUPS_OF = {"test_ptx_compiles": ["elementwise"],
              "test_kernels_compile_for_a_real_gpu": ["jax_lapack"],
              "test_linalg_kernels_compile_to_ptx": ["linalg"],
              "test_window_kernels_compile_to_ptx": ["windows"],
              "test_fft_rng_kernels_compile_to_ptx": ["fft", "rng"],
              "test_rng_draw_kernels_compile_to_ptx": ["rng_draws"]}


@pytest.fixture(scope="module")
def report(request) -> dict[str, str]:
    """Each group's part of one run of tests/cuda_ptx_check.py ({group: its lines}) for the
    tests selected here; fails them with the report when NVVM is missing (exit 3)."""
    # (cuda_ptx_check is not imported here: it turns the simulator off at import, for the
    # process it runs in -- here the worker, whose later tests and processes need it on)
    wanted = {g for item in request.session.items if item.module is request.module
              for g in _GROUPS_OF[item.originalname]}
    groups = [g for gs in _GROUPS_OF.values() for g in gs
              if g in wanted and (g != "elementwise" or _ELEMENTWISE)]
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, str(Path(__file__).with_name("cuda_ptx_check.py")),
                        *groups], capture_output=True, text=True, env=env, timeout=600,
                       cwd=str(ROOT))
    if p.returncode == 3:
        pytest.fail("NVVM unavailable (the test extra installs nvidia-cuda-nvcc-cu12): "
                    + p.stdout.strip()[-2000:])
    assert p.returncode in (0, 1), p.stdout[-4000:] + p.stderr[-4000:]
    parts: dict[str, str] = {}
    for chunk in p.stdout.split("== ")[1:]:
        name, _, body = chunk.partition("\n")
        parts[name] = body
    missing = set(groups) - set(parts)
    assert not missing, (missing, p.stdout[-4000:] + p.stderr[-4000:])
    return parts


def _ok(report: dict[str, str], group: str) -> str:
    """The group's lines, after checking they end with its `0 failed` summary."""
    lines = report[group].strip().splitlines()
    assert lines and lines[-1].startswith(f"{group}: ") and lines[-1].endswith(" 0 failed"), \
        report[group][-4000:]
    return report[group]


@pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") != "1",
                    reason="on a GPU the tests above compile and run every kernel")
@pytest.mark.skipif(not _nvvm_available(), reason="NVVM not installed (pip install "
                    "nvidia-cuda-nvcc-cu12): cannot compile PTX without a GPU")
def test_ptx_compiles(report):
    """Elementwise kernels (scripts/cuda_ptx_check.py: every 3rd elementwise signature of
    its subset here, for the suite's time -- the script alone compiles all of the subset,
    --all every opcode x type), reduce-precision, narrow-type and fused-loop kernels and
    scalar device functions of HLO computations."""
    part = report["elementwise"]
    assert part.strip().splitlines()[-1] == "elementwise: exit 0", part[-4000:]
    assert "0 failed" in part


def test_kernels_compile_for_a_real_gpu(report):
    """The bundled jax_lapack plugin's kernels (potrf, getrf, trsm, zero, geqrf, orgqr,
    Jacobi eigh), for each of f32, f64, c64 and c128."""
    _ok(report, "jax_lapack")


def test_linalg_kernels_compile_to_ptx(report):
    """Every linalg kernel: permute/cast, matmul, complex matmul, im2col, Cholesky, trsm."""
    _ok(report, "linalg")


def test_window_kernels_compile_to_ptx(report):
    """The reduce-window and select-and-scatter kernels (tests/cuda_ptx_check.py's
    `windows` group)."""
    assert _ok(report, "windows").strip().endswith("5 kernels, 0 failed")


def test_fft_rng_kernels_compile_to_ptx(report):
    """FFT and the bit generators (threefry, philox: integer kernels with no f64)."""
    _ok(report, "fft")
    _ok(report, "rng")


def test_rng_draw_kernels_compile_to_ptx(report):
    """The rng / rng-get-and-update-state kernels: integer kernels stay integer, and the
    uniform transform has no FMA (one would round differently from numpy's multiply then
    add)."""
    _ok(report, "rng_draws")
