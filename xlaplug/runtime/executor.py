"""The executor: runs thunk sequences with numpy values.

`run_module(module, args, session)` builds the entry's thunk sequence (see thunks.py) and runs it.
Each thunk's kernel gets its operand values; a value is dropped after its last use, so the
memory a run holds follows the buffer assignment.  Side-effecting instructions the ROOT
does not reach are in the sequence and run like the rest.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..hlo.ir import Computation, Instruction, Module
from ..backends.common.errors import ExecutionError
from ..backends.common.rng_streams import RngState
from .kernel_cache import KernelCache
from .runtime_kernels import RuntimeKernels, runtime_kernels
from .thunks import ThunkSequence, build_sequence


# Kernels that run called computations (which may wait at a collective) do not hold the
# context's turn while they do, or devices taking turns would deadlock (spmd/runner.py).
_RUN_NESTED = frozenset({"while", "conditional", "call", "async-start", "async-update",
                         "async-done"})


def _in_turn(fn, turn):
    def in_turn(ins, args, ctx):
        with turn:
            return fn(ins, args, ctx)
    return in_turn


def _constant_kernel(ins, args, ctx):
    if ins.literal_elided:
        raise ExecutionError(f"constant '{ins.name}' has an elided literal ({{...}}): its "
                             "values are not in the module")
    if ctx.memory.on_host:
        return ins.literal
    value = ctx._constants.get(id(ins))
    if value is None:  # copied to the device once per run context, then reused
        value = ctx._constants[id(ins)] = ctx.memory.to_device(ins.literal)
    return value


class ExecContext:
    """Everything one device's runs of a module use, every field declared here.

    Given when made: `device` (a backend name), `options` (the executor's settings:
    RunOptions.executor_options), `overrides` (the plugin session's kernels by instruction,
    or None), `rng` (the rng ops' state, kept across the runs of one executable: an
    Executable hands each device's context its own, rng_streams.RngState; None: a fresh
    one, as a freshly compiled executable starts), `runtime` (the runtime's own kernels,
    runtime_kernels.py; None: every one), `turn` (a lock each kernel holds while it runs:
    the CUDA simulator runs one kernel at a time per process; None: no lock).

    Kept for every run of the context: thunk sequences, scalar functions, the constants'
    device copies and the kernels' caches (`kernel_cache`: plans worked out from the
    module, kernel_cache.py).  Per run, set by `begin_run` before each run and cleared
    after it by `end_run`: `profiler` (a profiler.Profiler timing every thunk, or None) and
    `spmd` (a backends.spmd.place.Place: the grid, this device and the transport it meets
    the others through; None: device 0 of one).

    `__slots__` holds the fields: a kernel or a runner that sets any other attribute on a
    context fails at once (per-kernel state goes in `kernel_cache`, rng state in `rng`).
    """
    __slots__ = ("device", "options", "overrides", "rng", "runtime", "turn",
                 "profiler", "spmd", "_sequences", "_scalar_fns", "_constants",
                 "kernel_cache", "backend", "memory", "_own_kernels", "destinations",
                 "product_threads")

    def __init__(self, device: str = "cpu", options: dict | None = None,
                 overrides: Callable[[Instruction], Callable | None] | None = None,
                 *, rng: RngState | None = None, runtime: RuntimeKernels | None = None,
                 turn=None):
        self.device = device
        self.options = options or {}
        self.overrides = overrides
        self.rng = rng if rng is not None else RngState()
        self.runtime = runtime if runtime is not None else runtime_kernels()
        self.turn = turn
        # Per run (begin_run / end_run).
        self.profiler = None
        self.spmd = None
        self.product_threads = 1
        self._sequences: dict[int, ThunkSequence] = {}
        self._scalar_fns: dict[int, Any] = {}
        self._constants: dict[int, Any] = {}
        # Kernels' caches (compiled loop plans, ...), by name: see kernel_cache.py.
        self.kernel_cache = KernelCache()
        # What the device provides and how it runs kernels: asked, never named (backend.py).
        from ..backends.backend import backend_for
        self.backend = backend_for(device)
        self.memory = self.backend.memory()
        # The backend's own kernels as this context runs them (the CPU's flushed ones hold
        # this context's FP environment buffers).
        self._own_kernels = self.backend.own_kernels()
        # Result buffers a collective may write into, during one call of the XLA engine's
        # handler (xla/ffi/mpi_handler.py); None: the kernel's own.
        self.destinations = None

    def begin_run(self, *, profiler=None, spmd=None,
                  product_threads: int = 1) -> "ExecContext":
        """This run's per-run state: the profiler timing it (None: untimed), where the
        device runs (a Place; None: alone) and the threads its large products take
        (backends/cpu/pool_gemm.py; 1: BLAS's own choice).  Nothing of a previous run's
        stays."""
        self.profiler = profiler
        self.spmd = spmd
        self.product_threads = product_threads
        return self

    def end_run(self) -> None:
        """Drop the run's per-run state (its profiler and its transport)."""
        self.profiler = None
        self.spmd = None
        self.product_threads = 1

    def take_turns(self, turn) -> None:
        """From now on each kernel holds `turn` (a lock) while it runs (see `turn` above);
        the sequences made without it are made again."""
        if turn is not self.turn:
            self.turn = turn
            self._sequences.clear()

    def resolve(self, ins: Instruction) -> Callable | None:
        """The kernel for an instruction, in runtime_kernels.py's order: a constant's, a
        plugin's, the runtime's (a custom call xlaplug makes for itself), the backend's."""
        if ins.opcode == "constant":
            return _constant_kernel
        fn = self.overrides(ins) if self.overrides is not None else None
        if fn is None:
            fn = self.runtime.kernel_for(ins)
            if fn is not None:
                return fn  # runs nested computations itself: never adapted nor turned
        if fn is None:
            if ins.opcode == "custom-call":
                return None  # no plugin provides the target (_missing says so)
            fn = self._own_kernels(ins.opcode)
        if fn is None:
            return None
        fn = self.backend.adapt_kernel(ins, fn)
        if self.turn is not None and ins.opcode not in _RUN_NESTED:
            fn = _in_turn(fn, self.turn)
        return fn

    def sequence(self, comp: Computation) -> ThunkSequence:
        seq = self._sequences.get(id(comp))
        if seq is None:
            seq = build_sequence(comp, self.resolve, self._sequences)
        return seq

    def run(self, comp: Computation, args: list) -> Any:
        seq = self.sequence(comp)
        if len(args) != len(seq.params):
            raise ExecutionError(f"computation '{comp.name}' takes {len(seq.params)} "
                                 f"arguments, got {len(args)}")
        values: list[Any] = [None] * len(seq.thunks)
        for p, a in zip(seq.params, args):
            values[p] = a
        if self.profiler is not None:
            return self.profiler.run_sequence(self, seq, values)
        for t in seq.thunks:
            ins = t.ins
            if ins.opcode != "parameter":
                fn = t.kernel
                if fn is None:
                    self._missing(ins)
                values[t.index] = fn(ins, [values[i] for i in t.inputs], self)
            for d in t.frees:
                if d != seq.root:
                    values[d] = None
        return values[seq.root]

    def _missing(self, ins: Instruction):
        if ins.opcode == "custom-call":
            raise ExecutionError(f"custom-call '{ins.name}': no plugin provides target "
                                 f"'{ins.attrs.get('custom_call_target', '?')}' on {self.device}")
        raise ExecutionError(f"opcode '{ins.opcode}' (instruction '{ins.name}') has no "
                             f"{self.device} kernel")

    def scalar_fn(self, comp: Computation):
        fn = self._scalar_fns.get(id(comp))
        if fn is None:
            fn = self._scalar_fns[id(comp)] = self.backend.scalar_function(comp)
        return fn


def run_module(module: Module, args: list, session=None, *, device: str | None = None,
               **options) -> Any:
    """Run the entry computation for `session` (a plugin.Session: its device and plugin
    kernels; None: no plugins, on `device`, default the CPU); inputs are copied to the
    device once, results back once; floating-point warnings off, as in every run.
    `options` are run options (seed, ...)."""
    if session is not None and device is not None and device != session.device:
        raise ValueError(f"device '{device}' is not the session's device '{session.device}'")
    ctx = ExecContext(session.device if session is not None else device or "cpu", options,
                      overrides=session.resolve if session is not None else None)
    args = [a if isinstance(a, tuple) else np.asarray(a) for a in args]
    with np.errstate(all="ignore"):  # as every run path runs kernels (runner.run_once)
        result = ctx.run(module.entry, ctx.memory.to_device(args))
    return ctx.memory.to_host(result, module.entry.root.shape)
