"""The StableHLO checks (`check.expect_*` custom calls) and a runner for the conformance suite.

Semantics from ../shared/conformance/README.md (stablehlo/tests/CheckOps.td, CheckOps.cpp):
  expect_eq         exactly equal, element by element (any element type; NaN == NaN bitwise)
  expect_close      float/complex: ULP distance <= max_ulp_difference (default 1); a
                    non-finite value matches only a bitwise-equal value; any NaN matches any NaN
  expect_almost_eq  float/complex: equal within tolerance 1e-4
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..hlo.errors import HloError

DEFAULT_MAX_ULP = 1
ALMOST_EQ_TOLERANCE = 1e-4


class CheckFailure(HloError):
    """A `check.expect_*` that does not hold (exit code 1 at the CLI)."""


def _ordered_bits(a: np.ndarray) -> np.ndarray:
    """Map floats to integers so that adjacent floats differ by 1 (sign-magnitude -> two's)."""
    width = a.dtype.itemsize * 8
    if width < 8:
        raise ValueError("sub-byte floats are not supported by ULP comparison")
    u = a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])
    u = u.astype(np.uint64)
    sign = np.uint64(1) << np.uint64(width - 1)
    mag = (u & (sign - np.uint64(1))).astype(np.int64)
    return np.where((u & sign) != 0, -mag, mag)


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(_ordered_bits(a) - _ordered_bits(b))


def _bits_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    k = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64, 16: np.uint64}[a.dtype.itemsize]
    if a.dtype.itemsize == 16:
        return (a.view(np.uint64).reshape(a.shape + (2,)) ==
                b.view(np.uint64).reshape(b.shape + (2,))).all(-1)
    return a.view(k) == b.view(k)


def _components(a: np.ndarray) -> list[np.ndarray]:
    # (np.ascontiguousarray makes 0-d arrays 1-d; reshape keeps scalars scalar.)
    if a.dtype.kind == "c":
        return [np.ascontiguousarray(a.real).reshape(a.shape),
                np.ascontiguousarray(a.imag).reshape(a.shape)]
    return [np.ascontiguousarray(a).reshape(a.shape)]


def _first_bad(bad: np.ndarray, actual, expected, extra: str = "") -> str:
    idx = tuple(int(i) for i in np.argwhere(bad)[0]) if bad.ndim else ()
    # str, not repr: `64`, not `np.uint8(64)`.
    return (f"{int(bad.sum())} of {bad.size} elements differ; first at {list(idx)}: "
            f"got {actual[idx]}, expected {expected[idx]}{extra}")


def expect_eq(actual: np.ndarray, expected: np.ndarray) -> str | None:
    if actual.dtype.kind in "fcV" or actual.dtype not in (np.bool_,) and actual.dtype.kind not in "biu":
        comps = zip(_components(actual), _components(expected))
        bad = np.zeros(actual.shape, bool)
        for a, e in comps:
            both_nan = np.isnan(a.astype(np.float64)) & np.isnan(e.astype(np.float64))
            bad |= ~(_bits_equal(a, e) | both_nan)
    else:
        bad = actual != expected
    return _first_bad(bad, actual, expected) if bad.any() else None


def expect_close(actual: np.ndarray, expected: np.ndarray, max_ulp: int = DEFAULT_MAX_ULP
                 ) -> str | None:
    bad = np.zeros(actual.shape, bool)
    worst = 0
    nonfinite_bad = 0
    for a, e in zip(_components(actual), _components(expected)):
        a64, e64 = a.astype(np.float64), e.astype(np.float64)
        nan = np.isnan(a64) & np.isnan(e64)
        finite = np.isfinite(a64) & np.isfinite(e64)
        ulps = np.where(finite, ulp_distance(a, e), 0)
        worst = max(worst, int(ulps.max()) if ulps.size else 0)
        ok = nan | (finite & (ulps <= max_ulp)) | (~finite & _bits_equal(a, e))
        nonfinite_bad += int((~ok & ~finite).sum())
        bad |= ~ok
    if not bad.any():
        return None
    # A NaN or infinity against another value has no ULP distance: say so, rather than
    # "max 0 ULP, allowed 1".
    parts = []
    if worst > max_ulp:
        parts.append(f"max {worst} ULP, allowed {max_ulp}")
    if nonfinite_bad:
        parts.append(f"{nonfinite_bad} NaN or infinite value{'s' if nonfinite_bad != 1 else ''}"
                     f" where the other side differs")
    return _first_bad(bad, actual, expected, f" ({'; '.join(parts)})")


def expect_almost_eq(actual: np.ndarray, expected: np.ndarray,
                     tol: float = ALMOST_EQ_TOLERANCE) -> str | None:
    bad = np.zeros(actual.shape, bool)
    for a, e in zip(_components(actual), _components(expected)):
        a64, e64 = a.astype(np.float64), e.astype(np.float64)
        with np.errstate(invalid="ignore"):
            ok = (np.isnan(a64) & np.isnan(e64)) | (a64 == e64) | (np.abs(a64 - e64) <= tol)
        bad |= ~ok
    return _first_bad(bad, actual, expected) if bad.any() else None


CHECKS = {"check.expect_eq": expect_eq, "check.expect_close": expect_close,
          "check.expect_almost_eq": expect_almost_eq}


def run_check(target: str, actual, expected, *, max_ulp: int = DEFAULT_MAX_ULP,
              where: str = "") -> None:
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape:
        raise CheckFailure(f"{target}{where}: shape {actual.shape} != expected {expected.shape}")
    if target == "check.expect_close":
        msg = expect_close(actual, expected, max_ulp)
    else:
        msg = CHECKS[target](actual, expected)
    if msg:
        raise CheckFailure(f"{target}{where} failed: {msg}")


# ---- running the suite -------------------------------------------------------------------

@dataclass
class CaseResult:
    name: str
    status: str         # pass | fail | error | noinputs
    detail: str = ""
    seconds: float = 0.0


@functools.lru_cache(maxsize=None)
def _bundled_registry():
    """The bundled plugins (stablehlo_check gives the check.* kernels), loaded once and
    shared read-only by every case's session."""
    from ..plugin import load_plugins
    return load_plugins(entry_points=False)


def suite_session(device: str = "cpu", max_ulp: int = DEFAULT_MAX_ULP):
    """The session the suite runs a case in: the bundled plugins on `device`; a check
    without its own max_ulp_difference uses the suite's `max_ulp`."""
    from ..plugin.session import Session
    return Session(_bundled_registry(), device=device,
                   attr_defaults={"max_ulp_difference": max_ulp})


def run_case(path: Path, max_ulp: int = DEFAULT_MAX_ULP, device: str = "cpu",
             module=None) -> CaseResult:
    """Parse (unless `module`, the case already parsed, is given), verify, compile and run
    one case; its check.* custom calls decide pass or fail."""
    from .driver import compile_module
    from ..hlo.text.parser import parse_file
    from ..hlo.verifier import verify_module
    from .runner import RunError, execute
    t0 = time.perf_counter()
    name = path.stem
    try:
        module = parse_file(str(path)) if module is None else module
        verify_module(module)
        if module.entry.parameters:
            # Not a self-contained case: its inputs are not in the module, and it has no
            # checks (the converter emits these for shape-polymorphic tests).
            return CaseResult(name, "noinputs", "entry takes parameters; no built-in inputs",
                              time.perf_counter() - t0)
        session = suite_session(device, max_ulp)
        compile_module(module, session)
        execute(module, [], session, max_while_iterations=10_000_000)
        return CaseResult(name, "pass", seconds=time.perf_counter() - t0)
    except CheckFailure as e:
        return CaseResult(name, "fail", e.message, time.perf_counter() - t0)
    except (RunError, HloError) as e:
        return CaseResult(name, "error", e.message, time.perf_counter() - t0)
    except Exception as e:  # a kernel bug: report it as such, keep going
        return CaseResult(name, "error", f"internal error: {type(e).__name__}: {e}",
                          time.perf_counter() - t0)


def run_cases(paths: list[Path], max_ulp: int = DEFAULT_MAX_ULP, device: str = "cpu",
              progress=None) -> list[CaseResult]:
    """`run_case` on every path, in order; `progress(cases done, cases)` after each (the
    suite holds thousands: the caller shows how far it is)."""
    results = []
    for path in paths:
        results.append(run_case(path, max_ulp, device))
        if progress is not None:
            progress(len(results), len(paths))
    return results
