"""Compile an HLO computation over scalars into a numba function (CPU).

`compile_scalar_computation(comp)` turns a reducer, comparator, variadic reducer, scatter
combiner, select-and-scatter `select` or map body into a numba `@njit` dispatcher taking one
scalar per parameter and returning a scalar, or a tuple of scalars for a tuple root.  The
source is common/scalar_codegen.py's, from the scalar op table (common/scalar_ops.py).

The dispatcher compiles lazily on its first call (from Python or from other numba code) and
is cached per process by its generated source, so identical computations compile once.  Its
`.py_func` is the plain Python function -- usable without compiling, on numpy scalars (run it
under `np.errstate(all="ignore")`: integer wrap-around warns there).  Attributes
`.param_types` / `.result_types` (element types) and `.source` describe it.

An instruction it cannot compile raises ScalarCompileError (a ValueError naming the opcode);
callers then fall back to the interpreter.
"""
from __future__ import annotations

import linecache
import threading

import numba
from numba.extending import register_jitable

from ...hlo.ir import Computation
from ..common.scalar_codegen import ScalarCompileError, generate_source, result_types
from ..common.scalar_ops import SCALAR_NAMESPACE
from .jit_options import entry_options

__all__ = ["compile_scalar_computation", "ScalarCompileError"]

_CACHE: dict[str, object] = {}
_LOCK = threading.Lock()


def compile_scalar_computation(comp: Computation, fma: bool = True, elementwise: bool = False):
    """A numba dispatcher evaluating `comp` on scalars (see the module docstring);
    `elementwise`: on one element of each array parameter (a loop fusion's body)."""
    src, consts, entry = generate_source(comp, fma, elementwise)
    key = src + "\n#" + "|".join(f"{type(c).__name__}:{c.tobytes().hex()}" for c in consts)
    with _LOCK:
        fn = _CACHE.get(key)
        if fn is not None:
            return fn
    ns = dict(SCALAR_NAMESPACE)
    for i, c in enumerate(consts):
        ns[f"_K{i}"] = c
    filename = f"<xlaplug scalar computation {len(_CACHE)}: {comp.name}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    exec(compile(src, filename, "exec"), ns)
    # Callees must be callable from numba code and from Python alike.
    for name in list(ns):
        if name.startswith("_c") and name != entry and callable(ns[name]):
            ns[name] = register_jitable(ns[name])
    disp = numba.njit(**entry_options({"nogil": True, "error_model": "numpy"}))(ns[entry])
    disp.param_types = tuple(p.shape.element_type for p in comp.parameters)
    disp.result_types = result_types(comp)
    disp.source = src
    with _LOCK:
        return _CACHE.setdefault(key, disp)
