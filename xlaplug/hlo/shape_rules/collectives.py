"""Shape rules of the collectives: all-gather, all-reduce, reduce-scatter, all-to-all,
collective-permute, collective-broadcast, ragged-all-to-all (and their start/done pairs)."""
from __future__ import annotations

from ..attr_types import ReplicaGroups
from ..ir import UNBOUNDED, Shape
from .common import (_array, _err, _one_dim_attr, _ops, _shape, compatible, expect_params,
                     is_integral, rule, s)


def _operand_or_tuple(shapes: list[Shape]) -> Shape:
    return shapes[0] if len(shapes) == 1 else Shape.tuple_of(shapes)


def _declared_leaf(ins, i: int, n: int, tuple_index: int | None = None) -> Shape:
    out = ins.shape
    if tuple_index is not None:
        if not out.is_tuple or len(out.tuple_shapes) <= tuple_index:
            raise _err(f"{ins.opcode} result must be a tuple, declared {s(out)}")
        out = out.tuple_shapes[tuple_index]
    if n == 1:
        return out
    if not out.is_tuple or len(out.tuple_shapes) != n:
        raise _err(f"{ins.opcode} with {n} operands must return a tuple of {n}, declared "
                   f"{s(ins.shape)}")
    return out.tuple_shapes[i]


def _check_replica_groups(ins, uniform: bool = True) -> list[tuple[int, ...]]:
    rg = ins.attrs.get("replica_groups")
    if not isinstance(rg, ReplicaGroups):
        return []
    groups = [tuple(g) for g in rg.expanded()]
    seen: set[int] = set()
    for g in groups:
        if not g:
            raise _err(f"{ins.opcode} has an empty replica group")
        for r in g:
            if r in seen:
                raise _err(f"replica {r} is repeated in the replica groups of {ins.opcode}")
            seen.add(r)
    for r in range(len(seen)):
        if r not in seen:
            raise _err(f"replica {r} is not named in the replica groups of {ins.opcode}")
    if uniform and groups and any(len(g) != len(groups[0]) for g in groups):
        raise _err(f"{ins.opcode} replica groups must all have the same size")
    return groups


def _known_group_size(ins, groups, has_global_ids_field: bool = True) -> int | None:
    """The participant count of each group when the HLO alone determines it (cross-replica
    or flattened-id mode; cross-partition for ops without use_global_device_ids); None
    otherwise.  A size of 1 tells nothing (XLA skips the check then: unset replica counts)."""
    if not groups or len(groups[0]) <= 1:
        return None
    if has_global_ids_field and "channel_id" in ins.attrs and \
            not ins.attrs.get("use_global_device_ids", False):
        return None  # cross-replica-and-partition: times the partition count
    return len(groups[0])


def _gather_dims(ins, opcode: str, tuple_index=None) -> list[Shape]:
    shapes = _ops(ins)
    d = _one_dim_attr(ins)
    outs = []
    shard = _known_group_size(ins, _check_replica_groups(ins))
    for i, x in enumerate(shapes):
        _array(x, f"operand {i} of {opcode}")
        if d < 0 or d >= x.rank:
            raise _err(f"{opcode} dimension {d} is out of range for {s(x)}")
        out = _declared_leaf(ins, i, len(shapes), tuple_index)
        if shard is None:
            if not out.is_array or out.rank <= d:
                raise _err(f"{opcode} result {s(out)} has no dimension {d}")
            if UNBOUNDED in (out.dims[d], x.dims[d]) or x.dims[d] == 0:
                shard = 1
            else:
                shard = max(-(-out.dims[d] // x.dims[d]), 1)
        dims = list(x.dims)
        if dims[d] != UNBOUNDED:
            dims[d] *= shard
        outs.append(_shape(x.element_type, dims, x.dynamic))
    return outs


@rule("all-gather")
def _all_gather(ins):
    return _operand_or_tuple(_gather_dims(ins, "all-gather"))


@rule("all-gather-start")
def _all_gather_start(ins):
    outs = _gather_dims(ins, "all-gather-start", tuple_index=1)
    return Shape.tuple_of([_operand_or_tuple(_ops(ins)), _operand_or_tuple(outs)])


@rule("all-gather-done", "collective-permute-done")
def _done_element_1(ins):
    op = ins.operands[0].shape
    if not op.is_tuple or len(op.tuple_shapes) < 2:
        raise _err(f"{ins.opcode} operand must be a start tuple, got {s(op)}")
    return op.tuple_shapes[1]


def _reducer_2(ins):
    comps = ins.called_computations()
    if comps:
        expect_params(comps[0], 2, "to_apply")


@rule("all-reduce", "all-reduce-start")
def _all_reduce(ins):
    _check_replica_groups(ins, uniform=False)
    _reducer_2(ins)
    shapes = _ops(ins)
    for i, x in enumerate(shapes):
        _array(x, f"operand {i} of {ins.opcode}")
    return _operand_or_tuple(shapes)


@rule("all-reduce-done")
def _all_reduce_done(ins):
    return ins.operands[0].shape


@rule("reduce-scatter")
def _reduce_scatter(ins):
    shard = _known_group_size(ins, _check_replica_groups(ins))
    _reducer_2(ins)
    shapes = _ops(ins)
    d = _one_dim_attr(ins)
    outs = []
    for i, x in enumerate(shapes):
        _array(x, f"operand {i} of reduce-scatter")
        if d < 0 or d >= x.rank:
            raise _err(f"reduce-scatter dimension {d} is out of range for {s(x)}")
        if shard is None:
            out = _declared_leaf(ins, i, len(shapes))
            if not out.is_array or out.rank <= d:
                raise _err(f"reduce-scatter result {s(out)} has no dimension {d}")
            if UNBOUNDED in (out.dims[d], x.dims[d]) or out.dims[d] == 0:
                shard = 1
            else:
                shard = max(-(-x.dims[d] // out.dims[d]), 1)
        if x.dims[d] != UNBOUNDED and x.dims[d] % shard:
            raise _err(f"reduce-scatter dimension {d} of {s(x)} is not divisible by the shard "
                       f"count {shard}")
        dims = list(x.dims)
        if dims[d] != UNBOUNDED:
            dims[d] //= shard
        outs.append(_shape(x.element_type, dims, x.dynamic))
    return _operand_or_tuple(outs)


@rule("all-to-all")
def _all_to_all(ins):
    groups = _check_replica_groups(ins)
    shapes = _ops(ins)
    for i, x in enumerate(shapes):
        _array(x, f"operand {i} of all-to-all")
    if "dimensions" in ins.attrs:
        if len(shapes) != 1:
            raise _err(f"array all-to-all takes 1 operand, has {len(shapes)}")
        d = _one_dim_attr(ins)
        x = shapes[0]
        if d < 0 or d >= x.rank:
            raise _err(f"all-to-all split dimension {d} is out of range for {s(x)}")
        if groups and x.dims[d] != UNBOUNDED and x.dims[d] % len(groups[0]):
            raise _err(f"all-to-all split dimension {d} of {s(x)} is not divisible by the "
                       f"split count {len(groups[0])}")
        return x
    if groups and len(shapes) != len(groups[0]):
        raise _err(f"tuple all-to-all needs one operand per group member ({len(groups[0])}), "
                   f"has {len(shapes)}")
    for x in shapes[1:]:
        if not compatible(x, shapes[0]):
            raise _err(f"all-to-all operands must have the same shape: {s(shapes[0])} and {s(x)}")
    return Shape.tuple_of(shapes)


def _check_source_target_pairs(ins) -> None:
    pairs = ins.attrs.get("source_target_pairs", ())
    if len(ins.operands) != 1:
        return
    src, dst = set(), set()
    for a, b in pairs:
        if a < 0 or b < 0:
            raise _err(f"{ins.opcode} source-target pair {{{a},{b}}} is negative")
        if a in src:
            raise _err(f"source {a} appears more than once in the source-target pairs")
        if b in dst:
            raise _err(f"target {b} appears more than once in the source-target pairs")
        src.add(a)
        dst.add(b)


@rule("collective-permute")
def _collective_permute(ins):
    _check_source_target_pairs(ins)
    shapes = _ops(ins)
    if len(shapes) == 1:
        return _array(shapes[0], "the operand of collective-permute")
    if len(shapes) == 4 and "slice_sizes" in ins.attrs:  # in place: (input, output, offsets)
        return shapes[1]
    # A combined collective-permute: several operands permuted together, a tuple of them.
    for i, x in enumerate(shapes):
        _array(x, f"operand {i} of a combined collective-permute")
    return Shape.tuple_of(shapes)


@rule("collective-permute-start")
def _collective_permute_start(ins):
    _check_source_target_pairs(ins)
    shapes = _ops(ins)
    extra = (list(ins.shape.tuple_shapes[2:]) if ins.shape is not None and ins.shape.is_tuple
             else [])
    if len(shapes) == 1:
        _array(shapes[0], "the operand of collective-permute-start")
        return Shape.tuple_of([shapes[0], shapes[0], *extra])
    if len(shapes) == 4 and "slice_sizes" in ins.attrs:
        return Shape.tuple_of([shapes[0], shapes[1], *extra])
    both = Shape.tuple_of(shapes)  # combined: the operands, and as many results
    return Shape.tuple_of([both, both, *extra])


@rule("collective-broadcast")
def _collective_broadcast(ins):
    _check_replica_groups(ins)
    shapes = _ops(ins)
    if ins.attrs.get("has_dynamic_root"):
        # The last operand names the root, chosen at run time; it is not broadcast.
        shapes = shapes[:-1]
        if not shapes:
            raise _err("collective-broadcast with has_dynamic_root=true needs an operand "
                       "before the root")
    for i, x in enumerate(shapes):
        _array(x, f"operand {i} of collective-broadcast")
    return _operand_or_tuple(shapes)


@rule("ragged-all-to-all")
def _ragged_all_to_all(ins):
    shapes = _ops(ins)
    for i, x in enumerate(shapes):
        _array(x, f"operand {i} of ragged-all-to-all")
    if shapes[0].rank != shapes[1].rank:
        raise _err(f"ragged-all-to-all input {s(shapes[0])} and output {s(shapes[1])} must have "
                   f"the same rank")
    for i in range(2, 6):
        if not is_integral(shapes[i].element_type):
            raise _err(f"ragged-all-to-all operand {i} must be integral, got {s(shapes[i])}")
    return shapes[1]
