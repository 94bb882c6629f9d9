"""Kernels that move values around without computing: tuples, calls, control flow.

They only move values (through `ctx.memory` where they make one), so one definition serves
every device."""
from __future__ import annotations

import numpy as np

from ..registry import EVERY_DEVICE, kernel as _kernel
from .errors import ExecutionError


def kernel(*opcodes):
    """Structural kernels only move values: the same code serves every device."""
    return _kernel(*opcodes, device=EVERY_DEVICE)


@kernel("tuple")
def _tuple(ins, args, ctx):
    return tuple(args)


@kernel("get-tuple-element")
def _gte(ins, args, ctx):
    return args[0][ins.attrs["index"]]


@kernel("opt-barrier")
def _barrier(ins, args, ctx):
    return args[0]


@kernel("call")
def _call(ins, args, ctx):
    comp = ins.attrs.get("to_apply") or ins.attrs["calls"]
    if isinstance(comp, list):
        comp = comp[0]
    return ctx.run(comp, args)



@kernel("while")  # the interpreted loop; the CPU has its own first (cpu/compiled_while.py)
def _while(ins, args, ctx):
    cond, body = ins.attrs["condition"], ins.attrs["body"]
    state = args[0]
    limit = ctx.options.get("max_while_iterations")
    n = 0
    while bool(ctx.memory.scalar(ctx.run(cond, [state]))):
        if limit is not None and n >= limit:
            raise ExecutionError(f"while loop '{ins.name}' exceeded --max-while-iterations={limit}")
        state = ctx.run(body, [state])
        n += 1
    return state


@kernel("conditional")
def _conditional(ins, args, ctx):
    selector = ctx.memory.scalar(args[0])  # the one value control flow reads back
    if "branch_computations" in ins.attrs:
        branches = ins.attrs["branch_computations"]
        idx = int(selector)
        if idx < 0 or idx >= len(branches):
            idx = len(branches) - 1  # XLA: an out-of-range index runs the last branch
    else:
        branches = [ins.attrs["true_computation"], ins.attrs["false_computation"]]
        idx = 0 if bool(selector) else 1
    return ctx.run(branches[idx], [args[1 + idx]])


@kernel("after-all")
def _after_all(ins, args, ctx):
    return ctx.memory.zeros((), np.bool_)  # tokens carry no data


@kernel("add-dependency")
def _add_dependency(ins, args, ctx):
    return args[0]


def _zeros_like_shape(shape, ctx):
    if shape.is_tuple:
        return tuple(_zeros_like_shape(s, ctx) for s in shape.tuple_shapes)
    if shape.is_token:
        return ctx.memory.zeros((), np.bool_)
    return ctx.memory.zeros(shape.dims, shape.dtype)


@kernel("async-start")
def _async_start(ins, args, ctx):
    # XLA's async value is ((operands...), result, context...).  On one CPU stream the
    # wrapped computation simply runs now; the context elements carry no data.
    comp = ins.attrs["calls"]
    comp = comp[0] if isinstance(comp, list) else comp
    result = ctx.run(comp, args)
    rest = [_zeros_like_shape(s, ctx) for s in ins.shape.tuple_shapes[2:]]
    return (tuple(args), result, *rest)


@kernel("async-update")
def _async_update(ins, args, ctx):
    return args[0]


@kernel("async-done")
def _async_done(ins, args, ctx):
    return args[0][1]
