"""Kernels the runtime provides itself: the custom calls xlaplug makes for its own use
(hlo/opcodes.RUNTIME_CUSTOM_CALLS -- today a shard_map region, which runs its body on the
devices of its mesh and so needs the runtime's device orchestration, not a backend's).

They are registered here, in a table the runtime owns, instead of being special cases in the
executor.  A run context (executor.ExecContext) finds an instruction's kernel in this order:

    1. a constant: the context's own (copied to the device once per context);
    2. a plugin's kernel for the instruction (the session's overrides);
    3. a runtime kernel for a custom call's target (this table);
    4. the backend's own kernel for the opcode (never for a custom call).

`runtime_kernels()` builds the table every context uses; a test or an embedding may give a
context its own (`ExecContext(..., runtime=...)`).
"""
from __future__ import annotations

from typing import Callable

from ..hlo.opcodes import RUNTIME_CUSTOM_CALLS, SHARD_MAP_TARGET


class RuntimeKernels:
    """Custom-call target -> kernel `fn(ins, args, ctx)`, for the targets the runtime runs."""

    def __init__(self):
        self._by_target: dict[str, Callable] = {}

    def register(self, target: str, fn: Callable) -> None:
        if target not in RUNTIME_CUSTOM_CALLS:
            raise ValueError(f"'{target}' is not a custom call xlaplug makes for itself "
                             f"(hlo/opcodes.RUNTIME_CUSTOM_CALLS: "
                             f"{', '.join(sorted(RUNTIME_CUSTOM_CALLS))})")
        if target in self._by_target:
            raise ValueError(f"runtime kernel for '{target}' registered twice")
        self._by_target[target] = fn

    def kernel_for(self, ins) -> Callable | None:
        """The runtime's kernel for a custom call, or None (a plugin's target, or unknown)."""
        if ins.opcode != "custom-call":
            return None
        return self._by_target.get(ins.attrs.get("custom_call_target"))

    def targets(self) -> frozenset[str]:
        return frozenset(self._by_target)


def runtime_kernels() -> RuntimeKernels:
    """The table of every runtime kernel (one entry per RUNTIME_CUSTOM_CALLS target)."""
    from .spmd.shard_map import run_shard_map
    table = RuntimeKernels()
    table.register(SHARD_MAP_TARGET, run_shard_map)
    return table
