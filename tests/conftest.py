"""Shared pytest fixtures."""
import os
import sys
from pathlib import Path

import pytest

# CUDA tests run under numba's simulator unless told otherwise (scripts/gpu_check.sh sets
# NUMBA_ENABLE_CUDASIM=0 on a GPU machine).  Set before anything imports numba.
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
_CUDA_SIMULATOR = os.environ["NUMBA_ENABLE_CUDASIM"]

# OpenBLAS's threads spin for 2^28 cycles (~0.1 s) before they sleep: after each product and
# after they start, in every process that imports numpy -- ~0.1 s of CPU per CLI process or
# MPI rank (import numpy: 0.16 -> 0.056 s CPU).  The suite's three workers and their
# subprocesses share two cores in CI, so the spinning takes the cores from the work; 2^20
# cycles (~0.4 ms) still keeps them awake between back-to-back products.  Only how long
# they wait changes, not how many there are: the products' bits are the same.  Set before
# anything imports numpy (the workers' own BLAS) and inherited by every subprocess.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "20")

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:  # so tests can `import jax_corpus` under any import mode
    sys.path.insert(0, _TESTS)


def _sigint_state() -> tuple:
    """This thread's blocked and this process's ignored signals as the kernel has them (C
    code can change either behind Python's back): what a process started now inherits."""
    try:
        with open("/proc/thread-self/status") as f:
            return tuple(ln.strip() for ln in f if ln.startswith(("SigBlk", "SigIgn")))
    except OSError:
        return ()


@pytest.fixture(autouse=True)
def _signals_left_as_found():
    """A test that leaves a signal blocked or ignored in its worker passes that on to every
    process the worker starts after it -- the Ctrl-C tests' children then never hear SIGINT
    (seen as a flaky 30 s hang that depended on which tests shared a worker).  So the test
    that changed them fails, by name."""
    before = _sigint_state()
    yield
    after = _sigint_state()
    if after != before:
        pytest.fail(f"the test left this worker's signals changed: {before} -> {after}")


@pytest.fixture(autouse=True)
def _cuda_simulator_setting_left_as_found():
    """numba reads NUMBA_ENABLE_CUDASIM once, when numba.cuda is first imported, and every
    process a worker starts inherits it: a test (or a module fixture in its setup) that
    changes it in the worker -- importing tests/cuda_ptx_check.py did -- sends later tests'
    numba.cuda and their subprocesses to a GPU that is not there.  So that test fails
    (compared with the session's setting: a module fixture changes it before the
    function-scoped fixtures of its first test start)."""
    yield
    now = os.environ.get("NUMBA_ENABLE_CUDASIM")
    if now != _CUDA_SIMULATOR:
        pytest.fail(f"the test left NUMBA_ENABLE_CUDASIM changed: {_CUDA_SIMULATOR!r} -> "
                    f"{now!r}")


def _x64_flag():
    jax = sys.modules.get("jax")  # (a test that never imported jax cannot have changed it)
    return None if jax is None else bool(jax.config.jax_enable_x64)


@pytest.fixture(autouse=True)
def _jax_x64_left_as_found():
    """jax_enable_x64 is one flag for the whole worker, and test files set it at import: a
    test that sets it without restoring it (rather than `with jax.enable_x64(...)`) changes
    what XLA returns to every later test in the worker -- c128 answers came back as c64 in
    CI, depending on which files shared a worker.  So the test that changed it fails."""
    before = _x64_flag()
    yield
    after = _x64_flag()
    if before is not None and after != before:
        pytest.fail(f"the test left jax_enable_x64 changed: {before} -> {after}")


@pytest.fixture(scope="session", autouse=True)
def _cuda_simulator_waits():
    """Under numba's CUDA simulator, its block manager waits for a block's threads instead
    of polling them (tests/cudasim_threads.py): the same kernels, without the spin."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        import cudasim_threads
        cudasim_threads.install()


@pytest.fixture(scope="session", autouse=True)
def _xla_executables_shared(tmp_path_factory):
    """XLA compiles a program once per run, not once per test file that needs it: its
    executable is shared by the run's workers (tests/xla_session_cache.py)."""
    import xla_session_cache
    with pytest.MonkeyPatch.context() as mp:
        xla_session_cache.install(xla_session_cache.session_dir(tmp_path_factory), mp)
        yield


@pytest.fixture(scope="session")
def jax_corpus():
    """Every program of tests/jax_corpus.py as an Entry (name, lowered_hlo, compiled_hlo,
    inputs, outputs, x64); generated once, then read from tests/.corpus_cache/."""
    import jax_corpus as corpus
    return corpus.load_corpus()


# ---- the bundled plugins, for the jax_lapack tests (CPU and CUDA) ---------------------------

@pytest.fixture(scope="module")
def registry():
    """The bundled plugins, loaded once per module (entry points and XLAPLUG_PLUGIN_PATH off)."""
    from xlaplug.plugin import load_plugins
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("XLAPLUG_PLUGIN_PATH", raising=False)
        return load_plugins(entry_points=False)


@pytest.fixture
def lapack(registry):
    """The bundled plugins' registry, jax_lapack among them: a test makes its sessions from
    it (`Session(lapack, device=...)`)."""
    assert any(p.name == "jax_lapack" for p in registry.plugins), \
        [r.error for r in registry.records if r.error]
    return registry



# ---- markers (registered in setup.cfg) -----------------------------------------------------
# Whole files are marked here by what they need (cuda, jax, suite), and `slow` tests by name
# in SLOW (tests/slow_tests.py); CUDA-only tests and tests/devices.py's cuda parameter carry
# `cuda` too.

# The StableHLO conformance suite and the runs over the whole jax corpus.
SUITE_MODULES = {"test_conformance_stablehlo", "test_conformance_jax", "test_corpus_roundtrip",
                 "test_cuda_corpus"}


# The test functions marked `slow`: tests/slow_tests.py (tests/ is on sys.path: _TESTS).
from slow_tests import SLOW  # noqa: E402


def _check_slow_names(modules) -> None:
    """A name in SLOW that its module no longer defines is a stale entry: fail loudly."""
    for module in modules:
        name = module.__name__.rpartition(".")[2]
        missing = [f for f in SLOW.get(name, ()) if not hasattr(module, f)]
        if missing:
            raise pytest.UsageError(f"conftest.SLOW names tests {name} does not have: "
                                    f"{sorted(missing)}")


def pytest_collection_modifyitems(config, items):
    _check_slow_names({item.module for item in items})
    for item in items:
        module = item.module.__name__.rpartition(".")[2]
        params = getattr(item, "callspec", None)
        if module.startswith("test_cuda_") or (params and params.params.get("device") == "cuda"):
            item.add_marker(pytest.mark.cuda)
        uses_corpus = "jax_corpus" in getattr(item, "fixturenames", ())
        if "jax" in vars(item.module) or uses_corpus:  # jax (or its corpus) is the oracle
            item.add_marker(pytest.mark.jax)
        if module in SUITE_MODULES or uses_corpus:
            item.add_marker(pytest.mark.suite)
        if item.originalname in SLOW.get(module, ()):
            item.add_marker(pytest.mark.slow)
    # Longest files first (file_order.py): the short ones then fill in around the long
    # runs instead of one worker finishing a long file alone at the end.
    import file_order  # (tests/ is on sys.path: see _TESTS above)
    file_order.order(items)
