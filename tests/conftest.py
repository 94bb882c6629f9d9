"""Shared pytest fixtures."""
import os
import sys
from pathlib import Path

import pytest

# CUDA tests run under numba's simulator unless told otherwise (scripts/gpu_check.sh sets
# NUMBA_ENABLE_CUDASIM=0 on a GPU machine).  Set before anything imports numba.
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:  # so tests can `import jax_corpus` under any import mode
    sys.path.insert(0, _TESTS)


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
    """The bundled plugins active for one test; an empty session afterwards."""
    from xlaplug.plugin_runtime import Session, activate
    assert any(p.name == "jax_lapack" for p in registry.plugins), \
        [r.error for r in registry.records if r.error]
    activate(Session(registry))
    yield registry
    activate(Session())



# ---- markers (registered in setup.cfg) -----------------------------------------------------
# Whole files are marked here by what they need; single tests carry their own marks (`slow`,
# and `cuda` on CUDA-only tests and on tests/devices.py's cuda parameter).

# The StableHLO conformance suite and the runs over the whole jax corpus.
SUITE_MODULES = {"test_conformance_stablehlo", "test_conformance_jax", "test_corpus_roundtrip",
                 "test_cuda_corpus"}


def pytest_collection_modifyitems(config, items):
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
