"""Errors raised while running a module, on any device."""
from __future__ import annotations


class ExecutionError(RuntimeError):
    """A failure while running a module (clear, user-facing; exit code 2 at the CLI)."""
