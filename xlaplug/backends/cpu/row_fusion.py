"""`fusion` on the CPU, for a row fusion (common/row_contents.py): softmax-like bodies --
ours from passes/reduce_fusion.py, XLA's kInput and `__ynn_fusion` fusions -- run as one
compiled loop over rows (row_loop.py) instead of through the interpreter.

Asked by cpu/fused_loop.py when the body is not one elementwise loop.  Like a loop fusion,
a body of fewer than the run option `fusion_min_elements` elements (here: the reduced
operand's M*K, the work of the loop) is interpreted -- the one-time compile costs more
than it saves -- unless it holds a multiply-add XLA contracts (then it runs compiled, one
thread), and every fusion of an interpreting run is interpreted.  A body scalar code cannot
express, or numba cannot type, is interpreted too (and remembered).
"""
from __future__ import annotations

import numpy as np
from numba.core.errors import TypingError

from ...hlo.ir import Computation
from ..common.errors import ScalarCompileError
from ..common.fusion_contents import DEFAULT_MIN_ELEMENTS, LOOP_OPS, computation_contracts
from ..common.row_contents import FULL, row_shape, worth_a_row_loop
from . import comp_patterns as P
from .blas_threads import devices_at_once
from .jit_drivers import from_loop, loop_array, loop_storage
from .row_loop import compile_row_loop
from .team_size import fusion_cost, loop_spread

_NO_PLAN = object()


def row_work(comp: Computation):
    """row_shape, when the body is worth a row loop (row_contents.worth_a_row_loop)."""
    shape = row_shape(comp)
    if shape is None:
        return None
    levels = shape[2]
    reduces = [i for i in comp.instructions if i.opcode == "reduce"]
    full_ops = any(levels.get(id(i)) == FULL and i.opcode in LOOP_OPS
                   for i in comp.instructions)
    return shape if worth_a_row_loop(reduces, full_ops) else None


def _shape(ctx, comp: Computation):
    shapes = ctx.kernel_cache.table("_row_shapes")
    if id(comp) not in shapes:
        shapes[id(comp)] = row_work(comp)
    return shapes[id(comp)]


def _contracts(ctx, comp: Computation) -> bool:
    """Does the body hold a multiply-add XLA contracts into an FMA?  Then it runs compiled
    at any size (serially below the threshold), as cpu/fused_loop.py runs such loops: the
    interpreter's per-op kernels would round twice."""
    holds = ctx.kernel_cache.table("_row_contracts")
    if id(comp) not in holds:
        holds[id(comp)] = computation_contracts(comp)
    return holds[id(comp)]


def _identity_params(comp: Computation, args) -> frozenset:
    """Parameters that are a reduce's init and hold its reducer's identity in this call:
    the unfused kernel then takes its numpy fast path, and so does the row loop."""
    out = set()
    for ins in comp.instructions:
        if ins.opcode == "reduce" and ins.operands[1].opcode == "parameter":
            pn = ins.operands[1].parameter_number
            op = P.binary_op(ins.attrs["to_apply"])
            if op is not None and P.is_identity(op, np.asarray(args[pn])):
                out.add(pn)
    return frozenset(out)


def _plan(ctx, comp: Computation, shape, parallel: bool, identity: frozenset):
    """The compiled rowloop of a row fusion's body, or None; once per computation (and
    set of identity inits)."""
    plans = ctx.kernel_cache.table("_row_loop_plans")
    key = (id(comp), parallel, identity)
    plan = plans.get(key, _NO_PLAN)
    if plan is _NO_PLAN:
        try:
            plan = compile_row_loop(comp, *shape, parallel, identity)
        except ScalarCompileError:
            plan = None
        plans[key] = plan
    return plan


def run_row_fusion(ins, args, ctx):
    """The fusion's result through its compiled row loop, or None (interpret it)."""
    if ctx.options.get("interpret_loops"):
        return None
    comp = ins.attrs["calls"][0]
    shape = _shape(ctx, comp)
    if shape is None:
        return None
    m, k, _ = shape
    threshold = ctx.options.get("fusion_min_elements", DEFAULT_MIN_ELEMENTS)
    if m * k < threshold and not _contracts(ctx, comp):
        return None
    parallel = m * k >= DEFAULT_MIN_ELEMENTS and m > 1 and not devices_at_once(ctx)
    key = (id(comp), parallel, _identity_params(comp, args))
    fn = _plan(ctx, comp, shape, *key[1:])
    if fn is None:
        return None
    outs_shapes = ins.shape.tuple_shapes if ins.shape.is_tuple else (ins.shape,)
    vals = [loop_array(a, parallel) for a in args]
    outs = [np.empty(s.num_elements(), loop_storage(s.dtype)) for s in outs_shapes]
    try:
        if parallel:  # on as many threads as XLA's cost model gives it (team_size.py)
            with loop_spread(ctx, fn.iterations, fusion_cost(ctx, comp)):
                fn(*outs, *vals)
        else:
            fn(*outs, *vals)
    except TypingError:  # numba cannot type it after all: interpret, and remember
        ctx.kernel_cache.table("_row_loop_plans")[key] = None
        return None
    res = [from_loop(o, s.dtype, parallel).reshape(s.dims) for o, s in zip(outs, outs_shapes)]
    return tuple(res) if ins.shape.is_tuple else res[0]


def compiled_rows(ins) -> bool:
    """Will this fusion (at the default threshold) run as one row loop, with no buffers
    inside?  (The thunk builder's memory estimate asks.)"""
    shape = row_work(ins.attrs["calls"][0])
    return shape is not None and shape[0] * shape[1] >= DEFAULT_MIN_ELEMENTS
