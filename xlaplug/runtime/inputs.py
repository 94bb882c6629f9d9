"""A run's arguments: from a dict of `inK` arrays (an npz), checked against the entry's
parameters, and seeded random values for the parameters not given.  On D devices an input is
the parameter's own shape (every device gets it) or stacked on a new leading axis of length D
(index = device id); devices with no input draw their own (seed, device)."""
from __future__ import annotations

import numpy as np

from ..hlo import dtypes
from ..hlo.ir import Module, Shape
from .options import RunError


def random_value(shape: Shape, rng: np.random.Generator, name: str):
    if shape.is_tuple:
        return tuple(random_value(s, rng, name) for s in shape.tuple_shapes)
    if shape.is_token:
        return np.zeros((), np.bool_)
    if not shape.is_static:
        raise RunError(f"parameter '{name}' has dynamic shape {shape}: give its value with --inputs")
    t, dims = shape.element_type, shape.dims
    if t == "pred":
        return rng.random(dims) < 0.5
    if dtypes.is_complex(t):
        return (rng.standard_normal(dims) + 1j * rng.standard_normal(dims)).astype(shape.dtype)
    if dtypes.is_float(t):
        return rng.standard_normal(dims).astype(np.float32).astype(shape.dtype)
    # Small integers in [-8, 8], clipped to the type's range (s2/u2/s4 ... stay valid).
    w, signed = dtypes.bit_width(t), not dtypes.is_unsigned(t)
    lo = max(-8, -(2 ** (w - 1))) if signed else 0
    hi = min(8, 2 ** (w - signed) - 1)
    return rng.integers(lo, hi + 1, size=dims).astype(shape.dtype)


def coerce_input(value: np.ndarray, shape: Shape, name: str):
    if shape.is_tuple:
        raise RunError(f"parameter '{name}' is a tuple {shape}: tuple inputs are not read from npz")
    arr = np.asarray(value)
    want = shape.dtype
    if tuple(arr.shape) != tuple(d for d in shape.dims) and shape.is_static:
        raise RunError(f"input for parameter '{name}' has shape {tuple(arr.shape)}, the "
                       f"parameter is {shape}")
    if arr.dtype != want:
        if arr.dtype.kind == "V" and arr.dtype.itemsize == want.itemsize:
            arr = arr.view(want)  # npz stores ml_dtypes arrays as raw bytes
        elif arr.dtype.kind in "OUSV" or (arr.dtype.kind == "c" and want.kind != "c"):
            # strings, objects, records; complex into a real type would drop a part
            raise RunError(f"input for parameter '{name}' has dtype {arr.dtype}, which does "
                           f"not convert to the parameter's {shape.element_type}")
        else:
            arr = arr.astype(want)
    return arr


def build_inputs(module: Module, npz: dict | None, seed: int) -> list:
    rng = np.random.default_rng(seed)
    args = []
    for p in module.entry.parameters:
        key = f"in{p.parameter_number}"
        if npz is not None and key in npz:
            args.append(coerce_input(npz[key], p.shape, p.name))
        else:
            args.append(random_value(p.shape, rng, p.name))
    return args


def device_inputs(module: Module, npz: dict | None, seed: int, n: int) -> list[list]:
    """Each device's argument list (see the module docstring for the npz layout)."""
    per: list[list] = [[] for _ in range(n)]
    for p in module.entry.parameters:
        key = f"in{p.parameter_number}"
        value = None if npz is None else npz.get(key)
        if value is None:
            for d in range(n):
                per[d].append(random_value(p.shape, np.random.default_rng([seed, d]), p.name))
            continue
        value = np.asarray(value)
        dims = tuple(p.shape.dims) if p.shape.is_array else None
        if dims is not None and value.shape == (n,) + dims and n > 1:
            for d in range(n):
                per[d].append(coerce_input(value[d], p.shape, p.name))
        elif dims is None or value.shape == dims or not p.shape.is_static:
            v = coerce_input(value, p.shape, p.name)
            for d in range(n):
                per[d].append(v)
        else:
            raise RunError(f"input {key} for parameter '{p.name}' has shape {value.shape}: "
                           f"expected {dims} (the same for every device) or {(n,) + dims} "
                           f"(one per device, {n} devices)")
    return per
