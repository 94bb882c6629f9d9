"""The one run path behind `Executable.run`: where a module's devices run -- one device here,
D devices in this process (threads or fibers), or this rank's devices under mpiexec -- chosen
from the module's grid and the launcher, never by the caller.  Every caller (the CLI,
`exe(*arrays)`, `xlaplug.jax`, `--reference xla`) gets the same RunResult."""
from __future__ import annotations

import statistics
import time

from ..hlo.errors import HloError
from .inputs import build_inputs, device_inputs
from .multi_run import preflight, run_in_process
from .options import RunError, RunOptions, RunResult
from .outputs import compare, compare_devices, leaves, stacked
from .runner import check_memory, run_prepared


def run_executable(exe, inputs: dict | None, options: RunOptions, expected: dict | None,
                   rtol: float | None, atol: float | None, progress=None) -> RunResult:
    """`progress(runs done, runs)`: called after each of `options.repeat` runs."""
    kept = exe.contexts
    grid = kept.grid(options)
    if options.engine == "xla":
        return _on_xla(exe, grid, inputs, options, expected, rtol, atol)
    with kept.lock:  # the kept contexts serve one run at a time
        if kept.under_mpi:
            return _over_mpi(exe, grid, inputs, options, expected, rtol, atol, progress)
        if grid.count > 1:
            return _in_process(exe, grid, inputs, options, expected, rtol, atol, progress)
        return _one_device(exe, grid, inputs, options, expected, rtol, atol, progress)


def _one_device(exe, grid, inputs, options, expected, rtol, atol, progress) -> RunResult:
    t0 = time.perf_counter()
    prep = exe.prepared(options)
    t1 = time.perf_counter()
    args = build_inputs(exe.module, inputs, options)
    profiler = None
    if options.profile or options.trace:
        from .profiler import Profiler
        profiler = Profiler(timeline=[] if options.trace else None)
    peak = prep.peak + sum(a.nbytes for a in leaves(tuple(args)))
    check_memory(peak, options.max_memory)
    outputs, times = run_prepared(prep, exe.module, args, options, profiler, progress,
                                  checked=True)
    mismatches = compare(outputs, expected, rtol, atol) if expected is not None else None
    trace = None
    if options.trace:
        trace = _trace(exe, grid, _process_events(exe, grid, (t0, t1), {0: profiler}))
    return RunResult(outputs, [outputs], _timings(t1 - t0, times), times, peak, grid,
                     profile=profiler if options.profile else None, mismatches=mismatches,
                     all_ok=not mismatches, trace=trace)


def _on_xla(exe, grid, inputs, options, expected, rtol, atol) -> RunResult:
    """XLA:CPU runs the module as read, plugin kernels served as FFI handlers: one device
    here, many on XLA's host devices (engine_devices.py), or this rank's under mpiexec.
    An error at a place in the module shows that line of the text as read (the file's)."""
    try:
        return _engine_run(exe, grid, inputs, options, expected, rtol, atol)
    except HloError as e:
        raise e.located(None, exe.source_text) from None


def _engine_run(exe, grid, inputs, options, expected, rtol, atol) -> RunResult:
    from .inputs import build_inputs
    if exe.contexts.under_mpi:  # this rank's device; its collectives over MPI
        from .mpi_engine import run_on_xla_over_mpi
        return run_on_xla_over_mpi(exe, grid, inputs, options, expected, rtol, atol)
    if exe.source_text is None:
        raise RunError("engine xla runs the module as read: compile it with keep_source=True")
    if grid.count > 1 or exe.contexts.global_devices(exe.source_text)[0] > 1:
        from .engine_devices import run_devices_on_xla  # XLA's host devices run them all
        return run_devices_on_xla(exe, grid, inputs, options, expected, rtol, atol)
    program = exe.contexts.engine_program(exe.source_text)  # compiled by the first run, kept
    res = program.run(build_inputs(exe.module, inputs, options), options.repeat)
    res.grid = grid
    res.mismatches = compare(res.outputs, expected, rtol, atol) if expected is not None else None
    res.all_ok = not res.mismatches
    return res


def _in_process(exe, grid, inputs, options, expected, rtol, atol, progress) -> RunResult:
    if options.profile:
        raise RunError(f"profiles a run on one device; this one runs on {grid.count} devices")
    t0 = time.perf_counter()
    per_inputs = device_inputs(exe.module, inputs, options, grid.count)
    contexts = exe.contexts.for_options(options)
    preflight(exe.module, grid, exe.contexts.peak(options), options, per_inputs[0])
    t1 = time.perf_counter()
    profilers = _profilers(options, range(grid.count))
    try:
        per_device, times = run_in_process(exe.module, grid, per_inputs, options=options,
                                           contexts=contexts,
                                           profilers=profilers and list(profilers.values()),
                                           progress=progress,
                                           threads=exe.contexts.devices(grid.count,
                                                                      options.device_threads),
                                           largest=exe.contexts.largest_product)
    except BaseException:  # a device may have been left anywhere: fresh threads next time
        exe.contexts.discard_devices(grid.count, options.device_threads)
        raise
    mismatches = (compare_devices(per_device, expected, rtol, atol)
                  if expected is not None else None)
    trace = None
    if profilers:
        trace = _trace(exe, grid, _process_events(exe, grid, (t0, t1), profilers))
    return RunResult(stacked(per_device), per_device, _timings(t1 - t0, times), times,
                     grid=grid, transport="threads", devices=tuple(range(grid.count)),
                     mismatches=mismatches, all_ok=not mismatches, trace=trace)


def _over_mpi(exe, grid, inputs, options, expected, rtol, atol, progress) -> RunResult:
    """This rank's devices.  With `options.gather` the inputs are every device's (each rank
    takes its own) and rank 0's result holds every device's outputs; without it the inputs
    and outputs are this rank's devices' only."""
    from ..backends.spmd.groups import DeviceGrid
    from ..backends.spmd.mpi import mpi_module
    from ..hlo.errors import HloError
    from .multi_run import run_over_mpi, stop_before_run
    if options.profile:
        raise RunError(f"profiles a run on one device; this one runs on {grid.count} devices")
    t0 = time.perf_counter()
    ranks = mpi_module().COMM_WORLD.Get_size()
    rank = mpi_module().COMM_WORLD.Get_rank()
    k = grid.count // ranks if grid.count % ranks == 0 else 1
    here = DeviceGrid(1, k)
    contexts = exe.contexts.for_options(options)
    try:  # (a failure here: the other ranks hear it before their first collective)
        if options.gather:
            per_inputs = device_inputs(exe.module, inputs, options, grid.count)
            args_of = per_inputs.__getitem__
        else:  # this rank's devices only: stacked over its k devices (or each one's own)
            mine = device_inputs(exe.module, inputs, options, k) if k > 1 else \
                [_own_inputs(exe.module, inputs, options, rank)]
            args_of = (lambda d: mine[d - rank * k])
        preflight(exe.module, here, exe.contexts.peak(options, rank * k), options,
                  args_of(rank * k))
    except HloError as e:
        stop_before_run(e, options.collective_timeout)
    t1 = time.perf_counter()
    profilers = _profilers(options, range(rank * k, rank * k + k))
    r = run_over_mpi(exe.module, grid, args_of, options=options, contexts=contexts,
                     expected=expected, rtol=rtol, atol=atol, profilers=profilers,
                     trace_events=profilers and (lambda: _process_events(
                         exe, grid, (t0, t1), profilers, rank, ranks)),
                     progress=progress)
    per_device = r["per_device"]
    outputs = per_device[0] if len(per_device) == 1 and not options.gather else \
        stacked(per_device)
    trace = _trace(exe, grid, r["events"], ranks=ranks) if r["events"] is not None else None
    return RunResult(outputs, per_device, _timings(t1 - t0, r["run_times"]), r["run_times"],
                     grid=grid, transport="mpi", rank=r["rank"], devices=r["devices"],
                     mismatches=r["mismatches"], all_ok=r["all_ok"], trace=trace)


def _own_inputs(module, inputs, options, device: int) -> list:
    """One device's arguments, given as its own values; the parameters not given are drawn
    as that device draws them in a whole run (seed, device)."""
    import numpy as np

    from .inputs import check_keys, fit_input, random_value
    if inputs is not None:
        check_keys(module, inputs, draw_missing=options.seed is not None)
    out = []
    for p in module.entry.parameters:
        key = f"in{p.parameter_number}"
        value = None if inputs is None else inputs.get(key)
        out.append(random_value(p.shape, np.random.default_rng([options.draw_seed, device]),
                                p.name)
                   if value is None else fit_input(value, p.shape, key, p.name, options.cast)[0])
    return out


def _profilers(options: RunOptions, devices) -> dict | None:
    """{device: a Profiler keeping a timeline} for a traced run, else None."""
    if not options.trace:
        return None
    from .profiler import Profiler
    return {d: Profiler(timeline=[]) for d in devices}


def _process_events(exe, grid, prepare: tuple[float, float], profilers: dict, rank: int = 0,
                    ranks: int = 0) -> list[dict]:
    """This process's trace events: its host phases (parse, passes, preparing the run's
    contexts) and its devices' tracks; under MPI (`ranks` > 0) one process per rank."""
    from .timeline import clock_offset_ns, device_events, host_events, process_events
    offset = clock_offset_ns()
    name = f"rank {rank}" if ranks else f"xlaplug run {exe.module.name}"
    events = process_events(rank, name)
    events += host_events([*exe.phases, ("prepare", *prepare)], rank, offset)
    communicates = _communicates(exe.session)
    for d, profiler in sorted(profilers.items()):
        events += device_events(profiler, d, grid, rank, offset, communicates)
    return events


def _communicates(session):
    """Whether a custom call's kernel (the session's, on its device) takes a communicator."""
    from ..plugin.attrs import op_name

    def communicates(ins) -> bool:
        name = op_name(ins)
        entry = session.registry.kernel_for(name, session.device) if name else None
        return bool(getattr(entry, "communicator", False))
    return communicates


def _trace(exe, grid, events: list[dict], ranks: int = 0) -> dict:
    from .timeline import chrome_trace
    other = {"module": exe.module.name, "replicas": grid.replicas,
             "partitions": grid.partitions}
    if ranks:
        other["mpi_ranks"] = ranks
    return chrome_trace(events, **other)


def _timings(compile_s: float, times: list[float]) -> dict[str, float]:
    return {"compile_s": compile_s, "run_s": statistics.median(times)}
