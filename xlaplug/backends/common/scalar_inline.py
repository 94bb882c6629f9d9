"""Helpers that generated loops inline into themselves, and their twins for generated code.

A helper the templates call on every element of a loop (XLA's f32 exp, tanh, erf, the bf16
bit rules) must be inlined into the loop in numba's IR: left to LLVM as a call, a body that
size is not inlined and the loop stays scalar (tests/test_fused_vectorize.py).  `inlined`
marks one: it stays register_jitable(inline="always"), what plain Python, CUDA's namespace
and hand-written numba code call, and `twins()` gives generated modules (scalar_ops'
GENERATED_NAMESPACE, which only numba runs) an njit(inline="always") twin of the same body,
whose globals name the other helpers' twins.

Why a twin: numba types a call of a register_jitable(inline="always") function by compiling
the function whole (machine code nothing calls), then, at every call site, running its
front end and type inference once more before splicing in its typed IR; an
njit(inline="always") call is spliced in as untyped IR, before the caller is typed, and
typed with it once.  The machine code is the same (the assembly of fused f32 loops with exp
and tanh compared equal) for about half the cold compile: 1.12 -> 0.58 s CPU for a loop
of tanh, exp, max and sqrt in a fresh process.
"""
from __future__ import annotations

import sys
import types

from numba import njit
from numba.extending import register_jitable

# {name in generated code: the Python function whose body numba runs there}
INLINED: dict[str, types.FunctionType] = {}


def inlined(fn: types.FunctionType) -> types.FunctionType:
    """register_jitable(inline="always")(fn), with fn's body recorded for its twin."""
    INLINED[fn.__name__] = fn
    return register_jitable(inline="always")(fn)


def inlined_as(name: str):
    """Records `fn`'s body as the numba code of helper `name` (one with a plain-Python body
    of its own and an overload for numba: _xbf16_load), for generated code's twin."""
    def mark(fn: types.FunctionType) -> types.FunctionType:
        INLINED[name] = fn
        return fn
    return mark


def twins() -> dict:
    """{name: njit(inline="always") twin} of every recorded helper, each twin's globals its
    module's with the helpers' own names bound to their twins.  Call once every helper
    module is imported (the globals are copied then)."""
    scopes: dict[str, dict] = {}
    by_own_name, out = {}, {}
    for name, fn in INLINED.items():
        scope = scopes.setdefault(fn.__module__, dict(vars(sys.modules[fn.__module__])))
        twin = njit(inline="always")(types.FunctionType(
            fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__))
        by_own_name[fn.__name__] = out[name] = twin
    for scope in scopes.values():
        scope.update(by_own_name)
    return out


__all__ = ["INLINED", "inlined", "inlined_as", "twins"]
