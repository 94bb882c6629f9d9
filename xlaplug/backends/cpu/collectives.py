"""Collectives for a single replica and a single partition (device id 0).

Every replica group then has one member, so:
  * all-reduce returns its operand(s) (a reduction over one value is that value);
  * all-gather, reduce-scatter, all-to-all and collective-broadcast return their operands;
  * collective-permute: device 0 receives from the source of a {source, 0} pair, i.e. its
    own operand when {0,0} is listed; a device that is not a target receives zeros.
Variadic forms return tuples.  The async pairs use XLA's shapes (shape_inference.cc):
  * all-reduce-start has all-reduce's shape; all-reduce-done returns its operand;
  * all-gather-start is (operand(s), result(s)); all-gather-done returns element 1;
  * collective-permute-start is (operand, result, u32[] contexts...); -done returns element 1.
A group whose shapes ask for more than one participant cannot run here: an error says so.
"""
from __future__ import annotations

import numpy as np

from ..registry import kernel
from ..common.collective_groups import check_groups, leaf_shapes, receives
from ..common.errors import ExecutionError

def _copy(v):
    if isinstance(v, tuple):
        return tuple(_copy(x) for x in v)
    return np.array(v, copy=True)


def _results(ins, args, result_shapes) -> tuple:
    """Operands as results for a one-member group, checking each shape fits."""
    out = []
    for a, s in zip(args, result_shapes):
        a = np.asarray(a)
        if tuple(a.shape) != tuple(s.dims):
            raise ExecutionError(f"{ins.opcode} '{ins.name}': operand {list(a.shape)} -> "
                                 f"{s}: the group must have more than one participant, but "
                                 "this runs on one device")
        out.append(np.array(a, dtype=s.dtype, copy=True))
    return tuple(out)


def _one_member(ins, args, shape):
    """Result of a collective whose group is {self}, shaped like `shape`."""
    check_groups(ins)
    res = _results(ins, args, leaf_shapes(shape, len(args)))
    return res[0] if len(args) == 1 and not shape.is_tuple else res


@kernel("all-reduce", "reduce-scatter", "all-gather", "all-to-all", "collective-broadcast")
def _identity_collective(ins, args, ctx):
    return _one_member(ins, args, ins.shape)


@kernel("all-reduce-start")
def _all_reduce_start(ins, args, ctx):
    return _one_member(ins, args, ins.shape)


@kernel("all-reduce-done")
def _all_reduce_done(ins, args, ctx):
    return _copy(args[0])


@kernel("all-gather-start")
def _all_gather_start(ins, args, ctx):
    result = _one_member(ins, args, ins.shape.tuple_shapes[1])
    operands = args[0] if len(args) == 1 else tuple(args)
    return (_copy(operands), result)


@kernel("all-gather-done")
def _all_gather_done(ins, args, ctx):
    return _copy(args[0][1])


def _permute(ins, args, out_shape):
    if len(args) == 4 and not out_shape.is_tuple:
        # (input, output, input_start_indices, output_start_indices)
        raise ExecutionError(f"{ins.opcode} '{ins.name}': the in-place form with start "
                             "indices is not supported")
    shapes = leaf_shapes(out_shape, len(args))
    if receives(ins):
        res = _results(ins, args, shapes)
    else:
        res = tuple(np.zeros(s.dims, s.dtype) for s in shapes)
    return res[0] if len(args) == 1 and not out_shape.is_tuple else res


@kernel("collective-permute")
def _collective_permute(ins, args, ctx):
    return _permute(ins, args, ins.shape)


@kernel("collective-permute-start")
def _collective_permute_start(ins, args, ctx):
    shapes = ins.shape.tuple_shapes
    result = _permute(ins, args, shapes[1])
    operands = args[0] if len(args) == 1 else tuple(args)
    contexts = tuple(np.zeros(s.dims, s.dtype) if s.is_array else np.zeros((), np.bool_)
                     for s in shapes[2:])
    return (_copy(operands), result) + contexts


@kernel("collective-permute-done")
def _collective_permute_done(ins, args, ctx):
    return _copy(args[0][1])
