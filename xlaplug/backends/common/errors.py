"""Errors raised while running a module, on any device."""
from __future__ import annotations


class ExecutionError(RuntimeError):
    """A failure while running a module (clear, user-facing; exit code 2 at the CLI)."""


class ScalarCompileError(ValueError):
    """A computation has an instruction the scalar op table cannot express (callers fall
    back to the interpreter)."""
