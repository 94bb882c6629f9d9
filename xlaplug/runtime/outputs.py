"""A run's outputs: leaves (out0, out1, ...) depth-first through tuples, stacked by device,
compared with expected values (per dtype tolerances, each device against its own), and
summarized for printing."""
from __future__ import annotations

import numpy as np

from ..backends.device import flatten
from ..hlo import dtypes
from .options import Mismatch


def leaves(value) -> list[np.ndarray]:
    """Host arrays of a value's leaves, depth-first through tuples (out0, out1, ...)."""
    return [np.asarray(v) for v in flatten(value)]


DEFAULT_TOL = {"f16": (1e-3, 1e-3), "bf16": (1e-2, 1e-2), "f32": (1e-5, 1e-6),
               "f64": (1e-12, 1e-12), "c64": (1e-5, 1e-6), "c128": (1e-12, 1e-12)}


def tolerance(name: str, value) -> float | None:
    """`value` (a number, or its text from the command line) as a tolerance: a number 0 or
    more (None: the dtype's default); anything else is an error naming `name`."""
    import math

    from .options import RunError
    if value is None:
        return None
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not (math.isfinite(number) and number >= 0):
        raise RunError(f"{name}: must be a number 0 or more, got {value!r}"
                       if isinstance(value, str) else
                       f"{name}: must be a number 0 or more, got {value}")
    return number


def compare(outputs: list[np.ndarray], expected: dict, rtol: float | None,
            atol: float | None, check_keys: bool = True) -> list[Mismatch]:
    """Mismatches of `outputs` against `expected` (outK keys); with `check_keys`, a missing
    or extra key is one too (expect_keys)."""
    from .expect_keys import as_expected_dtype, key_problems
    bad = [Mismatch(key, msg) for key, msg in key_problems(len(outputs), expected)
           ] if check_keys else []
    for k, got in enumerate(outputs):
        key = f"out{k}"
        if key not in expected:
            continue
        want, dtype_msg = as_expected_dtype(got, np.asarray(expected[key]))
        if got.shape != want.shape:
            bad.append(Mismatch(key, f"shape {got.shape} != expected {want.shape}"))
            continue
        if dtype_msg is not None:
            bad.append(Mismatch(key, dtype_msg))
            continue
        if got.dtype.kind in "biu" or got.dtype == np.bool_:
            diff = got.astype(np.int64) != want.astype(np.int64) if got.dtype != np.uint64 else got != want
            if diff.any():
                idx = tuple(int(i) for i in np.argwhere(diff)[0])
                bad.append(Mismatch(key, f"{int(diff.sum())} of {got.size} elements differ; first "
                                    f"at {idx}: got {got[idx]}, expected {want[idx]}"))
            continue
        etype = dtypes.from_dtype(got.dtype) if got.dtype in dtypes._DTYPE_TO_ELEMENT else "f32"
        r, a = DEFAULT_TOL.get(etype, (1e-2, 1e-2))
        r = r if rtol is None else rtol
        a = a if atol is None else atol
        g = got.astype(np.complex128 if got.dtype.kind == "c" else np.float64)
        w = want.astype(g.dtype)
        both_nan = np.isnan(g) & np.isnan(w)
        same = (g == w) | both_nan
        with np.errstate(invalid="ignore", over="ignore"):
            err = np.abs(g - w)
            ok = same | (err <= a + r * np.abs(w))
        if not ok.all():
            idx = tuple(int(i) for i in np.argwhere(~ok)[0])
            finite = ~same & np.isfinite(err)
            max_abs = float(err[finite].max()) if finite.any() else float("inf")
            with np.errstate(divide="ignore", invalid="ignore"):
                rel = err[finite] / np.abs(w[finite])
            max_rel = float(np.nanmax(rel)) if rel.size else float("inf")
            bad.append(Mismatch(key, f"{int((~ok).sum())} of {got.size} elements differ; max abs "
                                f"err {max_abs:.3g}, max rel err {max_rel:.3g}; first at {idx}: "
                                f"got {got[idx]}, expected {want[idx]}"))
    return bad


def summarize(arr: np.ndarray) -> dict:
    out = {"dtype": dtypes.from_dtype(arr.dtype) if arr.dtype in dtypes._DTYPE_TO_ELEMENT
           else str(arr.dtype), "shape": list(arr.shape)}
    flat = arr.reshape(-1)
    if flat.size and arr.dtype.kind != "V":
        vals = flat.astype(np.complex128 if arr.dtype.kind == "c" else np.float64)
        if arr.dtype.kind != "c":
            with np.errstate(invalid="ignore"):
                out.update(min=float(np.nanmin(vals)) if not np.isnan(vals).all() else float("nan"),
                           max=float(np.nanmax(vals)) if not np.isnan(vals).all() else float("nan"),
                           mean=float(np.mean(vals)))
        out["first"] = [str(x) for x in flat[:4]]
    return out


def stacked(per_device: list[list[np.ndarray]]) -> list[np.ndarray]:
    """Output leaves of every device, stacked on a new leading axis (device order)."""
    return [np.stack([dev[k] for dev in per_device]) for k in range(len(per_device[0]))]


def compare_devices(per_device: list[list[np.ndarray]], expected: dict, rtol, atol,
                    first_device: int = 0) -> list[Mismatch]:
    from .expect_keys import key_problems
    n_total = len(per_device)
    # The file's keys once, by the rank holding device 0 (under MPI each rank checks its own)
    bad = [Mismatch(key, msg) for key, msg in key_problems(len(per_device[0]), expected)
           ] if per_device and first_device == 0 else []
    for i, outs in enumerate(per_device):
        d = first_device + i
        mine = {}
        for k, got in enumerate(outs):
            want = expected.get(f"out{k}")
            if want is None:
                continue
            want = np.asarray(want)
            stacked_ok = want.ndim == got.ndim + 1 and want.shape[1:] == got.shape
            if stacked_ok and want.shape[0] >= d + 1 and (want.shape[0] > 1 or n_total == 1):
                want = want[d]
            mine[f"out{k}"] = want
        for m in compare(outs, mine, rtol, atol, check_keys=False):  # checked above
            bad.append(Mismatch(f"{m.leaf} device {d}", m.message))
    return bad
