"""One device: a module made ready to run (`prepare`: its context, thunk sequence and
kernels, checked for missing kernels and memory), then run on arguments (`run_prepared`).
`execute` does both; an Executable keeps what `prepare` made, so repeated calls pay for it
once."""
from __future__ import annotations

import contextlib

import statistics
import time
from dataclasses import dataclass

import numpy as np

from ..backends.common.errors import ExecutionError
from ..backends.cpu.blas_threads import restore, set_pooled, set_threads
from ..hlo.host import available_memory
from ..hlo.ir import Module
from .options import RunError, RunOptions, RunResult
from .outputs import leaves


def session_for(session=None, device: str | None = None):
    """`session` (a plugin.Session), or a session with no plugins on `device` when None.
    A `device` that is not the session's is refused: the session compiled for its own."""
    from ..plugin.session import Session
    if session is None:
        return Session(device=device or "cpu")
    if device is not None and device != session.device:
        raise ValueError(f"device '{device}' is not the session's device '{session.device}'")
    return session


# Buffers under this many bytes never wait for the memory available to be asked (two
# sysconf calls, ~2-5 us: a tenth of a one-op call): no machine that runs Python lacks them.
ALWAYS_FITS = 16 << 20


def check_memory(peak: int, max_memory: int | None, devices: int = 1) -> None:
    """Refuse a run whose buffers (`peak` per device) pass the limit, before it runs."""
    need = peak * devices
    if max_memory is None and need < ALWAYS_FITS:
        return
    limit = max_memory if max_memory is not None else available_memory()
    if need > limit:
        on = f" on {devices} devices" if devices > 1 else ""
        if max_memory is not None:
            unit, scale = _unit_of(limit)
            what = f"the --max-memory ({_in_unit(limit, unit, scale)})"
        else:
            unit, scale = _readable_unit(limit)
            what = f"the available memory ({_in_unit(limit, unit, scale)})"
        raise RunError(f"module needs about {_need_text(need, limit, unit, scale)} of "
                       f"buffers{on}, more than {what}; refusing to run")


_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def _unit_of(limit: int) -> tuple[str, int]:
    """The unit a limit was given in: the largest that writes it with at most one decimal
    (1K: KiB, 1.5G: GiB, 1030: bytes), so the message speaks the user's unit."""
    for unit, scale in _UNITS:
        if limit >= scale and (limit * 10) % scale == 0:
            return unit, scale
    return "bytes", 1


def _readable_unit(n: int) -> tuple[str, int]:
    """The largest unit that keeps a whole number in front (1.5 KiB, 12.0 MiB)."""
    for unit, scale in _UNITS:
        if n >= scale:
            return unit, scale
    return "bytes", 1


def _in_unit(n: int, unit: str, scale: int) -> str:
    return f"{n} bytes" if scale == 1 else f"{n / scale:g} {unit}"


def _need_text(need: int, limit: int, unit: str, scale: int) -> str:
    """`need` in the limit's unit, with the decimals that tell it apart from the limit
    (4300 bytes needed against a 4.2 KiB limit reads 4.2 and 4.2 otherwise)."""
    if scale == 1:
        return f"{need} bytes"
    for digits in (1, 2, 3):
        text = f"{need / scale:.{digits}f}"
        if float(text) > limit / scale:
            return f"{text} {unit}"
    return f"{need} bytes"


@dataclass
class Prepared:
    """A module ready to run on one device: its context (thunk sequence, compiled kernels,
    per-run caches), the bytes of buffers its sequence holds at most, and the BLAS threads
    each run sets once (`blas_threads`; None: leaves them as they are), and whether its large
    products take them on numba's threads (`blas_pool`: RunOptions')."""
    ctx: object
    peak: int
    blas_threads: int | None = None
    blas_pool: bool = False


def run_blas_threads(module: Module, options: RunOptions, ctx) -> int | None:
    """The BLAS threads of each run of `module` on `ctx`'s device alone: RunOptions'
    blas_threads, else from its largest product (backends/cpu/blas_threads.run_threads),
    the cores shared among the devices of its largest shard_map region; None off the host
    (CUDA's products run on the device)."""
    from ..backends.cpu.blas_threads import largest_product, run_threads
    from .spmd.shard_map import region_devices
    if not ctx.backend.on_host:
        return None
    return run_threads(largest_product(module), options.blas_threads, region_devices(module),
                       options.blas_yield)


def prepare(module: Module, session, options: RunOptions,
            fusion_min_elements: int | None = None, rng=None) -> Prepared:
    """`rng`: the rng ops' state (an Executable's for this device, kept across its runs;
    None: a fresh one)."""
    from .executor import ExecContext
    executor_options = options.executor_options()
    if fusion_min_elements is not None and not options.interpret:
        executor_options["fusion_min_elements"] = fusion_min_elements  # smaller: interpreted
    ctx = ExecContext(session.device, executor_options, overrides=session.resolve, rng=rng)
    seq = ctx.sequence(module.entry)
    _check_kernels(ctx, seq)
    return Prepared(ctx, seq.total_peak_bytes(), run_blas_threads(module, options, ctx),
                    options.blas_pool)


def run_prepared(prep: Prepared, module: Module, args: list, options: RunOptions,
                 profiler=None, progress=None,
                 checked: bool = False) -> tuple[list[np.ndarray], list[float]]:
    """The output leaves and the wall time of each of `options.repeat` runs.  A profiler,
    when given, times every thunk of every run but the first (which holds one-time setup:
    numba compiles, cache loads), or of the only run; one keeping a timeline also records
    the first run there (a trace shows the setup; the totals leave it out).  `progress`:
    called with (runs done, runs) after each run; `checked`: the caller checked the memory
    the run needs already."""
    ctx = prep.ctx
    if not checked:
        check_memory(prep.peak + sum(a.nbytes for a in leaves(tuple(args))),
                     options.max_memory)
    times, result = [], None
    for k in range(options.repeat):
        counted = k > 0 or options.repeat == 1
        timed = profiler if profiler is not None and (
            counted or profiler.timeline is not None) else None
        if timed is not None:
            timed.counting = counted
        with timed.run() if timed is not None else contextlib.nullcontext():
            t1 = time.perf_counter()
            result = run_once(ctx, module, args, timed, prep.blas_threads, prep.blas_pool)
            times.append(time.perf_counter() - t1)
        if progress is not None:
            progress(k + 1, options.repeat)
    return leaves(result), times


def run_once(ctx, module: Module, args: list, profiler=None, blas: int | None = None,
             pool: bool = False):
    """One run of the module's entry on `ctx` (host values in, host values out: inputs go to
    the device once, the result comes back once); a kernel's failure is a RunError.
    `blas`: the BLAS threads, set once for the run and restored after it (Prepared's);
    `pool`: on the host, the large products take that many of numba's threads instead,
    numpy's OpenBLAS one (blas_threads.set_pooled)."""
    if pool and ctx.backend.on_host:
        changed, threads = set_pooled(blas)
    else:
        changed, threads = (set_threads(blas) if blas is not None else None), 1
    ctx.begin_run(profiler=profiler, product_threads=threads)
    try:
        with np.errstate(all="ignore"):
            return ctx.memory.to_host(ctx.run(module.entry, ctx.memory.to_device(args)),
                                      module.entry.root.shape)
    except ExecutionError as e:
        raise RunError(str(e)) from None
    finally:
        if changed:
            restore(changed)
        ctx.end_run()


def execute(module: Module, args: list, session=None, *, device: str | None = None,
            options: RunOptions | None = None, fusion_min_elements: int | None = None,
            profiler=None, **changes) -> RunResult:
    """Run the module's entry on `args` for `session` (its device and plugin kernels; None:
    no plugins, on `device`, default the CPU) on one device: `options` (or RunOptions
    fields as keywords) say how."""
    options = RunOptions.of(options, **changes)
    t0 = time.perf_counter()
    prep = prepare(module, session_for(session, device), options, fusion_min_elements)
    compile_s = time.perf_counter() - t0
    outputs, times = run_prepared(prep, module, args, options, profiler)
    peak = prep.peak + sum(a.nbytes for a in leaves(tuple(args)))
    return RunResult(outputs, [outputs], {"compile_s": compile_s,
                                          "run_s": statistics.median(times)},
                     times, peak, profile=profiler)


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
