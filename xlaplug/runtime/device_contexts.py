"""What an Executable keeps between its runs, per device: the run contexts (thunk
sequences, compiled kernels, the constants' device copies) and the rng ops' state.

XLA keeps one executable and runs it many times; so does xlaplug.  A context is made on
first use for each (executor settings, device) -- RunOptions that change how kernels run
(interpret, max_while_iterations, seed) get their own -- and serves every
later call, so `exe(*arrays)` pays for preparing the module once, not per call; and
`--engine xla`'s executable (on_xla.EngineProgram; under mpiexec, mpi_engine.MpiProgram) is
XLA's, compiled by the first such run.

The rng state is the executable's, per device and seed (rng_streams.RngState): XLA's
rng-get-and-update-state state lives in the executable and advances on every execution,
and `rng` (which XLA expands into arithmetic on that state) with it, so the k-th run draws
what XLA's k-th run of the same executable draws -- whether the runs come from
`--repeat N`, from one call each, or from contexts made for other settings.  A new seed
starts its own streams (RunOptions.seed offsets the initial state).

Runs of one Executable take turns (`lock`): a kept context holds one run's per-run state.
What a call would otherwise work out again is kept too: the device grid, whether an MPI
launcher started the process, each context's kernel check and buffer peak, and the threads
(or fibers) its devices run on (closed when the executable goes: starting four threads
cost ~1-4 ms a call on 2 loaded cores, spmd/device_threads.py).
"""
from __future__ import annotations

import threading
import weakref

import numpy as np

from ..backends.spmd.mpi import launched_by_mpi
from .options import RunOptions
from .outputs import leaves
from .runner import check_memory, run_once


class DeviceContexts:
    def __init__(self, module, session):
        self.module = module
        self.session = session
        self.lock = threading.RLock()
        self._contexts: dict[tuple, object] = {}
        self._prepared: dict[tuple, object] = {}
        self._rng: dict[tuple[int, int], object] = {}
        self._grids: dict[tuple, object] = {}
        self._peaks: dict[tuple, int] = {}
        self._devices: dict[tuple, object] = {}
        self._last = (None, None)  # (options, Prepared) of the last one-device call
        self._call_plan = None  # call()'s: (Prepared, [(dims, dtype)], bytes), or False
        self._largest = None  # the module's largest product (blas_threads.largest_product)
        # `--engine xla`'s programs, by kind and grid: on_xla.EngineProgram (one device),
        # engine_devices.DevicesProgram (many), mpi_engine.MpiProgram (a rank's)
        self._programs: dict[tuple, object] = {}
        self._global_devices = None  # (devices, shardy) of the module as read
        # The launcher's environment is the process's: read once.
        self.under_mpi = launched_by_mpi()

    def grid(self, options: RunOptions):
        """The run's devices: `options`' replicas / partitions, else the module header's."""
        key = (options.replicas, options.partitions)
        grid = self._grids.get(key)
        if grid is None:
            from .multi_run import grid_for
            grid = self._grids[key] = grid_for(self.module, *key)
        return grid

    def peak(self, options: RunOptions, device: int = 0) -> int:
        """The bytes device `device`'s thunk sequence holds at most, its kernels checked
        first (an instruction with no kernel is a RunError naming it); once per context."""
        key = (self.settings(options), device)
        peak = self._peaks.get(key)
        if peak is None:
            from .runner import _check_kernels
            ctx = self.context(options, device)
            seq = ctx.sequence(self.module.entry)
            _check_kernels(ctx, seq)
            peak = self._peaks[key] = seq.total_peak_bytes()
        return peak

    @property
    def largest_product(self) -> int:
        """2*M*N*K of the module's largest gemm, found once: each run's BLAS threads."""
        if self._largest is None:
            from ..backends.cpu.blas_threads import largest_product
            self._largest = largest_product(self.module)
        return self._largest

    def devices(self, n: int, threads: int | None = None):
        """The threads or fibers `n` devices run on (spmd/runner.devices_for; `threads`:
        RunOptions.device_threads), kept."""
        got = self._devices.get((n, threads))
        if got is None:
            from .spmd.runner import devices_for
            got = self._devices[(n, threads)] = devices_for(self.module, n, threads)
            weakref.finalize(self, got.close)
        return got

    def _kept_program(self, key: tuple, make):
        """The engine program under `key`, made by `make()` on first use and kept (its
        module imported then: a kept program's later runs import nothing)."""
        with self.lock:
            program = self._programs.get(key)
            if program is None:
                program = self._programs[key] = make()
            return program

    def engine_program(self, source_text: str):
        """The module as read made into XLA:CPU's executable (on_xla.EngineProgram) by the
        first `--engine xla` run on one device, and run by every later one."""
        def make():
            from .on_xla import EngineProgram
            return EngineProgram(source_text, self.session)
        return self._kept_program(("one",), make)

    def global_devices(self, source_text: str) -> tuple[int, bool]:
        """(devices, Shardy?) of the module as read when it is a global program (jax's,
        before partitioning), else (1, False): found once."""
        if self._global_devices is None:
            from .engine_devices import global_program_devices
            self._global_devices = global_program_devices(source_text)
        return self._global_devices

    def devices_engine_program(self, source_text: str, grid):
        """The module made into XLA:CPU's program on `grid`'s devices, or a global
        program's mesh (engine_devices.DevicesProgram), by the first such `--engine xla`
        run, and run by every later one."""
        def make():
            from .engine_devices import DevicesProgram
            return DevicesProgram(source_text, self.session, grid,
                                  self.global_devices(source_text))
        return self._kept_program(("devices", grid.replicas, grid.partitions), make)

    def mpi_engine_program(self, exe, grid, rank: int):
        """This rank's program for `grid` (mpi_engine.MpiProgram: rewritten for MPI and
        compiled by XLA:CPU) made by the first `--engine xla` run under mpiexec, and run by
        every later one."""
        def make():
            from .mpi_engine import MpiProgram
            return MpiProgram(exe, grid, rank)
        return self._kept_program(("mpi", grid.replicas, grid.partitions, rank), make)

    def discard_devices(self, n: int, threads: int | None = None) -> None:
        """Close the kept threads of `n` devices (after a failed run: the next makes new)."""
        got = self._devices.pop((n, threads), None)
        if got is not None:
            got.close()

    @staticmethod
    def settings(options: RunOptions) -> tuple:
        """The executor settings a context is made for (RunOptions.executor_options)."""
        return tuple(sorted(options.executor_options().items()))

    def rng(self, seed: int, device: int):
        """Device `device`'s rng state for runs with `seed`, made on first use and kept."""
        from ..backends.common.rng_streams import RngState
        key = (seed, device)
        st = self._rng.get(key)
        if st is None:
            st = self._rng[key] = RngState()
        return st

    def prepared(self, options: RunOptions):
        """Device 0's runner.Prepared for a run on one device (its context, checked for
        missing kernels, and the bytes its thunk sequence holds at most)."""
        if options is self._last[0]:  # the same options object as the last call's
            return self._last[1]
        settings = self.settings(options)
        # a Prepared holds its runs' BLAS threads
        key = (settings, options.blas_threads, options.blas_yield, options.blas_pool)
        prep = self._prepared.get(key)
        if prep is None:
            from .runner import prepare
            prep = self._prepared[key] = prepare(self.module, self.session, options,
                                                 rng=self.rng(options.draw_seed, 0))
            self._contexts.setdefault((settings, 0), prep.ctx)
        self._last = (options, prep)
        return prep

    def context(self, options: RunOptions, device: int):
        """Device `device`'s context for runs as `options` say, made on first use and kept."""
        key = (self.settings(options), device)
        ctx = self._contexts.get(key)
        if ctx is None:
            from .executor import ExecContext
            ctx = self._contexts[key] = ExecContext(
                self.session.device, options.executor_options(),
                overrides=self.session.resolve, rng=self.rng(options.draw_seed, device))
        return ctx

    def for_options(self, options: RunOptions):
        """`contexts(d)` for a run as `options` say: device d's kept context."""
        key = self.settings(options)
        return lambda d: self._contexts.get((key, d)) or self.context(options, d)

    def call(self, args: tuple, options: RunOptions) -> tuple | None:
        """`exe(*args)` on one device when every argument is a numpy array of its
        parameter's own dtype and shape: what Executable.run does with them (the same kept
        context, memory check and run; the same outputs and errors) without the general
        path's work (input keys, checks, RunResult, timings).  None when the call needs the
        general path: several devices, MPI, another engine, or an argument to check or
        convert (which then reports its error as it always does)."""
        plan = self._call_plan
        if plan is None:
            plan = self._call_plan = self._plan_calls(options)
        if plan is False:
            return None
        prep, wants, need = plan
        if len(args) != len(wants):
            return None
        for a, (dims, dtype) in zip(args, wants):
            if type(a) is not np.ndarray or a.shape != dims or a.dtype != dtype:
                return None
        with self.lock:
            check_memory(need, options.max_memory)  # (the arguments' bytes: their shapes')
            return tuple(leaves(run_once(prep.ctx, self.module, list(args), None,
                                         prep.blas_threads, prep.blas_pool)))

    def _plan_calls(self, options: RunOptions):
        params = self.module.entry.parameters
        if (self.under_mpi or options.engine != "interpreter" or self.grid(options).count != 1
                or not all(p.shape.is_array for p in params)):
            return False
        prep = self.prepared(options)
        return (prep, [(p.shape.dims, p.shape.dtype) for p in params],
                prep.peak + sum(p.shape.byte_size() for p in params))
