"""numba's C wrapper, made only where something calls it.

Beside every function it compiles, numba makes a CPython wrapper (unboxes Python arguments:
what a call from Python enters) and a C wrapper (the function's `cfunc` address, for a
first-class function value).  Each is lowered, optimized by LLVM and turned into machine
code with the function, and neither changes the function's own code.  xlaplug never takes
a compiled function's C address (its FFI handlers are @cfunc of their own that call the
kernel as numba code), so its njit functions drop the C wrapper: the generated modules'
entries and njit callees (jit_cache._HEADER binds `_njit` to `callee_njit`), the scalar
computations and the drivers.

Only those: numba compiles a helper overload (register_jitable) once per set of flags of the
function calling it, and the flags include the wrappers'.  Functions whose flags were equal
stay equal -- a module's entry and its njit callees; a register_jitable callee (a fusion
body) and the helpers (an overload's flags), which keep both wrappers as before -- or each
helper they call compiles again (dropping the CPython wrapper of the njit callees too: 10
more helper compiles in a quarter of the conformance suite).
"""
from __future__ import annotations

from numba import njit

ENTRY = {"no_cfunc_wrapper": True}


def entry_options(options: dict) -> dict:
    """`options` for a function Python calls (numba's own options win)."""
    return {**ENTRY, **options}


def callee_njit(fn=None, **options):
    """njit(**options) for a function only numba code calls (an inline="always" one is
    spliced into its callers and never compiled alone: the option changes nothing there)."""
    wrap = njit(**entry_options(options))
    return wrap(fn) if fn is not None else wrap


__all__ = ["ENTRY", "callee_njit", "entry_options"]
