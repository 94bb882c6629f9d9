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
from ..hlo.opcodes import RUNTIME_CUSTOM_CALLS
from ..backends.common.errors import ExecutionError
from .kernel_cache import KernelCache
from .thunks import ThunkSequence, build_sequence


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
    def __init__(self, device: str = "cpu", options: dict | None = None,
                 overrides: Callable[[Instruction], Callable | None] | None = None,
                 profiler=None):
        self.device = device
        # A backends.profiler.Profiler times every thunk (`run --profile`); None: the plain
        # loop below runs, at no cost.
        self.profiler = profiler
        self.options = options or {}
        # Threads of each BLAS product (RunOptions.blas_threads); None: by the product's work.
        self.blas_threads = self.options.get("blas_threads")
        self._overrides = overrides
        self._sequences: dict[int, ThunkSequence] = {}
        self._scalar_fns: dict[int, Any] = {}
        self._constants: dict[int, Any] = {}
        # Kernels' per-run caches (compiled loop plans, ...), by name: see kernel_cache.py.
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

    def resolve(self, ins: Instruction) -> Callable | None:
        """The kernel for an instruction: a plugin's, else the backend's."""
        if ins.opcode == "constant":
            return _constant_kernel
        fn = self._overrides(ins) if self._overrides is not None else None
        if fn is None and ins.opcode == "custom-call":
            # Custom calls the executor runs itself (a shard_map region), else a plugin's.
            if ins.attrs.get("custom_call_target") in RUNTIME_CUSTOM_CALLS:
                from .spmd.shard_map import run_shard_map
                return run_shard_map
            return None
        if fn is None:
            fn = self._own_kernels(ins.opcode)
        return None if fn is None else self.backend.adapt_kernel(ins, fn)

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
    device once, results back once.  `options` are run options (seed, ...)."""
    if session is not None and device is not None and device != session.device:
        raise ValueError(f"device '{device}' is not the session's device '{session.device}'")
    ctx = ExecContext(session.device if session is not None else device or "cpu", options,
                      overrides=session.resolve if session is not None else None)
    args = [a if isinstance(a, tuple) else np.asarray(a) for a in args]
    result = ctx.run(module.entry, ctx.memory.to_device(args))
    return ctx.memory.to_host(result, module.entry.root.shape)
