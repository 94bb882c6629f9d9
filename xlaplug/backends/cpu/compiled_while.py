"""`while` on the CPU: interpreted first, then -- if it keeps going -- compiled whole.

The interpreter pays a Python dispatch per instruction per iteration, which dominates loops
over small arrays (a 2,000-step fori_loop on f32[16] is thousands of times slower than
XLA).  So a loop runs its first INTERPRETED_ITERATIONS iterations through the interpreter,
as any loop that ends early should (no compile cost); if it is still running then and its
condition and body are *straight-line element code*, both are generated as numba functions
and the rest of the loop runs in one compiled call:

    def run(limit, p0, p1, p2):               # the loop state's leaves, flat arrays
        n = 0
        while cond(p0, p1, p2):
            if n == limit: return False, n, p0, p1, p2
            p0, p1, p2 = body(p0, p1, p2)
            n += 1
        return True, n, p0, p1, p2

What the loop code expresses -- elementwise ops, broadcasts, slices, transposes,
concatenates, iota, dynamic-slice / dynamic-update-slice, reductions, f32/f64 dots, each
instruction one loop nest over static shapes -- is loop_codegen.py's; elementwise ops use
the SCALAR_OPS templates, so their results are the per-op kernels' (no FMA contraction
across ops, as the interpreter).  Anything else (calls, nested loops, gathers, sorts, ...)
keeps the interpreter.  --max-while-iterations holds across both phases.
"""
from __future__ import annotations

import threading

import numpy as np
from numba.core.errors import NumbaError

from ...hlo.ir import Instruction
from ..device import flatten
from ..registry import kernel
from .jit_cache import cached_function
from .jit_drivers import from_numba, numba_array
from .loop_codegen import ArrayCodegen, Unsupported
from ..common.errors import ExecutionError

INTERPRETED_ITERATIONS = 32
_LOCK = threading.Lock()
_NO_PLAN = object()


def _state_leaves(shape) -> list | None:
    if shape.is_array:
        return [shape]
    if shape.is_tuple and all(s.is_array for s in shape.tuple_shapes):
        return list(shape.tuple_shapes)
    return None


def _compile(ins: Instruction):
    """The compiled `run` of this while loop, or None when it is not straight-line."""
    leaves = _state_leaves(ins.shape)
    if leaves is None:
        return None
    consts: dict = {}
    try:
        cg_cond, cg_body = ArrayCodegen(consts, "c"), ArrayCodegen(consts, "b")
        cond = cg_cond.function(ins.attrs["condition"], "cond", len(leaves), False)
        body = cg_body.function(ins.attrs["body"], "body", len(leaves), True)
    except Unsupported:
        return None
    ps = ", ".join(f"p{j}" for j in range(len(leaves)))
    run = (f"def run(limit, {ps}):\n    n = 0\n    while cond({ps}):\n"
           f"        if n == limit:\n            return False, n, {ps}\n"
           f"        {ps}, = body({ps})\n        n += 1\n    return True, n, {ps}\n")
    src = "\n".join(cg_cond.pieces + cg_body.pieces + [
        cond, "cond = register_jitable(cond)\n", body, "body = register_jitable(body)\n", run])
    # Compiled once per loop text (constants included), on its first call; the module is
    # cached on disk, so later processes load the machine code (jit_cache.py).
    return cached_function(src, consts, "run", nogil=True, error_model="numpy")


# id(instruction) -> (instruction, compiled run or None): a loop compiled (or found not
# compilable) once is not interpreted or analysed again in later runs of its module.
_PLANS: dict[int, tuple] = {}


def _known_plan(ins):
    hit = _PLANS.get(id(ins))
    return hit[1] if hit is not None and hit[0] is ins else _NO_PLAN


def _plan(ins):
    plan = _known_plan(ins)
    if plan is _NO_PLAN:
        plan = _compile(ins)
        with _LOCK:
            _PLANS[id(ins)] = (ins, plan)
    return plan


def _run_compiled(ins, run, state, limit_left: int):
    """(finished, iterations, new state); numba typing failures -> None."""
    leaves = _state_leaves(ins.shape)
    vals = [np.ascontiguousarray(numba_array(v)).reshape(-1) for v in flatten(state)]
    try:
        done, n, *out = run(limit_left, *vals)
    except NumbaError:
        return None
    arrays = [from_numba(a, s.dtype).reshape(s.dims) for a, s in zip(out, leaves)]
    return done, n, (arrays[0] if ins.shape.is_array else tuple(arrays))


@kernel("while")
def _while(ins, args, ctx):
    cond, body = ins.attrs["condition"], ins.attrs["body"]
    limit = ctx.options.get("max_while_iterations")
    state, n = args[0], 0
    known = _known_plan(ins)
    switch_at = 0 if known not in (_NO_PLAN, None) else \
        INTERPRETED_ITERATIONS if known is _NO_PLAN else -1
    if ctx.options.get("interpret_loops"):
        switch_at = -1
    while True:
        if n == switch_at:
            run = _plan(ins)
            if run is not None:
                res = _run_compiled(ins, run, state, -1 if limit is None else limit - n)
                if res is not None:
                    done, _, state = res
                    if not done:
                        raise ExecutionError(f"while loop '{ins.name}' exceeded "
                                             f"--max-while-iterations={limit}")
                    return state
                with _LOCK:  # numba could not type it after all: stay interpreted
                    _PLANS[id(ins)] = (ins, None)
        if not bool(ctx.memory.scalar(ctx.run(cond, [state]))):
            return state
        if limit is not None and n >= limit:
            raise ExecutionError(f"while loop '{ins.name}' exceeded --max-while-iterations={limit}")
        state = ctx.run(body, [state])
        n += 1
