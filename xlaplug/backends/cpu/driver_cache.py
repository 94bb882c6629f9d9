"""A loop driver and the scalar computations it calls, as one module of the JIT cache.

jit_drivers' drivers take the compiled scalar computation (a reducer, comparator, combiner,
select) as an argument: numba specialises a driver per function, by the function's
dispatcher type -- new in every process, so that machine code could not be kept on disk and
every process compiled each computation and its driver again (a test worker, each `xlaplug
run`, each MPI rank: 0.1-0.4 s a pair; 24 s of the conformance suite's 113 s of CPU in one
cold process).  `run_driver` writes the computations (jit_cache.scalar_piece) and the
driver's source, its function parameters replaced by the computations' names, as one
generated module (jit_cache.cached_function): keyed by its text, compiled once per machine,
loaded by later processes -- healed like every module of the cache when damaged.

The code is the code of the argument form: each computation njit(nogil=True,
error_model="numpy") as scalar_jit compiles it, called directly by the driver, njit
(nogil=True) as before.  What cannot take this form runs as it did: a computation
scalar_jit cannot compile (interpreted, the driver's Python form) or a driver numba cannot
type for these arguments (`pick`, below).
"""
from __future__ import annotations

import re

import numpy as np

from numba.core.errors import TypingError

from ..common.scalar_codegen import ScalarCompileError
from .jit_cache import cached_function, scalar_piece
from .jit_drivers import numba_scalar

_NOT_BOUND = object()  # a table entry: this driver and computation run the argument form


def run_driver(ctx, driver, comps: list, *args) -> None:
    """`driver(f_0, .., f_k, *args)`, f_j the compiled scalar computation `comps[j]`: the
    bound module when it can be made (kept per context: a computation run again finds it),
    else jit_drivers' argument form."""
    table = ctx.kernel_cache.table("bound_drivers")
    key = (driver.bound_source, tuple(id(c) for c in comps))
    bound = table.get(key)
    if bound is None:
        bound = table[key] = _bind(driver.bound_source, comps)
    if bound is not _NOT_BOUND:
        try:
            return bound(*args)
        except TypingError:  # raised while typing, before the driver ran: nothing half done
            table[key] = _NOT_BOUND
    fns = [scalar_callable(ctx, c) for c in comps]
    return pick(driver, *[jit for _, jit in fns])(*[f for f, _ in fns], *args)


def _bind(bound_source: tuple, comps: list):
    """The bound driver's dispatcher, or _NOT_BOUND when a computation cannot compile."""
    src, name, params = bound_source
    consts: dict = {}
    text = ""
    for j, comp in enumerate(comps):
        try:
            piece, named, entry = scalar_piece(comp, f"_b{j}")
        except ScalarCompileError:
            return _NOT_BOUND
        text += piece
        consts.update(named)
        # the computation as scalar_jit compiles it: the driver calls it as it called the
        # dispatcher it was given
        text += f'_f{j} = _njit(nogil=True, error_model="numpy")({entry})\n'
    return cached_function(text + "\n" + bind_source(src, name, params), consts, name,
                           nogil=True)


def bind_source(src: str, name: str, params: tuple[str, ...]) -> str:
    """The driver source `src` (function `name`, whose leading parameters `params` are the
    scalar functions) with those parameters dropped and their calls made to _f0, _f1, .."""
    head = re.search(rf"^def {name}\(([^)]*)\):", src, flags=re.M)
    args = [a.strip() for a in head[1].split(",")]
    if tuple(args[:len(params)]) != params:
        raise ValueError(f"driver {name}'s parameters {args} do not start with {params}")
    src = src[:head.start()] + f"def {name}({', '.join(args[len(params):])}):" + \
        src[head.end():]
    for j, p in enumerate(params):
        src = re.sub(rf"\b{p}\(", f"_f{j}(", src)
    return src


# ---- the argument form: the fallback ----------------------------------------------------

def scalar_callable(ctx, comp):
    """(function, compiled?) for a scalar computation: the numba-compiled one from
    ctx.scalar_fn, or -- for a computation scalar_jit cannot compile -- one that runs it
    through the interpreter (drivers then run as plain Python via `.py_func`)."""
    try:
        return ctx.scalar_fn(comp), True
    except ScalarCompileError:
        pass
    dts = [p.shape.dtype for p in comp.parameters]

    def interpreted(*vals):
        r = ctx.run(comp, [np.asarray(v).astype(dt) for v, dt in zip(vals, dts)])
        if isinstance(r, tuple):
            return tuple(numba_scalar(x) for x in r)
        return numba_scalar(r)
    return interpreted, False


def pick(driver, *compiled: bool):
    """The driver, or its plain-Python form when a function is not compiled (or the driver
    cannot be typed for these arguments -- that fails before it runs, so nothing is half
    done)."""
    if not all(compiled):
        return driver.py_func

    def run(*args):
        try:
            return driver(*args)
        except TypingError:
            return driver.py_func(*args)
    return run


__all__ = ["run_driver", "bind_source", "pick", "scalar_callable"]
