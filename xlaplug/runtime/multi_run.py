"""A module on many devices: in one process (threads or fibers), or under `mpiexec -n N` one
device per MPI rank (N = D) or D / N devices per rank on threads (N divides D).  Device d is
replica d // P, partition d % P, as XLA numbers them (backends/spmd/groups.py)."""
from __future__ import annotations

import contextlib
import statistics
import time

import numpy as np

from ..backends.spmd.groups import DeviceGrid
from ..hlo.errors import plural
from ..hlo.ir import Module
from .options import RunError, RunOptions
from .outputs import compare_devices, leaves


def grid_for(module: Module, replicas: int | None, partitions: int | None) -> DeviceGrid:
    """The flags, else the module header's replica_count / num_partitions, else 1."""
    header = DeviceGrid.of_module(module)
    r = replicas if replicas is not None else header.replicas
    p = partitions if partitions is not None else header.partitions
    if r < 1 or p < 1:
        raise RunError(f"--replicas and --partitions must be at least 1 (got {r} x {p})")
    return DeviceGrid(r, p)


def run_in_process(module: Module, grid: DeviceGrid, args: list[list], *, options: RunOptions,
                   contexts, profilers=None, progress=None, threads=None,
                   largest: int | None = None) -> tuple[list, list]:
    """Every device's output leaves, and the wall time of each of `options.repeat` runs.
    `contexts(d)`: device d's run context (an Executable's kept ones: thunk sequences,
    compiled kernels, rng state); `profilers`: one per device (profiler.Profiler), to time
    every kernel call; `progress`: called with (runs done, runs) after each run; `threads`:
    the kept threads or fibers the devices run on (None: made for this call); `largest`:
    the module's largest product (blas_threads.largest_product; None: found here), from
    which each run's BLAS threads are set once (spmd/runner.blas_for_devices)."""
    from ..backends.common.errors import ExecutionError
    from ..backends.cpu.blas_threads import largest_product
    from .spmd.runner import blas_for_devices, devices_for, run_devices
    times, results = [], None
    # Devices (threads or fibers: runner.devices_for) made once for every repeat (or kept by
    # the executable for every call), as XLA runs one executable many times.
    with (contextlib.nullcontext(threads) if threads is not None
          else devices_for(module, grid.count, options.device_threads)) as threads:
        blas = blas_for_devices(largest_product(module) if largest is None else largest,
                                options.blas_threads, grid.count, threads,
                                options.blas_yield)
        for _ in range(options.repeat):
            t0 = time.perf_counter()
            try:
                with np.errstate(all="ignore"):
                    results = run_devices(module, args, grid, contexts,
                                          options.collective_timeout, threads, profilers,
                                          blas_threads=blas)
            except ExecutionError as e:
                raise RunError(str(e)) from None
            times.append(time.perf_counter() - t0)
            if progress is not None:
                progress(len(times), options.repeat)
    return [leaves(r) for r in results], times


def _message(e: BaseException) -> str:
    """An error's one-line message, without an HloError's `FILE: error:` prefix."""
    from ..hlo.errors import HloError
    text = e.message if isinstance(e, HloError) else str(e)
    return text.splitlines()[0] if text else type(e).__name__


def _rank_blas_threads(module: Module, options: RunOptions, k: int, ranks: int,
                       host: bool) -> int | None:
    """The BLAS threads of this rank's runs (blas_threads.run_threads): its k devices and
    the other ranks on this host share its cores; None off the host (CUDA)."""
    from ..backends.cpu.blas_threads import largest_product, run_threads
    from .mpi_engine import local_ranks
    if not host:
        return None
    return run_threads(largest_product(module), options.blas_threads, k * local_ranks(ranks),
                       options.blas_yield)


class QuietStop(Exception):
    """This rank stops because another failed (that rank reports); exit non-zero quietly."""


def run_over_mpi(module: Module, grid: DeviceGrid, args_of_device, *, options: RunOptions,
                 contexts, expected: dict | None, rtol, atol,
                 profilers: dict | None = None, trace_events=None, progress=None,
                 execute=None) -> dict:
    """This rank's devices (D / ranks of them: one, or several on threads), `options.repeat`
    times.  Returns {"rank", "devices", "per_device", "run_times", "mismatches", "all_ok",
    "events"}: this rank's devices -- with `options.gather`, rank 0's holds every device's
    outputs, mismatches, trace events and the slowest rank's run times.  `contexts(d)`:
    device d's run context (an Executable's kept ones); `profilers`:
    {device: profiler.Profiler} for this rank's devices; `trace_events()`: this rank's trace
    events once it has run (None: no trace); `progress`: (runs done, runs) after each run;
    `execute(ctx, args)`: (the last run's outputs, [seconds of each run]) where another
    engine runs the rank's one device (`--engine xla`: runtime/mpi_engine.py), else the
    interpreter runs it."""
    from ..backends.common.errors import ExecutionError
    from ..backends.spmd.place import Place
    from ..backends.spmd.mpi import MpiTransport
    from ..backends.spmd.rendezvous import Aborted
    from .spmd.agreement import RankFailedBeforeRun, agree_on_run
    from ..backends.cpu.blas_threads import for_run
    from .spmd.mpi_threads import run_rank_devices
    from .spmd.runner import DeviceError, collective_groups
    timeout = options.collective_timeout
    try:
        transport = MpiTransport(timeout)
    except ExecutionError as e:  # a rank that never came: no channel to tell the others
        err = RunError(f"rank {mpi_rank()}: {_message(e)}")
        err.rank_local = True
        raise err from None
    try:  # the same module, grid and options everywhere, or every rank stops here
        agree_on_run(transport, module, grid, options)
    except (Aborted, RankFailedBeforeRun):  # (the rank that failed reports)
        raise QuietStop() from None
    except ExecutionError as e:  # a rank that never came (the timeout's message names it)
        raise _reported(transport, e, "rank", transport.rank) from None
    if grid.count % transport.size:  # every rank sees it: rank 0 reports
        if transport.rank != 0:
            raise QuietStop()
        raise RunError(f"the module runs on {grid.count} devices ("
                       f"{plural(grid.replicas, 'replica')} x "
                       f"{plural(grid.partitions, 'partition')}) but mpiexec started "
                       f"{plural(transport.size, 'process', 'processes')}: use mpiexec -n {grid.count} (or a divisor of "
                       f"{grid.count}: several devices per process)")
    rank, k = transport.rank, grid.count // transport.size
    blas = _rank_blas_threads(module, options, k, transport.size,
                              contexts(rank * k).backend.on_host)
    times = []
    try:
        if k == 1:
            transport.prepare(collective_groups(module, grid))
            ctx = contexts(rank)
            args = ctx.memory.to_device(args_of_device(rank))
        else:  # the leaders of a rank's devices talk point to point: no communicators
            transport.prepare([])
        runs = range(options.repeat)
        if execute is not None:  # another engine runs the rank's one device
            ctx.begin_run(spmd=Place(grid, rank, transport))
            try:
                last, times = execute(ctx, args)
            finally:
                ctx.end_run()
            outs, runs = [last], ()
        for _ in runs:
            t0 = time.perf_counter()
            if k == 1:
                ctx.begin_run(profiler=(profilers or {}).get(rank),
                              spmd=Place(grid, rank, transport))
                try:
                    with np.errstate(all="ignore"), for_run(blas):
                        outs = [ctx.memory.to_host(ctx.run(module.entry, args),
                                                   module.entry.root.shape)]
                finally:
                    ctx.end_run()
            else:
                outs = run_rank_devices(module, grid, transport, contexts, args_of_device,
                                        timeout, profilers, blas)
            times.append(time.perf_counter() - t0)
            if progress is not None:
                progress(len(times), options.repeat)
        mine = [leaves(o) for o in outs]
        bad = compare_devices(mine, expected, rtol, atol, rank * k) if expected else []
        events = trace_events() if trace_events is not None else None
        payload = (mine, bad, times, events) if options.gather else None
        all_ok, gathered = transport.finish(not bad, payload)
    except Aborted:
        raise QuietStop() from None
    except (ExecutionError, RunError, Exception) as e:  # noqa: BLE001 - others must hear it
        raise _reported(transport, e, "device" if k == 1 else "rank", rank,
                        isinstance(e, DeviceError)) from None
    result = {"rank": rank, "devices": tuple(range(rank * k, rank * k + k)), "per_device": mine,
              "run_times": times, "mismatches": bad if expected is not None else None,
              "all_ok": all_ok, "events": events}
    if options.gather and gathered is not None:  # rank 0: every device, the slowest rank's times
        slowest = max(gathered, key=lambda g: statistics.median(g[2]))
        result.update(devices=tuple(range(grid.count)),
                      per_device=[dev for g in gathered for dev in g[0]],
                      run_times=slowest[2],
                      mismatches=[m for g in gathered for m in g[1]]
                      if expected is not None else None,
                      events=[e for g in gathered for e in g[3]] if events is not None else None)
    return result


def mpi_rank() -> int:
    from ..backends.spmd.mpi import mpi_module
    return mpi_module().COMM_WORLD.Get_rank()


def start_mpi() -> bool:
    """Under mpiexec (more than one rank): MPI started now, True; else False (nothing
    imported).  Every rank starts it before anything can fail: a rank that ended before
    MPI_Init left the others blocked in it for good."""
    from ..backends.spmd.mpi import launched_by_mpi, mpi_module
    if not launched_by_mpi():
        return False
    mpi_module()
    return True


def stop_before_run(e: BaseException, timeout: float):
    """This rank failed before the run, under mpiexec: the others hear it at once
    (agreement.failed_before_run) instead of waiting for it until the timeout.  Raises
    `e`, marked to be reported by this rank, or QuietStop where another rank reports."""
    from .spmd.agreement import failed_before_run
    if failed_before_run(_message(e), timeout):
        e.rank_local = True
        raise e
    raise QuietStop()


def _reported(transport, e: BaseException, unit: str, where: int, named: bool = False):
    """What this rank raises after failing: the others are told (they stop quietly); of
    ranks that failed together (a shared timeout, a collective they disagree on) the
    lowest reports.  `named`: the message names its device already."""
    text = _message(e)
    transport.abort_others(text)
    if transport.outranked():
        return QuietStop()
    err = RunError(text if named else f"{unit} {where}: {text}")
    err.rank_local = True  # only this rank knows it: it reports, whatever its rank
    return err


def preflight(module: Module, grid: DeviceGrid, peak: int, options: RunOptions,
              args: list) -> None:
    """Refuse before running: buffers past the limit (`peak` per device, as the context
    checked for missing kernels says, and the arguments; every device of this process
    counted)."""
    from .runner import check_memory
    check_memory(peak + sum(a.nbytes for a in leaves(tuple(args))), options.max_memory,
                 grid.count)
