"""Every device of the grid runs the module at once -- a thread each, or as fibers taking
turns on one thread (or on one thread per core) when its arrays are small (`devices_for`)
-- the devices meeting at collectives through a `Rendezvous`.  An error on one device
stops all of them and is reported once, naming the device; a device stuck at a collective
ends with the rendezvous's timeout error, so a run never hangs."""
from __future__ import annotations

import threading
from typing import Any, Callable

import numpy as np

from ...hlo.ir import Module
from ...backends.common.errors import ExecutionError
from ...backends.cpu.blas_threads import cores as _cores
from ...backends.cpu.blas_threads import for_run, largest_product, product_flops, run_threads
from .device_fibers import DeviceFibers
from .device_threads import DeviceThreads
from .gang import gang_for
from ...backends.spmd.groups import DeviceGrid
from ...backends.spmd.place import Place
from ...backends.spmd.rendezvous import Aborted, Rendezvous


# numba's CUDA simulator runs one kernel at a time per process ("concurrent simulated kernel
# not supported"): under it, device threads take turns for each kernel (the context's `turn`:
# kernels that run called computations, which may wait at a collective, do not hold it),
# and a collective gives it up while it waits (Place.exchange), or the devices would deadlock.
_SIMULATOR_TURN = threading.RLock()


def _place(ctx, grid: DeviceGrid, d: int, transport, takes_turns: bool) -> Place:
    """Device d's Place for this run; under the CUDA simulator with devices at once, the
    context takes turns (made so once: its sequences are rebuilt with the lock)."""
    if takes_turns and _cuda_simulated(ctx):
        ctx.take_turns(_SIMULATOR_TURN)
        return Place(grid, d, transport, _SIMULATOR_TURN)
    return Place(grid, d, transport)


def _cuda_simulated(ctx) -> bool:
    return ctx.memory.simulated


# Devices of a module whose largest array is under this many bytes run as fibers
# (device_fibers.py); larger ones get a thread each, for their kernels to overlap.
# Measured (an f32 all-reduce on 4 devices, 2 cores, load 2-3; threads / fibers, ms):
# 4 KiB 0.39 / 0.15, 256 KiB 0.64 / 0.33, 1 MiB 1.4 / 0.33, 4 MiB 3.3 / 2.7.
FIBERS_BELOW_BYTES = 4 << 20

# Below that size, a module whose dots and convolutions make at least this many flops per
# device runs its fibers on one thread per core (at most one per device): its kernels then
# overlap, while most meetings stay greenlet switches and no more threads than cores fight
# for the cores and the GIL.  Measured on the project's 2 cores (the data-parallel MLP step
# of benchmarks/collectives.py, 46 MFLOP a device, D=4): the four devices' work with no
# collectives on 1 / 2 / 4 threads 5.5 / 4.0 / 5.5 ms at load 1.5 (four runnable threads on
# two cores: the OS preempts the one holding the GIL, and a thread each was no better than
# fibers on one: 6.0-6.3 against 6.8 ms); the step itself, in rounds where both cores were
# free, fibers on 2 threads 4.9-6.7 ms against 6.7-7.9 on one.  Where the host lent one core
# (load 2.4-3.2) both cost the same (5.1 ms of CPU a step, as wall).  The second thread
# costs ~0.25 ms a run (a 4 KiB all-reduce on 4 devices, load 2.9: fibers 0.19 ms, fibers on
# 2 threads 0.44, a thread each 0.38), what half of 4 devices' ~8 MFLOP (0.12 ms of BLAS
# each) saves: below that a module keeps to one thread.
GANG_FROM_FLOPS = 1 << 23


def dot_flops(module: Module) -> int:
    """2 * multiply-adds of the module's dots and convolutions (each computation once, as
    a device runs it once, loops counted once): its compute, for devices_for."""
    return sum(product_flops(ins)[0] for comp in module.computations
               for ins in comp.instructions)


def devices_for(module: Module, n: int,
                threads: int | None = None) -> DeviceThreads | DeviceFibers:
    """How `module`'s n devices run: as fibers when its arrays are small (dispatch-bound:
    thread wake-ups cost more than the kernels) -- on one thread per core when it computes
    enough (GANG_FROM_FLOPS) -- else a thread each.  `threads` (RunOptions.device_threads):
    that many threads carry them instead (1: fibers on one thread, their large products
    computed together, spmd/gang.py).  The caller closes it."""
    largest = max((leaf.byte_size() for comp in module.computations
                   for ins in comp.instructions for leaf in ins.shape.leaves()
                   if not leaf.is_token), default=0)
    if threads is not None:
        k = min(threads, n)
        return DeviceThreads(n) if k == n and largest >= FIBERS_BELOW_BYTES else \
            DeviceFibers(n, threads=k)
    if largest >= FIBERS_BELOW_BYTES:
        return DeviceThreads(n)
    threads = min(n, _cores())
    if threads > 1 and dot_flops(module) >= GANG_FROM_FLOPS:
        return DeviceFibers(n, threads=threads)
    return DeviceFibers(n)


class DeviceError(ExecutionError):
    """An error on one device of a multi-device run."""

    def __init__(self, device: int, error: BaseException):
        self.device = device
        self.error = error
        text = getattr(error, "message", None) or str(error) or type(error).__name__
        self.message = f"device {device}: {text.splitlines()[0]}"
        super().__init__(self.message)


def on_device_threads(n: int, timeout: float, work: Callable[[int, Rendezvous], Any],
                      threads: DeviceThreads | DeviceFibers | None = None,
                      first: int = 0, blas: int | None = None) -> list:
    """`work(d, rendezvous)` for devices d = first .. first + n - 1 at once, one thread each
    (inline for one device; on `threads` when given, else on threads started for this
    call); their results in device order.  `blas`: the BLAS threads of the whole call, set
    once before the devices start and restored after them (None: left as they are).  A device that fails stops the others waiting at
    the rendezvous, and is raised as a DeviceError naming it; when every failure is an
    Aborted (another MPI rank failed), that Aborted is raised."""
    fibers = threads if isinstance(threads, DeviceFibers) else None
    rendezvous = Rendezvous(n, timeout, first, fibers)
    results: list[Any] = [None] * n
    errors: dict[int, BaseException] = {}

    def device(i: int) -> None:
        d = first + i
        try:
            results[i] = work(d, rendezvous)
            rendezvous.finished(d)
        except BaseException as e:  # noqa: BLE001 - reported below, with its device
            errors[d] = e
            rendezvous.abort(d, e)

    with for_run(blas):
        if n == 1:
            device(0)
        elif fibers is not None:
            if fibers.n != n:
                raise ExecutionError(f"{fibers.n} device fibers for {n} devices")
            fibers.run(device)
        elif threads is not None:
            if threads.n != n:
                raise ExecutionError(f"{threads.n} device threads for {n} devices")
            threads.run(device)
        else:
            with DeviceThreads(n) as started:
                started.run(device)
    if errors:
        failed = rendezvous.failure
        d, e = failed if failed is not None else next(iter(errors.items()))
        if isinstance(e, Aborted):  # stopped from outside (another rank), or a later failure
            d, e = next(((k, v) for k, v in errors.items() if not isinstance(v, Aborted)),
                        (d, e))
            if isinstance(e, Aborted):
                raise e
        if n == 1:
            raise e
        raise DeviceError(d, e) from e
    return results


def run_devices(module: Module, device_args: list[list], grid: DeviceGrid,
                make_context: Callable[[int], Any], timeout: float = 60.0,
                threads: DeviceThreads | DeviceFibers | None = None,
                profilers: list | None = None, blas_threads: int | None = None) -> list:
    """Runs the entry computation on every device of `grid`; `device_args[d]` are device d's
    arguments (host values), `make_context(d)` makes device d's execution context (an
    ExecContext, or gives a kept one); `threads`: kept device threads to run on (see
    device_threads.py); `profilers[d]`: device d's profiler.Profiler for this run;
    `blas_threads`: the run's BLAS threads (`blas_for_devices`; None: left as they are).
    Returns each device's result, host values, in device order."""
    n = grid.count
    if len(device_args) != n:
        raise ExecutionError(f"{len(device_args)} argument sets for {n} devices")

    def work(d: int, rendezvous: Rendezvous):
        ctx = make_context(d)
        one_thread = isinstance(threads, DeviceFibers) and not threads.parallel
        place = _place(ctx, grid, d, rendezvous, n > 1 and not one_thread)
        if one_thread and ctx.memory.on_host:  # products of all devices at once: gang.py
            place.gang = gang_for(module, 0, n, blas_threads,
                                  ctx.kernel_cache.table("gang_products"))
        ctx.begin_run(profiler=profilers[d] if profilers is not None else None, spmd=place)
        try:
            args = [a if isinstance(a, tuple) else np.asarray(a) for a in device_args[d]]
            with np.errstate(all="ignore"):  # as one device runs (errstate is per thread)
                out = ctx.run(module.entry, ctx.memory.to_device(args))
            return ctx.memory.to_host(out, module.entry.root.shape)
        finally:
            ctx.end_run()

    if threads is None and n > 1:
        with devices_for(module, n) as chosen:
            return on_device_threads(n, timeout, work, chosen, blas=blas_threads)
    return on_device_threads(n, timeout, work, threads, blas=blas_threads)


def blas_for_devices(largest: int, fixed: int | None, n: int,
                     threads: DeviceThreads | DeviceFibers | None,
                     yielding: bool = False) -> int | None:
    """The BLAS threads of a run of n devices in this process (blas_threads.run_threads;
    `largest`: the module's largest product): the cores divided among the threads calling
    BLAS at once -- a thread each, or the fibers' threads.  Fibers on one thread divide by
    n too: OpenBLAS's idle threads spin between calls (a data-parallel MLP step on 4
    devices: 94 ms with 2 BLAS threads, 8 ms with 1, at load 5 on 2 cores)."""
    fibers = threads if isinstance(threads, DeviceFibers) else None
    sharing = fibers.threads if fibers is not None and fibers.parallel else n
    return run_threads(largest, fixed, sharing, yielding)


def run_module_devices(module: Module, device_args: list[list], grid: DeviceGrid | None = None,
                       session=None, *, device: str | None = None, timeout: float = 60.0,
                       threads: DeviceThreads | DeviceFibers | None = None,
                       **options) -> list:
    """`run_module` on every device of `grid` (default: the module header's counts) for
    `session` (its device and plugin kernels; None: no plugins, on `device`); `threads`:
    what the devices run on (default: `devices_for` chooses)."""
    from ..executor import ExecContext
    if session is not None and device is not None and device != session.device:
        raise ValueError(f"device '{device}' is not the session's device '{session.device}'")
    dev = session.device if session is not None else device or "cpu"
    overrides = session.resolve if session is not None else None
    grid = grid or DeviceGrid.of_module(module)
    blas = blas_for_devices(largest_product(module), options.get("blas_threads"), grid.count,
                            threads)
    return run_devices(module, device_args, grid,
                       lambda d: ExecContext(dev, options, overrides=overrides), timeout,
                       threads, blas_threads=blas)


def collective_groups(module: Module, grid: DeviceGrid) -> list[list[tuple[int, ...]]]:
    """Every group set the module's collectives form on `grid`, in module order (what an
    MPI transport splits communicators for before the run)."""
    from ...backends.spmd.groups import device_groups, permute_domain
    from ...backends.spmd.place import PERMUTES
    sets: list[list[tuple[int, ...]]] = [[tuple(range(grid.count))]]  # plugin communicators
    for comp in module.computations:
        for ins in comp.instructions:
            if ins.opcode in PERMUTES:
                found = sorted({permute_domain(ins, grid, d) for d in range(grid.count)})
            elif ins.opcode in GROUPED:
                found = device_groups(ins, grid)
            else:
                continue
            if found not in sets:
                sets.append(found)
    return sets


GROUPED = frozenset({"all-reduce", "all-reduce-start", "all-gather", "all-gather-start",
                     "reduce-scatter", "all-to-all", "collective-broadcast"})
