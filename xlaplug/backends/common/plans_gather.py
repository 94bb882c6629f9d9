"""Gather and scatter plans: XLA's dimension numbers resolved once into per-dimension maps,
as plain data that the CPU and CUDA kernels both read -- so the two devices cannot pair
dimensions differently.

XLA's index mapping (operation semantics, Gather / Scatter; HloEvaluator's HandleGather and
HandleScatter), with the index array's index_vector_dim taken out:

* the index array's other dimensions (`batch_dims`, in order) enumerate the slices:
  gather's result dims not in offset_dims, scatter's update dims not in update_window_dims
  run over them, in the same order;
* an operand dimension's start is component k of the index vector when
  start_index_map / scatter_dims_to_operand_dims names it k-th (`start_component`), the
  slice's coordinate along the paired index dimension when it is an operand batching
  dimension (`start_batch`: that dimension's position in batch_dims), else 0;
* the operand dimensions not collapsed / inserted and not batching dimensions, in order,
  are walked by gather's offset dims / scatter's update window dims, in order;
* gather clamps each start into [0, start_hi]; scatter skips a whole update window whose
  start lies outside [0, start_hi] in any dimension.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import ExecutionError


def _ints(v) -> tuple[int, ...]:
    if v is None:
        return ()
    if isinstance(v, int):
        return (v,)
    return tuple(int(d) for d in v)


@dataclass(frozen=True)
class IndexPlan:
    """What gather and scatter share: which index array dims enumerate the slices/windows
    and where each operand dimension's start comes from."""
    operand_dims: tuple[int, ...]
    index_vector_dim: int
    batch_dims: tuple[int, ...]          # index array dims that enumerate slices / windows
    start_component: tuple[int, ...]     # per operand dim: index-vector component, or -1
    start_batch: tuple[int, ...]         # per operand dim: position in batch_dims, or -1
    start_hi: tuple[int, ...]            # per operand dim: the largest start in bounds


@dataclass(frozen=True)
class GatherPlan(IndexPlan):
    out_batch_dims: tuple[int, ...]      # result dims over batch_dims, paired in order
    out_offset_dims: tuple[int, ...]     # result dims inside a slice
    offset_operand_dims: tuple[int, ...]  # operand dim each of out_offset_dims walks
    slice_sizes: tuple[int, ...]


@dataclass(frozen=True)
class ScatterPlan(IndexPlan):
    update_scatter_dims: tuple[int, ...]  # update dims over batch_dims, paired in order
    update_window_dims: tuple[int, ...]  # update dims inside a window
    window_operand_dims: tuple[int, ...]  # operand dim each update window dim walks
    window_sizes: tuple[int, ...]        # per operand dim (1 where no window dim walks it)


def _starts(ins, rank, batch_dims, index_map, operand_batching, index_batching, index_dims,
            ivd):
    """(start_component, start_batch) per operand dimension, checked against the ranks."""
    vector_len = index_dims[ivd] if ivd < len(index_dims) else 1
    if len(index_map) != vector_len:
        raise ExecutionError(f"{ins.opcode} '{ins.name}': {len(index_map)} start index "
                             f"dimensions for index vectors of length {vector_len}")
    if len(operand_batching) != len(index_batching):
        raise ExecutionError(f"{ins.opcode} '{ins.name}': {len(operand_batching)} operand "
                             f"batching dims, {len(index_batching)} index batching dims")
    component, batch = [-1] * rank, [-1] * rank
    for k, d in enumerate(index_map):
        if not 0 <= d < rank:
            raise ExecutionError(f"{ins.opcode} '{ins.name}': start index dimension {d} "
                                 f"out of range for an operand of rank {rank}")
        component[d] = k
    for d, sd in zip(operand_batching, index_batching):
        if not 0 <= d < rank or sd not in batch_dims:
            raise ExecutionError(f"{ins.opcode} '{ins.name}': batching dims "
                                 f"{operand_batching} / {index_batching} do not fit the shapes")
        batch[d] = batch_dims.index(sd)
    return tuple(component), tuple(batch)


def gather_plan(ins, operand_dims, index_dims) -> GatherPlan:
    """The gather `ins` on an operand and an index array of these dims; an ExecutionError
    when its dimension numbers do not fit the shapes."""
    a = ins.attrs
    xd, idims = tuple(int(n) for n in operand_dims), tuple(int(n) for n in index_dims)
    rank, ivd = len(xd), int(a["index_vector_dim"])
    slice_sizes = _ints(a["slice_sizes"])
    offset_dims = _ints(a.get("offset_dims"))
    batching = _ints(a.get("operand_batching_dims"))
    dropped = set(_ints(a.get("collapsed_slice_dims"))) | set(batching)
    batch_dims = tuple(d for d in range(len(idims)) if d != ivd)
    out_rank = len(ins.shape.dims)
    out_batch = tuple(d for d in range(out_rank) if d not in offset_dims)
    offset_operand = tuple(d for d in range(rank) if d not in dropped)
    if (len(slice_sizes) != rank or len(out_batch) != len(batch_dims)
            or len(offset_dims) != len(offset_operand)
            or any(s > n for s, n in zip(slice_sizes, xd))):
        raise ExecutionError(f"gather '{ins.name}': dimension numbers do not match the shapes")
    component, batch = _starts(ins, rank, batch_dims, _ints(a.get("start_index_map")),
                               batching, _ints(a.get("start_indices_batching_dims")), idims,
                               ivd)
    return GatherPlan(
        operand_dims=xd, index_vector_dim=ivd, batch_dims=batch_dims,
        start_component=component, start_batch=batch,
        start_hi=tuple(n - s for n, s in zip(xd, slice_sizes)), out_batch_dims=out_batch,
        out_offset_dims=offset_dims, offset_operand_dims=offset_operand,
        slice_sizes=slice_sizes)


def scatter_plan(ins, operand_dims, index_dims, update_dims) -> ScatterPlan:
    """The scatter `ins` on an operand, index array and updates of these dims; an
    ExecutionError when its dimension numbers do not fit the shapes."""
    a = ins.attrs
    xd, idims = tuple(int(n) for n in operand_dims), tuple(int(n) for n in index_dims)
    ud = tuple(int(n) for n in update_dims)
    rank, ivd = len(xd), int(a["index_vector_dim"])
    uwd = _ints(a.get("update_window_dims"))
    batching = _ints(a.get("input_batching_dims"))
    dropped = set(_ints(a.get("inserted_window_dims"))) | set(batching)
    batch_dims = tuple(d for d in range(len(idims)) if d != ivd)
    scatter_udims = tuple(d for d in range(len(ud)) if d not in uwd)
    window_operand = tuple(d for d in range(rank) if d not in dropped)
    if len(scatter_udims) != len(batch_dims):
        raise ExecutionError(f"scatter '{ins.name}': dimension numbers do not match the shapes")
    if len(window_operand) != len(uwd):
        raise ExecutionError(f"scatter '{ins.name}': {len(uwd)} update window dims for "
                             f"{len(window_operand)} operand window dims")
    sizes = [1] * rank
    for d, u in zip(window_operand, uwd):
        sizes[d] = ud[u]
    component, batch = _starts(ins, rank, batch_dims,
                               _ints(a.get("scatter_dims_to_operand_dims")), batching,
                               _ints(a.get("scatter_indices_batching_dims")), idims, ivd)
    return ScatterPlan(
        operand_dims=xd, index_vector_dim=ivd, batch_dims=batch_dims,
        start_component=component, start_batch=batch,
        start_hi=tuple(n - s for n, s in zip(xd, sizes)), update_scatter_dims=scatter_udims,
        update_window_dims=uwd, window_operand_dims=window_operand, window_sizes=tuple(sizes))
