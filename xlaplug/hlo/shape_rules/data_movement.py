"""Shape rules that rearrange an array without computing on it: broadcast, reshape,
dynamic-reshape, transpose, reverse, concatenate, pad, iota."""
from __future__ import annotations

from ..attr_types import Padding
from ..ir import UNBOUNDED, Shape
from .common import (_array, _attr, _check_range, _check_unique, _err, _int_attr, _ints_attr,
                     _is_scalar, _j, _one_dim_attr, _ops, _shape, dim_eq, has_unbounded,
                     higher_precision, is_complex, is_floating, is_integral, rule, s,
                     same_type_ignoring_fp)


@rule("broadcast")
def _broadcast(ins):
    op = _array(ins.operands[0].shape, "the operand of broadcast")
    out = ins.shape
    if not out.is_array:
        raise _err(f"broadcast result must be an array, declared {s(out)}")
    bdims = _ints_attr(ins, "dimensions")
    if len(bdims) != op.rank:
        raise _err(f"broadcast dimensions {{{_j(bdims)}}} must name one result dimension per "
                   f"operand dimension of {s(op)}")
    _check_range(bdims, out.rank, "broadcast dimension")
    dims, dyn = list(out.dims), list(out.dynamic)
    for i, d in enumerate(bdims):
        dims[d] = op.dims[i]
        dyn[d] = op.dynamic[i]
    return _shape(op.element_type, dims, dyn)


def _count_differs(a: Shape, b: Shape) -> bool:
    if has_unbounded(a) or has_unbounded(b):
        return False
    return a.num_elements() != b.num_elements()


@rule("reshape")
def _reshape(ins):
    op = _array(ins.operands[0].shape, "the operand of reshape")
    out = ins.shape
    if not out.is_array:
        raise _err(f"reshape result must be an array, declared {s(out)}")
    inferred = Shape(op.element_type, out.dims, out.dynamic)
    if _count_differs(op, out):
        raise _err(f"cannot reshape {s(op)} ({op.num_elements()} elements) to declared "
                   f"{s(out)} ({out.num_elements()} elements)")
    return inferred


@rule("dynamic-reshape")
def _dynamic_reshape(ins):
    op = _array(ins.operands[0].shape, "the operand of dynamic-reshape")
    out = ins.shape
    if not out.is_array:
        raise _err(f"dynamic-reshape result must be an array, declared {s(out)}")
    if len(ins.operands) != out.rank + 1:
        raise _err(f"dynamic-reshape to rank {out.rank} needs {out.rank + 1} operands, has "
                   f"{len(ins.operands)}")
    for i, x in enumerate(_ops(ins)[1:], 1):
        if x.element_type != "s32" or x.rank != 0:
            raise _err(f"dynamic-reshape size operand {i} must be s32[], got {s(x)}")
    if _count_differs(op, out):
        raise _err(f"cannot reshape {s(op)} ({op.num_elements()} elements) to declared "
                   f"{s(out)} ({out.num_elements()} elements)")
    return Shape(op.element_type, out.dims, out.dynamic)


@rule("transpose")
def _transpose(ins):
    op = _array(ins.operands[0].shape, "the operand of transpose")
    perm = _ints_attr(ins, "dimensions")
    if sorted(perm) != list(range(op.rank)):
        raise _err(f"transpose dimensions {{{_j(perm)}}} are not a permutation of the "
                   f"dimensions of {s(op)}")
    return _shape(op.element_type, [op.dims[p] for p in perm], [op.dynamic[p] for p in perm])


@rule("reverse")
def _reverse(ins):
    op = _array(ins.operands[0].shape, "the operand of reverse")
    dims = _ints_attr(ins, "dimensions")
    _check_unique(dims, "reverse dimensions")
    _check_range(dims, op.rank, "reverse dimension")
    return op


@rule("concatenate")
def _concatenate(ins):
    shapes = _ops(ins)
    d = _one_dim_attr(ins)
    first = _array(shapes[0], "operand 0 of concatenate")
    if d < 0 or d >= first.rank:
        raise _err(f"concatenate dimension {d} is out of range for {s(first)}")
    etype = first.element_type
    total = 0
    dyn = list(first.dynamic)
    for i, x in enumerate(shapes):
        _array(x, f"operand {i} of concatenate")
        if x.rank != first.rank:
            raise _err(f"concatenate operands have different ranks: {s(first)} and {s(x)}")
        if not same_type_ignoring_fp(x.element_type, first.element_type):
            raise _err(f"concatenate operands have different element types: {s(first)} and "
                       f"{s(x)}")
        for k in range(first.rank):
            if k != d and not dim_eq(x.dims[k], first.dims[k]):
                raise _err(f"concatenate operands differ in dimension {k}, which is not the "
                           f"concatenated one ({d}): {s(first)} and {s(x)}")
            dyn[k] = dyn[k] or x.dynamic[k]
        total = UNBOUNDED if UNBOUNDED in (total, x.dims[d]) else total + x.dims[d]
        etype = higher_precision(etype, x.element_type)
    dims = list(first.dims)
    dims[d] = total
    return _shape(etype, dims, dyn)


@rule("pad")
def _pad(ins):
    op, val = _ops(ins)
    _array(op, "the operand of pad")
    if not _is_scalar(val):
        raise _err(f"pad value must be a scalar, got {s(val)}")
    cfg = _attr(ins, "padding")
    if not isinstance(cfg, Padding):
        raise _err(f"attribute 'padding' must be a padding config, got {cfg}")
    if len(cfg.dims) != op.rank:
        raise _err(f"padding has {len(cfg.dims)} dimensions but the operand {s(op)} has rank "
                   f"{op.rank}")
    if not same_type_ignoring_fp(op.element_type, val.element_type):
        raise _err(f"pad operand {s(op)} and padding value {s(val)} have different element types")
    dims = []
    for i, (p, d) in enumerate(zip(cfg.dims, op.dims)):
        if p.interior < 0:
            raise _err(f"interior padding {p.interior} in dimension {i} is negative")
        if d == UNBOUNDED:
            dims.append(UNBOUNDED)
            continue
        n = d + p.lo + p.hi + max(d - 1, 0) * p.interior
        if n < 0:
            raise _err(f"padding {p.lo}_{p.hi}_{p.interior} makes dimension {i} of {s(op)} "
                       f"negative ({n})")
        dims.append(n)
    return _shape(higher_precision(op.element_type, val.element_type), dims, op.dynamic)


@rule("iota")
def _iota(ins):
    out = ins.shape
    if not out.is_array:
        raise _err(f"iota result must be an array, declared {s(out)}")
    if out.rank == 0:
        raise _err("iota result must have rank >= 1")
    d = _int_attr(ins, "iota_dimension")
    if d < 0 or d >= out.rank:
        raise _err(f"iota_dimension {d} is out of range for {s(out)}")
    t = out.element_type
    if not (is_integral(t) or is_floating(t) or is_complex(t)):
        raise _err(f"iota of {t} is not supported (integral, floating-point or complex only)")
    return out
