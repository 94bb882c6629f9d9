"""Where the StableHLO-derived conformance suite lies, and what a test does without it.

The suite is not part of the repository: CI has it beside the checkout
(`../shared/conformance/stablehlo`), a user's clone usually does not.  Tests that need it call
`conformance_dir()`: the directory named by `XLAPLUG_CONFORMANCE_DIR`, else the first
`shared/conformance/stablehlo` above the tests (a git worktree sits further down).  Absent,
the test is skipped with one line naming the variable -- unless `XLAPLUG_REQUIRE_CONFORMANCE=1`
(what `.ci/run` sets), where a missing suite fails the test: CI must never go green by
skipping the suite.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ENV_DIR = "XLAPLUG_CONFORMANCE_DIR"
ENV_REQUIRE = "XLAPLUG_REQUIRE_CONFORMANCE"
_RELATIVE = Path("shared") / "conformance" / "stablehlo"


def find_conformance_dir() -> Path | None:
    """The suite's directory, or None when it is not there (no skip, no failure)."""
    named = os.environ.get(ENV_DIR)
    if named:
        return Path(named) if Path(named).is_dir() else None
    return next((d / _RELATIVE for d in Path(__file__).resolve().parents
                 if (d / _RELATIVE).is_dir()), None)


def conformance_dir() -> Path:
    """The suite's directory; skips the calling test (fails it under CI) when absent."""
    found = find_conformance_dir()
    if found is not None:
        return found
    where = os.environ.get(ENV_DIR) or f"../{_RELATIVE}"
    reason = f"conformance suite not found at {where} (set {ENV_DIR} to its stablehlo/ folder)"
    if os.environ.get(ENV_REQUIRE) == "1":
        pytest.fail(f"{reason}; {ENV_REQUIRE}=1 requires it", pytrace=False)
    pytest.skip(reason)
