"""`xlaplug run`: inputs, execution, outputs, comparison, guards, timings."""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field

import numpy as np

from ..hlo import dtypes
from ..hlo.host import available_memory
from ..hlo.errors import HloError
from ..hlo.ir import Module, Shape


class RunError(HloError):
    """A user-facing failure of a run (bad inputs, guard tripped, kernel failure)."""


# ---- inputs --------------------------------------------------------------------------------

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


# ---- outputs -------------------------------------------------------------------------------

def leaves(value) -> list[np.ndarray]:
    """Host arrays of a value's leaves, depth-first through tuples (out0, out1, ...)."""
    from ..backends.device import flatten
    return [np.asarray(v) for v in flatten(value)]


DEFAULT_TOL = {"f16": (1e-3, 1e-3), "bf16": (1e-2, 1e-2), "f32": (1e-5, 1e-6),
               "f64": (1e-12, 1e-12), "c64": (1e-5, 1e-6), "c128": (1e-12, 1e-12)}


@dataclass
class Mismatch:
    leaf: str
    message: str


def compare(outputs: list[np.ndarray], expected: dict, rtol: float | None,
            atol: float | None) -> list[Mismatch]:
    bad: list[Mismatch] = []
    for k, got in enumerate(outputs):
        key = f"out{k}"
        if key not in expected:
            continue
        want = np.asarray(expected[key])
        if want.dtype.kind == "V" and want.dtype.itemsize == got.dtype.itemsize:
            want = want.view(got.dtype)
        if got.shape != want.shape:
            bad.append(Mismatch(key, f"shape {got.shape} != expected {want.shape}"))
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


# ---- guards --------------------------------------------------------------------------------

def parse_bytes(text: str) -> int:
    """A size such as 512M, 2G, 1.5GiB or 1000000 as a positive number of bytes."""
    from .driver import OptionError
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    scale = 1
    if t and t[-1] in mult:
        t, scale = t[:-1], mult[t[-1]]
    try:
        value = float(t)
    except ValueError:
        raise OptionError(f"--max-memory: cannot read '{text}' as a size (e.g. 512M, 2G)") from None
    if not math.isfinite(value) or value * scale > 1 << 62:
        raise OptionError(f"--max-memory: '{text}' is too large a size (e.g. 512M, 2G)")
    if value * scale < 1:
        raise OptionError(f"--max-memory: must be a positive size, got '{text}'")
    return int(value * scale)


@dataclass
class RunResult:
    outputs: list[np.ndarray]
    timings: dict[str, float]
    peak_bytes: int
    run_times: list[float] = field(default_factory=list)


def session_for(session=None, device: str | None = None):
    """`session` (a plugin.Session), or a session with no plugins on `device` when None.
    A `device` that is not the session's is refused: the session compiled for its own."""
    from ..plugin.session import Session
    if session is None:
        return Session(device=device or "cpu")
    if device is not None and device != session.device:
        raise ValueError(f"device '{device}' is not the session's device '{session.device}'")
    return session


def run_options(seed: int, max_while_iterations: int | None, interpret: bool) -> dict:
    """The executor options of one run, on one device or many."""
    options = {"max_while_iterations": max_while_iterations, "seed": seed}
    if interpret:  # no compiled fusions or while loops: every instruction its own kernel
        options.update(fusion_min_elements=1 << 62, interpret_loops=True)
    return options


def execute(module: Module, args: list, session=None, *, device: str | None = None,
            repeat: int = 1, max_memory: int | None = None,
            max_while_iterations: int | None = None, seed: int = 0,
            fusion_min_elements: int | None = None, interpret: bool = False,
            profiler=None) -> RunResult:
    """Run the module's entry on `args` for `session` (its device and plugin kernels; None:
    no plugins, on `device`, default the CPU), `repeat` times after one setup.  A
    backends.profiler.Profiler, when given, times every thunk of every run but the first
    (which holds one-time setup: numba compiles, cache loads), or of the only run."""
    from ..backends.common.errors import ExecutionError
    from .executor import ExecContext
    t0 = time.perf_counter()
    session = session_for(session, device)
    options = run_options(seed, max_while_iterations, interpret)
    if fusion_min_elements is not None and not interpret:
        options["fusion_min_elements"] = fusion_min_elements  # smaller fusions interpreted
    ctx = ExecContext(session.device, options, overrides=session.resolve)
    seq = ctx.sequence(module.entry)
    _check_kernels(ctx, seq)
    peak = seq.total_peak_bytes() + sum(a.nbytes for a in leaves(tuple(args)))
    limit = max_memory if max_memory is not None else available_memory()
    if peak > limit:
        raise RunError(f"module needs about {peak / 2**20:.1f} MiB of buffers, more than the "
                       f"{'--max-memory' if max_memory is not None else 'available memory'} "
                       f"({limit / 2**20:.1f} MiB); refusing to run")
    compile_s = time.perf_counter() - t0
    times, result = [], None
    for k in range(max(repeat, 1)):
        ctx.profiler = profiler if profiler is not None and (k > 0 or repeat == 1) else None
        t1 = time.perf_counter()
        try:
            with np.errstate(all="ignore"):
                # Inputs go to the device once per run; the result comes back once.
                result = ctx.memory.to_host(ctx.run(module.entry, ctx.memory.to_device(args)),
                                           module.entry.root.shape)
        except ExecutionError as e:
            raise RunError(str(e)) from None
        times.append(time.perf_counter() - t1)
        if ctx.profiler is not None:
            profiler.finish_run()
    return RunResult(leaves(result), {"compile_s": compile_s, "run_s": statistics.median(times)},
                     peak, times)


def _check_kernels(ctx, seq) -> None:
    """Refuse before running when any instruction has no kernel (names the first one)."""
    for t in seq.thunks:
        if t.kernel is None and t.ins.opcode != "parameter":
            try:
                ctx._missing(t.ins)
            except Exception as e:
                raise RunError(str(e)) from None
        for s in t.nested:
            _check_kernels(ctx, s)
