"""`xlaplug run` on many devices: in one process (threads or fibers), or under `mpiexec -n N`
one device per MPI rank (N = D) or D / N devices per rank on threads (N divides D).

npz layout, for D = replicas x partitions devices (device d = replica d // P, partition
d % P): an input `inK` holds either the parameter's own shape (every device gets it) or one
value per device stacked on a new leading axis of length D; outputs `outK` are stacked the
same way; an expected `outK` may be stacked (each device checked against its own) or not
(every device checked against it), and a mismatch names the device.  Devices with no input
given draw their own random values (seed + device).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..backends.spmd.groups import DeviceGrid
from ..hlo.ir import Module
from .runner import Mismatch, RunError, coerce_input, compare, leaves, random_value


def grid_for(module: Module, replicas: int | None, partitions: int | None) -> DeviceGrid:
    """The flags, else the module header's replica_count / num_partitions, else 1."""
    header = DeviceGrid.of_module(module)
    r = replicas if replicas is not None else header.replicas
    p = partitions if partitions is not None else header.partitions
    if r < 1 or p < 1:
        raise RunError(f"--replicas and --partitions must be at least 1 (got {r} x {p})")
    return DeviceGrid(r, p)


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


def stacked(per_device: list[list[np.ndarray]]) -> list[np.ndarray]:
    """Output leaves of every device, stacked on a new leading axis (device order)."""
    return [np.stack([dev[k] for dev in per_device]) for k in range(len(per_device[0]))]


def compare_devices(per_device: list[list[np.ndarray]], expected: dict, rtol, atol,
                    first_device: int = 0) -> list[Mismatch]:
    n_total = len(per_device)
    bad: list[Mismatch] = []
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
        for m in compare(outs, mine, rtol, atol):
            bad.append(Mismatch(f"{m.leaf} device {d}", m.message))
    return bad


@dataclass
class MultiResult:
    grid: DeviceGrid
    per_device: list[list[np.ndarray]]   # [device][leaf]
    timings: dict[str, float]
    mismatches: list[Mismatch] | None = None
    rank: int = 0
    all_ok: bool = True
    run_times: list[float] = field(default_factory=list)

    @property
    def outputs(self) -> list[np.ndarray]:
        return stacked(self.per_device)


def _context_factory(device, options, overrides):
    from .executor import ExecContext
    return lambda d: ExecContext(device, options, overrides=overrides)


def run_in_process(module: Module, grid: DeviceGrid, args: list[list], *, device: str,
                   options: dict, overrides, timeout: float, repeat: int = 1,
                   first_context=None) -> MultiResult:
    """`first_context`: device 0's context when one is made already (preflight's)."""
    from ..backends.common.errors import ExecutionError
    from .spmd.runner import devices_for, run_devices
    times, results = [], None
    # Devices (threads or fibers: runner.devices_for) and contexts (thunk sequences,
    # compiled kernels, collective buffers) made once for every repeat, as XLA runs one
    # executable many times.
    make = _context_factory(device, options, overrides)
    contexts = [first_context if d == 0 and first_context is not None else make(d)
                for d in range(grid.count)]
    with devices_for(module, grid.count) as threads:
        for _ in range(max(repeat, 1)):
            t0 = time.perf_counter()
            try:
                with np.errstate(all="ignore"):
                    results = run_devices(module, args, grid, contexts.__getitem__,
                                          timeout, threads)
            except ExecutionError as e:
                raise RunError(str(e)) from None
            times.append(time.perf_counter() - t0)
    return MultiResult(grid, [leaves(r) for r in results],
                       {"run_s": float(np.median(times))}, run_times=times)


def _message(e: BaseException) -> str:
    """An error's one-line message, without an HloError's `FILE: error:` prefix."""
    from ..hlo.errors import HloError
    text = e.message if isinstance(e, HloError) else str(e)
    return text.splitlines()[0] if text else type(e).__name__


class QuietStop(Exception):
    """This rank stops because another failed (that rank reports); exit non-zero quietly."""


def run_over_mpi(module: Module, grid: DeviceGrid, args_of_device, *, device: str,
                 options: dict, overrides, timeout: float, expected: dict | None, rtol,
                 atol, context=None) -> MultiResult:
    """This rank's devices (D / ranks of them: one, or several on threads); rank 0's result
    holds every device's outputs and mismatches.  `context`: the context of a rank's one
    device when one is made already (preflight's)."""
    from ..backends.common.errors import ExecutionError
    from .executor import ExecContext
    from ..backends.spmd.kernels import Place
    from ..backends.spmd.mpi import MpiTransport
    from .spmd.mpi_threads import run_rank_devices
    from ..backends.spmd.rendezvous import Aborted
    from .spmd.runner import DeviceError, collective_groups
    transport = MpiTransport(timeout)
    if grid.count % transport.size:  # every rank sees it: rank 0 reports
        if transport.rank != 0:
            raise QuietStop()
        raise RunError(f"the module runs on {grid.count} devices ({grid.replicas} replicas x "
                       f"{grid.partitions} partitions) but mpiexec started {transport.size} "
                       f"processes: use mpiexec -n {grid.count} (or a divisor of "
                       f"{grid.count}: several devices per process)")
    rank, k = transport.rank, grid.count // transport.size
    t0 = time.perf_counter()
    try:
        if k == 1:
            transport.prepare(collective_groups(module, grid))
            ctx = context or ExecContext(device, options, overrides=overrides)
            ctx.spmd = Place(grid, rank, transport)
            with np.errstate(all="ignore"):
                outs = [ctx.memory.to_host(ctx.run(module.entry, ctx.memory.to_device(
                    args_of_device(rank))), module.entry.root.shape)]
        else:  # the leaders of a rank's devices talk point to point: no communicators
            transport.prepare([])
            outs = run_rank_devices(module, grid, transport,
                                    _context_factory(device, options, overrides),
                                    args_of_device, timeout)
        mine = [leaves(o) for o in outs]
        bad = compare_devices(mine, expected, rtol, atol, rank * k) if expected else []
        run_s = time.perf_counter() - t0
        all_ok, gathered = transport.finish(not bad, (mine, bad, run_s))
    except Aborted:
        raise QuietStop() from None
    except (ExecutionError, RunError, Exception) as e:  # noqa: BLE001 - others must hear it
        text = _message(e)
        transport.abort_others(text)
        if transport.outranked():  # a lower rank failed too (a shared timeout): it reports
            raise QuietStop() from None
        err = RunError(text if isinstance(e, DeviceError) else
                       f"{'device' if k == 1 else 'rank'} {rank}: {text}")
        err.rank_local = True  # only this rank knows it: it reports, whatever its rank
        raise err from None
    if rank != 0:
        return MultiResult(grid, mine, {"run_s": run_s}, [] if expected else None, rank,
                           all_ok)
    per = [dev for g in gathered for dev in g[0]]
    mism = [m for g in gathered for m in g[1]] if expected is not None else None
    return MultiResult(grid, per, {"run_s": max(g[2] for g in gathered)}, mism, 0, all_ok)


def preflight(module: Module, grid: DeviceGrid, device: str, options: dict, overrides,
              max_memory: int | None, args: list):
    """Refuse before running: an instruction with no kernel, or buffers past the limit
    (every device of this process counted).  Returns the context it built (its thunk
    sequence made), for the run's first device."""
    from .executor import ExecContext
    from .runner import _check_kernels, available_memory
    ctx = ExecContext(device, options, overrides=overrides)
    seq = ctx.sequence(module.entry)
    _check_kernels(ctx, seq)
    peak = (seq.total_peak_bytes() + sum(a.nbytes for a in leaves(tuple(args)))) * grid.count
    limit = max_memory if max_memory is not None else available_memory()
    if peak > limit:
        raise RunError(f"module needs about {peak / 2**20:.1f} MiB of buffers on "
                       f"{grid.count} devices, more than the "
                       f"{'--max-memory' if max_memory is not None else 'available memory'} "
                       f"({limit / 2**20:.1f} MiB); refusing to run")
    return ctx


def run_command(module: Module, *, grid: DeviceGrid, npz, expected, seed: int, device: str,
                options: dict, overrides, timeout: float, repeat: int, max_memory,
                rtol, atol, use_mpi: bool) -> MultiResult:
    """What `xlaplug run` does when the module runs on more than one device."""
    n = grid.count
    inputs = device_inputs(module, npz, seed, n)
    if use_mpi:  # this rank's devices: one, or D / ranks on threads (mpi_threads.py)
        from ..backends.spmd.mpi import mpi_module
        ranks = mpi_module().COMM_WORLD.Get_size()
        here = DeviceGrid(1, n // ranks if n % ranks == 0 else 1)
        ctx = preflight(module, here, device, options, overrides, max_memory, inputs[0])
        return run_over_mpi(module, grid, lambda r: inputs[r], device=device,
                            options=options, overrides=overrides, timeout=timeout,
                            expected=expected, rtol=rtol, atol=atol,
                            context=ctx if here.count == 1 else None)
    ctx = preflight(module, grid, device, options, overrides, max_memory, inputs[0])
    res = run_in_process(module, grid, inputs, device=device, options=options,
                         overrides=overrides, timeout=timeout, repeat=repeat,
                         first_context=ctx)
    if expected is not None:
        res.mismatches = compare_devices(res.per_device, expected, rtol, atol)
        res.all_ok = not res.mismatches
    return res


def cli_multi(module: Module, session, grid: DeviceGrid, npz, expected, seed, repeat,
              max_memory, max_while_iterations, interpret, timeout, rtol, atol, out_path,
              expect_path, as_json, timings) -> int:
    """`xlaplug run` on several devices; returns the exit code (under MPI only rank 0
    prints and writes; every rank returns non-zero when any rank failed or mismatched)."""
    import io
    import json

    import click

    from ..backends.spmd.mpi import launched_by_mpi
    from .driver import write_atomic
    from .runner import parse_bytes, run_options, summarize
    device = session.device
    options = run_options(seed, max_while_iterations, interpret)
    use_mpi = launched_by_mpi()
    try:
        res = run_command(module, grid=grid, npz=npz, expected=expected, seed=seed,
                          device=device, options=options, overrides=session.resolve,
                          timeout=timeout, repeat=repeat,
                          max_memory=parse_bytes(max_memory) if max_memory else None,
                          rtol=rtol, atol=atol, use_mpi=use_mpi)
    except QuietStop:
        return 2
    if res.rank != 0:
        return 0 if res.all_ok else 1
    outputs = res.outputs
    if out_path:
        buf = io.BytesIO()
        np.savez(buf, **{f"out{k}": v for k, v in enumerate(outputs)})
        write_atomic(out_path, buf.getvalue())
    t = {"parse_s": timings["parse_s"], "compile_s": timings["pipeline_s"],
         "run_s": res.timings["run_s"]}
    where = "processes (MPI)" if use_mpi else "threads"
    if as_json:
        obj = {"module": module.name, "device": device, "replicas": grid.replicas,
               "partitions": grid.partitions, "transport": "mpi" if use_mpi else "threads",
               "devices": [{"device": d, "replica": grid.replica_of(d),
                            "partition": grid.partition_of(d),
                            "outputs": {f"out{k}": summarize(v) for k, v in enumerate(outs)}}
                           for d, outs in enumerate(res.per_device)],
               "timings": t, "repeat": repeat}
        if res.mismatches is not None:
            obj["comparison"] = {"ok": not res.mismatches, "mismatches": [
                {"leaf": m.leaf, "message": m.message} for m in res.mismatches]}
        click.echo(json.dumps(obj, indent=2))
    else:
        from ..cli.terminal import print_outputs
        click.echo(f"{grid.count} devices ({grid.replicas} replicas x {grid.partitions} "
                   f"partitions) in {where}; outputs stacked by device")
        print_outputs(outputs, t)
        if res.mismatches is not None:
            for m in res.mismatches:
                click.echo(f"MISMATCH {m.leaf}: {m.message}", err=True)
            if not res.mismatches:
                click.echo(f"all {len(outputs)} outputs of {grid.count} devices match "
                           f"{expect_path}")
    return 0 if res.all_ok else 1
