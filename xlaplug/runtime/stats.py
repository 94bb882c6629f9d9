"""Output against output: max abs, max relative and max ULP error per output leaf, as
`run_hlo_module --reference_platform` reports them, and a table of them.

Pass or fail is `runner.compare`'s rule (per-dtype tolerances, `--rtol` / `--atol`), so
`--reference xla` and `--expect` judge alike; the figures are for the reader.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..hlo.errors import plural
from .outputs import compare


@dataclass
class OutputDiff:
    name: str          # out0, out1, ... (with " device d" on many devices)
    dtype: str
    shape: list
    max_abs: float
    max_rel: float
    max_ulp: int       # floats: ULP distance; integers and pred: the difference
    ok: bool
    message: str

    def as_json(self) -> dict:
        return asdict(self)


def _order_keys(a: np.ndarray) -> np.ndarray:
    """Float bits as integers whose difference counts the representable values between."""
    bits = a.view(f"i{a.dtype.itemsize}").astype(np.int64)
    magnitude = np.int64((1 << (a.dtype.itemsize * 8 - 1)) - 1)
    return np.where(bits < 0, -(bits & magnitude), bits)


def max_ulp(got: np.ndarray, want: np.ndarray) -> int:
    """Largest ULP distance of two same-typed float arrays (NaN = NaN; NaN against a number
    counts as 2**62); complex: the worse component."""
    if got.dtype.kind == "c":
        return max(max_ulp(got.real.copy(), want.real.copy()),
                   max_ulp(got.imag.copy(), want.imag.copy()))
    if got.size == 0:
        return 0
    if got.dtype.itemsize not in (1, 2, 4, 8):
        return 0
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    ka = _order_keys(np.ascontiguousarray(got))
    kb = _order_keys(np.ascontiguousarray(want))
    # Keys of one sign subtract exactly; across zero the distance is |ka| + |kb|, which for
    # 64-bit keys may not fit an int64 (-inf against inf): summed as floats.
    with np.errstate(over="ignore"):
        d = np.where((ka >= 0) == (kb >= 0), np.abs(ka - kb).astype(np.float64),
                     np.abs(ka).astype(np.float64) + np.abs(kb).astype(np.float64))
    gn, wn = np.isnan(g64), np.isnan(w64)
    d = np.where(gn & wn, 0.0, np.where(gn != wn, float(1 << 62), d))
    return int(min(d.max(), float(1 << 62)))


def diff(name: str, got: np.ndarray, want: np.ndarray, rtol=None, atol=None) -> OutputDiff:
    with np.errstate(all="ignore"):  # NaN and inf of narrow floats widen as they are
        return _diff(name, got, want, rtol, atol)


def _diff(name: str, got: np.ndarray, want: np.ndarray, rtol, atol) -> OutputDiff:
    from ..hlo import dtypes
    got, want = np.asarray(got), np.asarray(want)
    etype = dtypes.from_dtype(got.dtype) if got.dtype in dtypes._DTYPE_TO_ELEMENT else \
        str(got.dtype)
    if got.shape != want.shape or got.dtype != want.dtype:
        return OutputDiff(name, etype, list(got.shape), float("inf"), float("inf"), 1 << 62,
                          False, f"xlaplug gives {got.dtype}{list(got.shape)}, XLA "
                                 f"{want.dtype}{list(want.shape)}")
    bad = compare([got], {"out0": want}, rtol, atol)
    message = bad[0].message if bad else "match"
    if got.dtype.kind in "biu" or got.dtype == np.bool_:
        # One ULP of an integer is 1: the distance is the difference itself.
        g = got.astype(np.uint64 if got.dtype == np.uint64 else np.int64)
        w = want.astype(g.dtype)
        err = np.where(g >= w, g - w, w - g) if got.size else np.zeros(1, g.dtype)
        big = int(err.max())
        with np.errstate(all="ignore"):
            rel = float(np.max(err / np.maximum(np.abs(w.astype(np.float64)), 1e-300)))
        return OutputDiff(name, etype, list(got.shape), float(big), rel if big else 0.0, big,
                          not bad, message)
    wide = np.complex128 if got.dtype.kind == "c" else np.float64
    g, w = got.astype(wide), want.astype(wide)
    with np.errstate(all="ignore"):
        same = (g == w) | (np.isnan(g) & np.isnan(w))
        err = np.where(same, 0.0, np.abs(g - w))
        rel = np.where(same, 0.0, err / np.abs(w))
    max_abs = float(np.nanmax(err, initial=0.0)) if err.size else 0.0
    max_rel = float(np.nanmax(rel, initial=0.0)) if rel.size else 0.0
    if np.isnan(err).any():  # NaN against a number
        max_abs = max_rel = float("inf")
    return OutputDiff(name, etype, list(got.shape), max_abs, max_rel, max_ulp(got, want),
                      not bad, message)


def diff_all(ours: list[np.ndarray], theirs: list[np.ndarray], rtol=None, atol=None,
             suffix: str = "") -> list[OutputDiff]:
    if len(ours) != len(theirs):
        return [OutputDiff("outputs" + suffix, "-", [], float("inf"), float("inf"), 1 << 62,
                           False, f"xlaplug gives {plural(len(ours), 'output')}, XLA "
                           f"{len(theirs)}")]
    return [diff(f"out{k}{suffix}", a, b, rtol, atol) for k, (a, b) in enumerate(zip(ours,
                                                                                      theirs))]
