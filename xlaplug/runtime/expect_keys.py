"""What `run --expect FILE.npz` must hold before values are compared: one `outK` per output.

The comparison of values (runner.compare) looks only at keys it finds; on its own a file
whose keys match no output, or only some, would "match".  These checks make the file's
keys and each leaf's dtype part of the comparison: a missing `outK`, a key that names no
output, or a dtype that differs is a mismatch naming it (exit 1), never "all N outputs match".
"""
from __future__ import annotations

import re

import numpy as np

_OUT = re.compile(r"out(0|[1-9][0-9]*)")
_IN = re.compile(r"in(0|[1-9][0-9]*)")  # inputs may share the file (`--expect` alone)


def key_problems(n_outputs: int, expected: dict) -> list[tuple[str, str]]:
    """(key, message) for each output the file lacks and each key that is neither an
    output of this module nor an input `inK`."""
    bad = []
    names = ", ".join(f"out{k}" for k in range(min(n_outputs, 4)))
    if n_outputs > 4:
        names += f", ..., out{n_outputs - 1}"
    for k in range(n_outputs):
        if f"out{k}" not in expected:
            bad.append((f"out{k}", "missing from the expected file"))
    for key in sorted(expected):
        m = _OUT.fullmatch(key)
        if m is not None and int(m.group(1)) < n_outputs:
            continue
        if _IN.fullmatch(key):
            continue
        what = "no output" if m is not None else "not an output key (outK) or input key (inK)"
        bad.append((key, f"in the expected file but {what}: the module has {n_outputs} "
                         f"output{'s' if n_outputs != 1 else ''} ({names or 'none'})"))
    return bad


def as_expected_dtype(got: np.ndarray, want: np.ndarray) -> tuple[np.ndarray, str | None]:
    """`want` seen as `got`'s dtype where the file could not say it (npz stores bf16 and the
    fp8 types as raw bytes), and a message when the dtypes differ."""
    if want.dtype.kind == "V" and want.dtype.itemsize == got.dtype.itemsize:
        return want.view(got.dtype), None
    if want.dtype != got.dtype:
        return want, f"dtype {_name(got.dtype)} != expected {_name(want.dtype)}"
    return want, None


def _name(dtype: np.dtype) -> str:
    from ..hlo import dtypes
    try:
        return dtypes.from_dtype(dtype)
    except Exception:  # a dtype no HLO element type has (object, str): numpy's name
        return str(dtype)
