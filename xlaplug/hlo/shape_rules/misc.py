"""Shape rules of the opcodes whose result is declared (parameter, constant, scan, ragged-dot,
custom-call), of tuples, of dynamic dimension sizes and of the replica/partition ids."""
from __future__ import annotations

from ..ir import Shape
from .common import (_array, _err, _int_attr, _one_dim_attr, _ops, _scalar, _shape, compatible,
                     rule, s)


@rule("parameter", "constant", "scan", "ragged-dot")
def _declared(ins):
    return ins.shape


@rule("custom-call")
def _custom_call(ins):
    cons = ins.attrs.get("operand_layout_constraints")
    if cons is not None:
        if len(cons) != len(ins.operands):
            raise _err(f"custom-call has {len(ins.operands)} operands but "
                       f"{len(cons)} operand_layout_constraints")
        for i, (c, o) in enumerate(zip(cons, ins.operands)):
            if not compatible(c, o.shape):
                raise _err(f"operand {i} is {s(o.shape)} but its layout constraint is {s(c)}")
    return ins.shape


@rule("get-tuple-element")
def _gte(ins):
    op = ins.operands[0].shape
    i = _int_attr(ins, "index")
    if not op.is_tuple:
        raise _err(f"get-tuple-element of a non-tuple {s(op)}")
    if i < 0 or i >= len(op.tuple_shapes):
        raise _err(f"get-tuple-element index {i} is out of range for {s(op)} "
                   f"({len(op.tuple_shapes)} elements)")
    return op.tuple_shapes[i]


@rule("tuple")
def _tuple(ins):
    return Shape.tuple_of(_ops(ins))


@rule("get-dimension-size")
def _get_dimension_size(ins):
    op = _array(ins.operands[0].shape, "the operand of get-dimension-size")
    d = _one_dim_attr(ins)
    if d < 0 or d >= op.rank:
        raise _err(f"get-dimension-size dimension {d} is out of range for {s(op)}")
    return _scalar("s32")


@rule("set-dimension-size")
def _set_dimension_size(ins):
    op, val = _ops(ins)
    _array(op, "the operand of set-dimension-size")
    d = _one_dim_attr(ins)
    if d < 0 or d >= op.rank:
        raise _err(f"set-dimension-size dimension {d} is out of range for {s(op)}")
    if val.is_tuple or val.rank != 0 or val.element_type != "s32":
        raise _err(f"set-dimension-size value must be s32[], got {s(val)}")
    dyn = list(op.dynamic)
    dyn[d] = True
    return _shape(op.element_type, op.dims, dyn)


@rule("replica-id", "partition-id")
def _ids(ins):
    return _scalar("u32")
