"""The benchmarks' workloads run on xlaplug and agree with XLA, at tiny sizes: each script's
--check-only mode runs every implementation once and checks its outputs against XLA:CPU's,
timing nothing (their speed is the scripts' to measure, never a test's)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

jax = pytest.importorskip("jax")

ROOT = Path(__file__).resolve().parent.parent
MODELS = ["transformer_f32", "transformer_bf16", "transformer_train", "convnet_train",
          "data_parallel"]


def _script(name, *args, simulator=True):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if not simulator:
        env.pop("NUMBA_ENABLE_CUDASIM", None)
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / name), *args],
                          capture_output=True, text=True, timeout=600, env=env,
                          stdin=subprocess.DEVNULL)


def test_model_workloads_run_and_match_xla():
    r = _script("run.py", "--quick", "--check-only", "--only", ",".join(MODELS))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "WARNING" not in r.stderr and "MISMATCH" not in r.stdout
    for name in MODELS:  # every workload reported, its outputs checked against XLA's
        assert f"  {name:<17} " in r.stdout and "xlaplug vs XLA: ok" in r.stdout.split(
            f"  {name:<17} ", 1)[1].splitlines()[0], r.stdout
    # the numpy versions (f32 forward, data-parallel step on one device) agree too
    for name in ("transformer_f32", "data_parallel"):
        assert "numpy vs XLA: ok" in r.stdout.split(f"  {name:<17} ", 1)[1].splitlines()[0]


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.uname().machine != "x86_64",
                    reason="AVX2 code is x86-64's")
def test_avx2_code_on_both_engines_matches_xla():
    """--isa avx2 (benchmarks/isa.py): numba's loops and XLA's both compiled for AVX2, as on
    a CPU without AVX-512; xlaplug's outputs still agree with XLA's."""
    r = _script("run.py", "--quick", "--check-only", "--isa", "avx2", "--only",
                "elementwise,softmax")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    header = next(ln for ln in r.stdout.splitlines() if ln.startswith("code for: "))
    assert "NUMBA_CPU_NAME=haswell" in header and "--xla_cpu_max_isa=AVX2" in header, header
    assert r.stdout.count("xlaplug vs XLA: ok") == 2, r.stdout
    bad = _script("run.py", "--quick", "--check-only", "--isa", "sse2")
    assert bad.returncode == 2 and "invalid choice: 'sse2'" in bad.stderr


def test_scaling_sizes_match_xla():
    r = _script("scaling.py", "--quick", "--check-only")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    lines = [ln for ln in r.stdout.splitlines() if "xlaplug vs XLA:" in ln]
    assert len(lines) == 6 and all(": ok " in ln for ln in lines), r.stdout


def test_cuda_without_gpu_is_one_line_exit_2():
    """--device cuda on a machine with no GPU: one line naming why, exit 2, before any work
    (numba's simulator, which the tests may turn on, is turned off for the scripts)."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    probe = subprocess.run([sys.executable, "-c", "from numba import cuda; "
                            "print(cuda.is_available())"], capture_output=True, text=True, env=env)
    if probe.stdout.strip() == "True":
        pytest.skip("a CUDA GPU is present: --device cuda runs instead of failing")
    for script in ("run.py", "scaling.py"):
        r = _script(script, "--quick", "--check-only", "--device", "cuda", simulator=False)
        assert r.returncode == 2 and r.stdout == "", (script, r.stdout, r.stderr)
        assert r.stderr.startswith("error: --device cuda: xlaplug cannot run on CUDA here: "
                                   "numba.cuda finds no CUDA driver or GPU"), r.stderr
        assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr


def test_small_models_match_xla():
    r = _script("small_models.py", "--check-only")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "WRONG" not in r.stdout and "differ from XLA" not in r.stderr
    checked = [ln.split()[0] for ln in r.stdout.splitlines() if " checked " in ln]
    assert checked == ["mlp_sgd", "cnn_bn", "transformer", "adam", "lstm_scan", "gru_scan",
                       "sort_topk", "gather_scatter"], r.stdout
    bad = _script("small_models.py", "--only", "nope")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "unknown program" in bad.stderr


@pytest.mark.slow  # two MPI ranks, ~4 s
def test_xla_mpi_allreduce_builds_the_engines_rank_program():
    """The all-reduce benchmark runs the rank program the engine makes and keeps
    (runtime/mpi_engine.MpiProgram), and its sum agrees with mpi4py's: a tiny size, once
    (the figures are the script's, never a test's)."""
    pytest.importorskip("mpi4py")
    from test_multi_device_cli import _mpiexec
    _mpiexec()  # (skips where there is no mpiexec)
    r = _script("xla_mpi_allreduce.py", "--devices", "2", "--sizes", "4096", "--json")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (row,) = json.loads(r.stdout)["runs"]["2"]
    assert row["bytes"] == 4096 and row["agree"] is True and row["engine_s"] > 0, row


@pytest.mark.slow
def test_run_one_core_column_holds_both_to_one_cpu():
    """--cores one: the run happens in a child on a single CPU with every thread count at 1,
    and its figures still agree with XLA (the ratio column itself is measurement, not test)."""
    r = _script("run.py", "--quick", "--only", "while_loop", "--repeat", "1", "--cores", "one",
                "--json")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    out = json.loads(r.stdout)
    env = out["environment"]
    assert env["cores_usable"] == 1 and len(env["cpu_held"]) == 1, env
    assert env["numba_threads"] == 1 and "threads=1" in env["numpy_blas"], env
    (rec,) = out["results"]
    assert rec["xlaplug"]["matches_xla"] and rec["xlaplug"]["run_ms"] > 0
    assert isinstance(rec["load"], float) and rec["ratio_xlaplug_xla"] > 0
