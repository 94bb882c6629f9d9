"""The README's test command works from a clone with nothing beside it: the tests that need the
conformance suite skip with one line naming XLAPLUG_CONFORMANCE_DIR, and fail instead where
XLAPLUG_REQUIRE_CONFORMANCE=1 (CI), so the suite is never skipped silently there."""
import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _pytest(tmp_path, **env):
    environ = {**os.environ, "XLAPLUG_CONFORMANCE_DIR": str(tmp_path / "absent"), **env}
    environ.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-rs", "-p", "no:cacheprovider",
         str(TESTS / "test_plugins.py::test_stablehlo_check_on_conformance_file")],
        cwd=TESTS.parent, env=environ, capture_output=True, text=True, timeout=300)


def test_a_clone_without_the_suite_skips_its_tests_naming_the_variable(tmp_path):
    r = _pytest(tmp_path, XLAPLUG_REQUIRE_CONFORMANCE="0")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 skipped" in r.stdout
    assert "set XLAPLUG_CONFORMANCE_DIR to its stablehlo/ folder" in r.stdout


def test_ci_fails_when_the_suite_is_absent(tmp_path):
    r = _pytest(tmp_path, XLAPLUG_REQUIRE_CONFORMANCE="1")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "XLAPLUG_REQUIRE_CONFORMANCE=1 requires it" in r.stdout
