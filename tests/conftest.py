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
    """The bundled plugins' registry, jax_lapack among them: a test makes its sessions from
    it (`Session(lapack, device=...)`)."""
    assert any(p.name == "jax_lapack" for p in registry.plugins), \
        [r.error for r in registry.records if r.error]
    return registry

