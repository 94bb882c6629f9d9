"""Shape rules of gather and scatter."""
from __future__ import annotations

from ..ir import UNBOUNDED, Shape
from .common import (_array, _check_range, _check_sorted_unique, _check_unique, _comp, _err,
                     _int_attr, _ints_attr, _ops, _scalar, _shape, dim_eq, is_integral, rule, s,
                     same_dims)
from .reduction import verify_reducer


@rule("gather")
def _gather(ins):
    op, idx = _ops(ins)
    _array(op, "the operand of gather")
    _array(idx, "the start indices of gather")
    if not is_integral(idx.element_type):
        raise _err(f"gather start indices must be integers, got {s(idx)}")
    offset_dims = _ints_attr(ins, "offset_dims", ())
    collapsed = _ints_attr(ins, "collapsed_slice_dims", ())
    start_index_map = _ints_attr(ins, "start_index_map", ())
    obatch = _ints_attr(ins, "operand_batching_dims", ())
    ibatch = _ints_attr(ins, "start_indices_batching_dims", ())
    ivd = _int_attr(ins, "index_vector_dim")
    sizes = _ints_attr(ins, "slice_sizes")
    if ivd < 0 or ivd > idx.rank:
        raise _err(f"gather index_vector_dim {ivd} is out of range for start indices {s(idx)}")
    expanded = list(idx.dims) + ([1] if ivd == idx.rank else [])
    exp_dyn = list(idx.dynamic) + ([False] if ivd == idx.rank else [])
    _check_sorted_unique(offset_dims, "gather offset_dims")
    out_rank = len(offset_dims) + len(expanded) - 1
    _check_range(offset_dims, out_rank, "gather offset dimension")
    if len(start_index_map) != expanded[ivd]:
        raise _err(f"gather start_index_map has {len(start_index_map)} entries but start "
                   f"indices {s(idx)} have {expanded[ivd]} in index_vector_dim {ivd}")
    _check_range(start_index_map, op.rank, "gather start_index_map dimension")
    _check_unique(start_index_map, "gather start_index_map")
    _check_range(collapsed, op.rank, "gather collapsed slice dimension")
    _check_sorted_unique(collapsed, "gather collapsed_slice_dims")
    _check_range(obatch, op.rank, "gather operand batching dimension")
    _check_sorted_unique(obatch, "gather operand_batching_dims")
    if set(obatch) & set(collapsed):
        raise _err("gather operand_batching_dims and collapsed_slice_dims overlap")
    if set(obatch) & set(start_index_map):
        raise _err("gather operand_batching_dims and start_index_map overlap")
    _check_index_batching("gather", op, obatch, "operand", idx, ibatch, ivd,
                          "start indices", "gather start_indices_batching_dims")
    if len(sizes) != op.rank:
        raise _err(f"gather has {len(sizes)} slice sizes but the operand {s(op)} has rank "
                   f"{op.rank}")
    if len(offset_dims) + len(collapsed) + len(obatch) != op.rank:
        raise _err(f"gather offset_dims ({len(offset_dims)}), collapsed_slice_dims "
                   f"({len(collapsed)}) and operand_batching_dims ({len(obatch)}) must add up "
                   f"to the operand rank {op.rank}")
    for i, (n, d) in enumerate(zip(sizes, op.dims)):
        if n < 0 or (d != UNBOUNDED and n > d):
            raise _err(f"gather slice size {n} in dimension {i} is out of range [0, {d}] "
                       f"({s(op)})")
    for d in collapsed + obatch:
        if sizes[d] > 1:
            raise _err(f"gather can only collapse dimensions of slice size 0 or 1, but "
                       f"dimension {d} has slice size {sizes[d]}")
    window = [d for d in range(op.rank) if d not in set(collapsed) | set(obatch)]
    batch = [d for d in range(len(expanded)) if d != ivd]
    dims, dyn = [], []
    wi = bi = 0
    offset = set(offset_dims)
    for i in range(out_rank):
        if i in offset:
            d = window[wi]
            wi += 1
            dims.append(sizes[d])
            dyn.append(op.dynamic[d] and sizes[d] == op.dims[d])
        else:
            d = batch[bi]
            bi += 1
            dims.append(expanded[d])
            dyn.append(exp_dyn[d])
    return _shape(op.element_type, dims, dyn)


@rule("scatter")
def _scatter(ins):
    shapes = _ops(ins)
    n = (len(shapes) - 1) // 2
    operands, idx, updates = shapes[:n], shapes[n], shapes[n + 1:]
    _array(idx, "the scatter indices of scatter")
    if not is_integral(idx.element_type):
        raise _err(f"scatter indices must be integers, got {s(idx)}")
    uwd = _ints_attr(ins, "update_window_dims", ())
    iwd = _ints_attr(ins, "inserted_window_dims", ())
    sdod = _ints_attr(ins, "scatter_dims_to_operand_dims", ())
    ibatch = _ints_attr(ins, "input_batching_dims", ())
    sbatch = _ints_attr(ins, "scatter_indices_batching_dims", ())
    ivd = _int_attr(ins, "index_vector_dim")
    if ivd < 0 or ivd > idx.rank:
        raise _err(f"scatter index_vector_dim {ivd} is out of range for indices {s(idx)}")
    expanded = list(idx.dims) + ([1] if ivd == idx.rank else [])
    first = _array(operands[0], "operand 0 of scatter")
    for i, (o, u) in enumerate(zip(operands, updates)):
        _array(o, f"operand {i} of scatter")
        _array(u, f"updates {i} of scatter")
        if not same_dims(o, first):
            raise _err(f"scatter operands must have the same dimensions: {s(first)} and {s(o)}")
        if not same_dims(u, updates[0]):
            raise _err(f"scatter updates must have the same dimensions: {s(updates[0])} and "
                       f"{s(u)}")
    upd = updates[0]
    rank = first.rank
    _check_sorted_unique(uwd, "scatter update_window_dims")
    _check_range(uwd, upd.rank, "scatter update window dimension")
    _check_sorted_unique(iwd, "scatter inserted_window_dims")
    _check_range(iwd, rank, "scatter inserted window dimension")
    _check_sorted_unique(ibatch, "scatter input_batching_dims")
    _check_range(ibatch, rank, "scatter input batching dimension")
    if set(ibatch) & set(iwd):
        raise _err("scatter input_batching_dims and inserted_window_dims overlap")
    if len(uwd) + len(iwd) + len(ibatch) != rank:
        raise _err(f"scatter update_window_dims ({len(uwd)}), inserted_window_dims ({len(iwd)}) "
                   f"and input_batching_dims ({len(ibatch)}) must add up to the operand rank "
                   f"{rank} ({s(first)})")
    if len(sdod) != expanded[ivd]:
        raise _err(f"scatter_dims_to_operand_dims has {len(sdod)} entries but the indices "
                   f"{s(idx)} have {expanded[ivd]} in index_vector_dim {ivd}")
    _check_range(sdod, rank, "scatter_dims_to_operand_dims dimension")
    _check_unique(sdod, "scatter_dims_to_operand_dims")
    if set(sdod) & set(ibatch):
        raise _err("scatter_dims_to_operand_dims and input_batching_dims overlap")
    _check_index_batching("scatter", first, ibatch, "input", idx, sbatch, ivd,
                          "indices", "scatter_indices_batching_dims")
    want_rank = len(expanded) - 1 + len(uwd)
    if upd.rank != want_rank:
        raise _err(f"scatter updates {s(upd)} must have rank {want_rank}")
    window = [first.dims[d] for d in range(rank) if d not in set(iwd) | set(ibatch)]
    for i, d in enumerate(uwd):
        if UNBOUNDED not in (upd.dims[d], window[i]) and upd.dims[d] > window[i]:
            raise _err(f"scatter updates {s(upd)} window dimension {d} ({upd.dims[d]}) exceeds "
                       f"the operand's bound {window[i]} ({s(first)})")
    batch = [d for d in range(len(expanded)) if d != ivd]
    bi = 0
    for i in range(upd.rank):
        if i in set(uwd):
            continue
        if not dim_eq(upd.dims[i], expanded[batch[bi]]):
            raise _err(f"scatter updates {s(upd)} dimension {i} ({upd.dims[i]}) must equal the "
                       f"indices {s(idx)} dimension {batch[bi]} ({expanded[batch[bi]]})")
        bi += 1
    comp = _comp(ins, "to_apply")
    verify_reducer(comp, [_scalar(o.element_type) for o in operands],
                   [u.element_type for u in updates], "scatter")
    return operands[0] if n == 1 else Shape.tuple_of(operands)


def _check_index_batching(opname, operand, op_batch, op_word, idx, idx_batch, ivd, idx_word,
                          idx_attr) -> None:
    """The rules gather and scatter share for their index batching dimensions."""
    _check_range(idx_batch, idx.rank, f"{opname} {idx_word} batching dimension")
    _check_unique(idx_batch, idx_attr)
    if ivd in idx_batch:
        raise _err(f"{idx_attr} contain index_vector_dim")
    if len(op_batch) != len(idx_batch):
        raise _err(f"{opname} has {len(op_batch)} {op_word} batching dimensions but "
                   f"{len(idx_batch)} {idx_word} batching dimensions")
    for a, b in zip(op_batch, idx_batch):
        if not dim_eq(operand.dims[a], idx.dims[b]):
            raise _err(f"{opname} batching dimensions differ in size: operand {s(operand)} "
                       f"dimension {a} vs {idx_word} {s(idx)} dimension {b}")
