"""Caches that kernels keep on the execution context, each a named table.

A kernel that works something out once per computation and context (a fused loop's
compiled plan, a sort's key plan, ...) keeps it in `ctx.kernel_cache.table("fused_loop_plans")`,
keyed as it likes, instead of adding attributes to the context (ExecContext has
`__slots__`: it cannot take any).  What is kept here depends on the module alone, so it
serves every run of the context -- an Executable keeps its contexts from call to call
(device_contexts.py).  What belongs to one run is not kept here: the profiler and where the
device runs are given by `ExecContext.begin_run` and dropped by `end_run`; the rng ops'
state, which XLA keeps across the runs of an executable, is `ctx.rng`.
"""
from __future__ import annotations


class KernelCache:
    def __init__(self):
        self._tables: dict[str, dict] = {}

    def table(self, name: str) -> dict:
        """The table `name`, created empty on first use."""
        return self._tables.setdefault(name, {})

    def clear(self) -> None:
        self._tables.clear()
