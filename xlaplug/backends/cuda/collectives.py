"""CUDA collectives for a single replica and a single partition (device id 0).

The CPU kernels' semantics (cpu/collectives.py) on device arrays: every replica group has
one member, so all-reduce, reduce-scatter, all-gather, all-to-all and
collective-broadcast return device copies of their operands; collective-permute returns a
copy when {0,0} is a source-target pair and zeros (filled on the device) when device 0 is
not a target; the async -start/-done pairs use XLA's shapes as on the CPU.  Groups that
need more than one participant raise the CPU kernel's errors.  Copies are device-to-device
(a copy kernel), nothing goes through the host.
"""
from __future__ import annotations

from ..common.collective_groups import check_groups, leaf_shapes, receives
from ..common.errors import ExecutionError
from ..registry import kernel
from .launch import device_dtype, device_zeros
from .linalg import convert


def _copy(v):
    if isinstance(v, tuple):
        return tuple(_copy(x) for x in v)
    return convert(v, v.dtype)


def _results(ins, args, result_shapes) -> tuple:
    out = []
    for a, s in zip(args, result_shapes):
        if tuple(a.shape) != tuple(s.dims):
            raise ExecutionError(f"{ins.opcode} '{ins.name}': operand {list(a.shape)} -> "
                                 f"{s}: the group must have more than one participant, but "
                                 "this runs on one device")
        out.append(convert(a, device_dtype(s.element_type)))
    return tuple(out)


def _one_member(ins, args, shape):
    check_groups(ins)
    res = _results(ins, args, leaf_shapes(shape, len(args)))
    return res[0] if len(args) == 1 and not shape.is_tuple else res


@kernel("all-reduce", "reduce-scatter", "all-gather", "all-to-all", "collective-broadcast",
        device="cuda")
def _identity_collective(ins, args, ctx):
    return _one_member(ins, args, ins.shape)


@kernel("all-reduce-start", device="cuda")
def _all_reduce_start(ins, args, ctx):
    return _one_member(ins, args, ins.shape)


@kernel("all-reduce-done", device="cuda")
def _all_reduce_done(ins, args, ctx):
    return _copy(args[0])


@kernel("all-gather-start", device="cuda")
def _all_gather_start(ins, args, ctx):
    result = _one_member(ins, args, ins.shape.tuple_shapes[1])
    operands = args[0] if len(args) == 1 else tuple(args)
    return (_copy(operands), result)


@kernel("all-gather-done", device="cuda")
def _all_gather_done(ins, args, ctx):
    return _copy(args[0][1])


def _permute(ins, args, out_shape):
    if len(args) == 4 and not out_shape.is_tuple:
        raise ExecutionError(f"{ins.opcode} '{ins.name}': the in-place form with start "
                             "indices is not supported")
    shapes = leaf_shapes(out_shape, len(args))
    if receives(ins):
        res = _results(ins, args, shapes)
    else:
        res = tuple(device_zeros(s) for s in shapes)
    return res[0] if len(args) == 1 and not out_shape.is_tuple else res


@kernel("collective-permute", device="cuda")
def _collective_permute(ins, args, ctx):
    return _permute(ins, args, ins.shape)


@kernel("collective-permute-start", device="cuda")
def _collective_permute_start(ins, args, ctx):
    shapes = ins.shape.tuple_shapes
    result = _permute(ins, args, shapes[1])
    operands = args[0] if len(args) == 1 else tuple(args)
    contexts = tuple(device_zeros(s) if s.is_array else _zeros_pred() for s in shapes[2:])
    return (_copy(operands), result) + contexts


def _zeros_pred():
    from ...hlo.ir import Shape
    return device_zeros(Shape.array("pred", ()))


@kernel("collective-permute-done", device="cuda")
def _collective_permute_done(ins, args, ctx):
    return _copy(args[0][1])
