"""A run's arguments, checked and never guessed: from a dict of `inK` arrays (an npz, or
`exe(*arrays)`'s arguments), each the parameter's own dtype and shape, and seeded random
values for the parameters not given -- only when asked for (a seed given, or no inputs at
all).  An unknown key, a missing parameter, or a dtype or shape that differs is an error
naming the parameter, what it takes and what it got; `cast` converts dtypes on purpose.
On D devices an input is the parameter's own shape (every device gets it) or stacked on a
new leading axis of length D (index = device id); devices with no input draw their own
(seed, device).  Raw bytes of the same itemsize (how npz stores ml_dtypes arrays such as
bf16) are viewed as the parameter's type: that is a reading, not a cast."""
from __future__ import annotations

import numpy as np

from ..hlo import dtypes
from ..hlo.errors import plural
from ..hlo.ir import Module, Shape
from .options import RunError, RunOptions

_CAST_HINT = "(--cast, or cast=True in the API, converts it)"


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


def check_keys(module: Module, inputs: dict, draw_missing: bool) -> None:
    """Every key names a parameter (`in0`, `in1`, ...), and every parameter has a key unless
    the missing ones are to be drawn (`draw_missing`: a seed was given)."""
    params = module.entry.parameters
    want = [f"in{p.parameter_number}" for p in params]
    unknown = [k for k in inputs if k not in want]
    if unknown:
        expected = (f"the keys it takes are {', '.join(want)}" if want else
                    "the module takes no parameters")
        raise RunError(f"unknown input key{'s' if len(unknown) > 1 else ''} "
                       f"{', '.join(repr(str(k)) for k in unknown)}: {expected} (one per "
                       f"parameter, in order)")
    missing = [p for p, k in zip(params, want) if k not in inputs]
    if missing and not draw_missing:
        named = ", ".join(f"in{p.parameter_number} (parameter '{p.name}', "
                          f"{_param_text(p.shape)})" for p in missing)
        raise RunError(f"no input for {named}: give every parameter, or a seed (--seed, "
                       f"seed= in the API) to draw the missing ones at random")


def fit_input(value, shape: Shape, key: str, name: str, cast: bool, devices: int = 1):
    """`value` as parameter `name`'s array: on `devices` > 1 either its own shape or
    stacked `[devices, ...]`; returns (array, stacked)."""
    if not shape.is_array:
        raise RunError(f"input {key} for parameter '{name}': the parameter is {shape}: only "
                       f"array parameters are given as inputs")
    want = shape.dtype
    if type(value) is np.ndarray and value.dtype == want:  # nothing to check or convert:
        if value.shape == shape.dims:  # the parameter's own dtype and shape
            return value, False
        if devices > 1 and value.shape[:1] == (devices,) and value.shape[1:] == shape.dims:
            return value, True  # every device's, stacked (each exe(*arrays) call of D > 1)
    arr = _as_array(value, want, key, name)
    if arr.dtype != want and arr.dtype.kind == "V" and arr.dtype.fields is None \
            and arr.dtype.itemsize == want.itemsize:
        arr = arr.view(want)  # npz stores ml_dtypes arrays (bf16, f8, int4) as raw bytes
    stacked = devices > 1 and arr.ndim == shape.rank + 1 and arr.shape[0] == devices \
        and _shape_fits(arr.shape[1:], shape)
    if not stacked and not _shape_fits(arr.shape, shape):
        raise RunError(f"input {key} for parameter '{name}' is {_value_text(arr)}; "
                       f"{_takes(shape, devices)}")
    if arr.dtype != want:
        numeric = arr.dtype.kind in "biufc" or arr.dtype.type.__module__.startswith("ml_dtypes")
        if not numeric:
            why = "(no cast converts it: not a numeric type)"
        elif arr.dtype.kind == "c" and want.kind != "c":
            why = "(no cast converts it: a complex value would lose its imaginary part)"
        else:
            why = None if cast else _CAST_HINT
        if why is not None:
            raise RunError(f"input {key} for parameter '{name}' is {_value_text(arr)}; "
                           f"{_takes(shape, devices)} {why}")
        arr = arr.astype(want)
    return arr, stacked


def device_inputs(module: Module, inputs: dict | None, options: RunOptions,
                  n: int) -> list[list]:
    """Each of `n` devices' argument list (see the module docstring); without inputs
    every parameter is drawn, device d from (seed, d)."""
    seed = options.draw_seed
    if inputs is not None:
        check_keys(module, inputs, draw_missing=options.seed is not None)
    per: list[list] = [[] for _ in range(n)]
    for p in module.entry.parameters:
        key = f"in{p.parameter_number}"
        if inputs is None or key not in inputs:
            for d in range(n):
                per[d].append(random_value(p.shape, np.random.default_rng([seed, d]), p.name))
            continue
        arr, stacked = fit_input(inputs[key], p.shape, key, p.name, options.cast, n)
        for d in range(n):
            per[d].append(arr[d] if stacked else arr)
    return per


def build_inputs(module: Module, inputs: dict | None, options: RunOptions) -> list:
    """One device's argument list; the parameters drawn come from one generator seeded
    with the seed, in parameter order."""
    if inputs is not None:
        check_keys(module, inputs, draw_missing=options.seed is not None)
    rng = None  # made when a parameter is drawn
    args = []
    for p in module.entry.parameters:
        key = f"in{p.parameter_number}"
        if inputs is not None and key in inputs:
            args.append(fit_input(inputs[key], p.shape, key, p.name, options.cast)[0])
        else:
            if rng is None:
                rng = np.random.default_rng(options.draw_seed)
            args.append(random_value(p.shape, rng, p.name))
    return args


def _as_array(value, want: np.dtype, key: str, name: str) -> np.ndarray:
    """A numpy array of `value`.  A Python scalar has no precision of its own (jax calls it
    weakly typed): it takes the parameter's dtype when its kind fits (a bool a pred, an int
    any numeric type it fits in, a float a float or complex type, a complex a complex one)."""
    if isinstance(value, (bool, int, float, complex)) and not isinstance(value, np.generic):
        kinds = {bool: "b", int: "iufc", float: "fc", complex: "c"}.get(type(value), "")
        if want.kind in kinds or (want.type.__module__.startswith("ml_dtypes")
                                  and not isinstance(value, (bool, complex))):
            try:
                return np.asarray(value, dtype=want)
            except OverflowError:
                raise RunError(f"input {key} for parameter '{name}': {value} does not fit "
                               f"in {dtypes.from_dtype(want)}") from None
    try:
        return np.asarray(value)
    except (ValueError, TypeError) as e:
        raise RunError(f"input {key} for parameter '{name}' is not an array: "
                       f"{str(e).splitlines()[0]}") from None


def _shape_fits(dims: tuple, shape: Shape) -> bool:
    """`dims` are the parameter's: equal, or within the bound of a dynamic dimension."""
    if len(dims) != shape.rank:
        return False
    return all(d <= bound if dyn else d == bound
               for d, bound, dyn in zip(dims, shape.dims, shape.dynamic))


def _param_text(shape: Shape) -> str:
    return str(shape.without_layout())


def _value_text(arr: np.ndarray) -> str:
    """An array's type as HLO writes one (`f64[2,3]`), or numpy's dtype name when XLA has
    no such type."""
    try:
        t = dtypes.from_dtype(arr.dtype)
    except ValueError:
        t = str(arr.dtype)
    return f"{t}[{','.join(str(d) for d in arr.shape)}]"


def _takes(shape: Shape, devices: int) -> str:
    own = _param_text(shape)
    if devices == 1 or not shape.is_array:
        return f"the parameter is {own}"
    dims = ",".join(str(d) for d in (devices, *shape.dims))
    return (f"the parameter is {own}: give {own} (every device gets it) or "
            f"{shape.element_type}[{dims}] (stacked: one per device, "
            f"{plural(devices, 'device')})")
