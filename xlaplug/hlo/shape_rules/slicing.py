"""Shape rules of slice, dynamic-slice and dynamic-update-slice."""
from __future__ import annotations

from ..attr_types import SliceRanges
from ..ir import UNBOUNDED, Shape
from .common import (_array, _attr, _err, _ints_attr, _is_scalar, _ops, _shape, dim_eq, is_integral,
                     rule, s, same_type_ignoring_fp)


@rule("slice")
def _slice(ins):
    op = _array(ins.operands[0].shape, "the operand of slice")
    sl = _attr(ins, "slice")
    if not isinstance(sl, SliceRanges):
        raise _err(f"attribute 'slice' must be slice ranges, got {sl}")
    if len(sl.dims) != op.rank:
        raise _err(f"slice has {len(sl.dims)} ranges but the operand {s(op)} has rank {op.rank}")
    dims, dyn = [], []
    for i, r in enumerate(sl.dims):
        if r.start < 0:
            raise _err(f"slice start {r.start} in dimension {i} is negative")
        if op.dims[i] != UNBOUNDED and r.limit > op.dims[i]:
            raise _err(f"slice limit {r.limit} in dimension {i} exceeds the operand's size "
                       f"{op.dims[i]} ({s(op)})")
        if r.start > r.limit:
            raise _err(f"slice start {r.start} exceeds limit {r.limit} in dimension {i}")
        if r.stride <= 0:
            raise _err(f"slice stride {r.stride} in dimension {i} must be positive")
        n = (r.limit - r.start + r.stride - 1) // r.stride
        dims.append(n)
        dyn.append(op.dynamic[i] and n != 1)
    return _shape(op.element_type, dims, dyn)


def _index_operands(opcode: str, op: Shape, idx: list[Shape]) -> None:
    if len(idx) == 1 and idx[0].is_array and idx[0].rank == 1:
        ix = idx[0]
        if not is_integral(ix.element_type):
            raise _err(f"{opcode} start indices must be integers, got {s(ix)}")
        if not dim_eq(ix.dims[0], op.rank):
            raise _err(f"{opcode} start indices {s(ix)} must have one index per dimension of "
                       f"{s(op)}")
        return
    if len(idx) != op.rank:
        raise _err(f"{opcode} of {s(op)} needs {op.rank} start indices, has {len(idx)}")
    for i, ix in enumerate(idx):
        if not _is_scalar(ix):
            raise _err(f"{opcode} start index {i} must be a scalar, got {s(ix)}")
        if not is_integral(ix.element_type):
            raise _err(f"{opcode} start index {i} must be an integer, got {s(ix)}")
        if ix.element_type != idx[0].element_type:
            raise _err(f"{opcode} start indices must all have the same type, got {s(idx[0])} "
                       f"and {s(ix)}")


@rule("dynamic-slice")
def _dynamic_slice(ins):
    shapes = _ops(ins)
    op = _array(shapes[0], "the operand of dynamic-slice")
    _index_operands("dynamic-slice", op, shapes[1:])
    sizes = _ints_attr(ins, "dynamic_slice_sizes")
    if len(sizes) != op.rank:
        raise _err(f"dynamic-slice has {len(sizes)} slice sizes but the operand {s(op)} has "
                   f"rank {op.rank}")
    for i, (n, d) in enumerate(zip(sizes, op.dims)):
        if n < 0:
            raise _err(f"dynamic-slice size {n} in dimension {i} is negative")
        if d != UNBOUNDED and n > d:
            raise _err(f"dynamic-slice size {n} in dimension {i} exceeds the operand's size {d} "
                       f"({s(op)})")
    return _shape(op.element_type, sizes)


@rule("dynamic-update-slice")
def _dynamic_update_slice(ins):
    shapes = _ops(ins)
    op = _array(shapes[0], "the operand of dynamic-update-slice")
    upd = _array(shapes[1], "the update of dynamic-update-slice")
    _index_operands("dynamic-update-slice", op, shapes[2:])
    if upd.rank != op.rank:
        raise _err(f"dynamic-update-slice update {s(upd)} must have the rank of the operand "
                   f"{s(op)}")
    if not same_type_ignoring_fp(op.element_type, upd.element_type):
        raise _err(f"dynamic-update-slice update {s(upd)} and operand {s(op)} have different "
                   f"element types")
    for i, (u, d) in enumerate(zip(upd.dims, op.dims)):
        if UNBOUNDED not in (u, d) and u > d:
            raise _err(f"dynamic-update-slice update {s(upd)} is larger than the operand {s(op)} "
                       f"in dimension {i}")
    dyn = tuple(a or (b and u == d) for a, b, u, d in zip(op.dynamic, upd.dynamic, upd.dims,
                                                           op.dims))
    return _shape(op.element_type, op.dims, dyn)
