"""Per-run caches that kernels keep on the execution context, each a named table.

A kernel that works something out once per computation and run (a fused loop's compiled
plan, ...) keeps it in `ctx.kernel_cache.table("fused_loop_plans")`, keyed as it likes,
instead of adding attributes to the context: what a context holds is declared here and
lives as long as the context (one run, one session).
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
