"""gather and scatter in a small region's code (region_code.py), as the unfused kernels.

A small model's loss reads its labels' logits with a gather (`take_along_axis`: a batched
gather of one element a row) and its gradient writes them back with a scatter-add; each
was a Python kernel call of ~50-100 us of numpy index arithmetic between two regions, and
split them.  Here each is a loop nest over static shapes (common/plans_gather.py's maps):

  * gather: for every result element, each operand dimension's start from the index
    vector (or the slice's batch coordinate), clamped into [0, start_hi] as XLA clamps,
    plus the element's offset in its slice;
  * scatter: the operand copied, then the update windows in row-major order of the update
    scatter dims, a window whose start is out of bounds in any dimension skipped whole,
    its elements in row-major order -- the unfused kernel's order.  Only the combiners
    whose unfused kernel is numpy's (`set`: the last write wins; `add`: np.add.at, plain
    IEEE adds, no flush); any other stays outside the region.

Indices of any integer type are read as s64, as the unfused kernels read them.
"""
from __future__ import annotations

from ...hlo.ir import Instruction
from ..common.errors import ExecutionError
from ..common.plans_gather import gather_plan, scatter_plan
from . import comp_patterns as P
from .loop_index import Unsupported, _dims, _lin


def _plan(make, ins: Instruction, *dims):
    """The op's plan; dimension numbers that do not fit: left to the unfused kernel, which
    says so."""
    try:
        return make(ins, *dims)
    except ExecutionError as e:
        raise Unsupported(str(e)) from None


def _index_at(plan, idims, batch: list[str], k: int) -> list[str]:
    """The index array coordinates of component k of the index vector of the slice /
    window at batch coordinates `batch` (in plan.batch_dims' order)."""
    coords = [""] * len(idims)
    for i, d in enumerate(plan.batch_dims):
        coords[d] = batch[i]
    if plan.index_vector_dim < len(idims):
        coords[plan.index_vector_dim] = str(k)
    return coords


def _starts(cg, plan, indices: Instruction, batch: list[str], tag: str) -> list:
    """Per operand dimension: (a name for its start, the expression of it, unclamped)."""
    idims = _dims(indices)
    names = []
    for d in range(len(plan.operand_dims)):
        v = f"{tag}{d}"
        k, j = plan.start_component[d], plan.start_batch[d]
        if k >= 0:
            at = _lin(_index_at(plan, idims, batch, k), idims)
            src = f"np.int64({cg.names[id(indices)]}[{at}])"
        else:
            src = batch[j] if j >= 0 else "0"
        names.append((v, src))
    return names


def emit_gather(cg, ins: Instruction, name: str) -> None:
    x, indices = ins.operands
    if indices.shape.element_type[0] not in "su":
        raise Unsupported("a gather with non-integer indices")
    plan = _plan(gather_plan, ins, _dims(x), _dims(indices))
    out = _dims(ins)
    if 0 in out or 0 in plan.operand_dims:
        raise Unsupported("an empty gather")
    j = [f"j{d}" for d in range(len(out))]
    body = []
    starts = _starts(cg, plan, indices, [j[d] for d in plan.out_batch_dims], "gs")
    for (v, src), hi in zip(starts, plan.start_hi):
        body.append(f"{v} = min(max({src}, 0), {hi})")
    coords = [f"gs{d}" for d in range(len(plan.operand_dims))]
    for q, d in enumerate(plan.offset_operand_dims):
        coords[d] += f" + {j[plan.out_offset_dims[q]]}"
    body.append(f"{name}[{_lin(j, out)}] = {cg.names[id(x)]}[{_lin(coords, plan.operand_dims)}]")
    cg._alloc(ins, name)
    cg._nest(out, body)


def emit_scatter(cg, ins: Instruction, name: str) -> None:
    if len(ins.operands) != 3 or not ins.shape.is_array:
        raise Unsupported("a variadic scatter")
    x, indices, upd = ins.operands
    if indices.shape.element_type[0] not in "su":
        raise Unsupported("a scatter with non-integer indices")
    comp = ins.attrs["to_apply"]
    t = ins.shape.element_type
    setting = P.returns_param(comp, 1)
    if not setting and (P.binary_op(comp) != "add" or P.ufunc_for("add", t) is None
                        or t not in ("f32", "f64", "s8", "s16", "s32", "s64",
                                     "u8", "u16", "u32", "u64")):
        raise Unsupported("a scatter whose combiner is not numpy's set or add")
    plan = _plan(scatter_plan, ins, _dims(x), _dims(indices), _dims(upd))
    ud = _dims(upd)
    if 0 in ud or 0 in plan.operand_dims:
        raise Unsupported("an empty scatter")
    cg._alloc(ins, name)
    n = ins.shape.num_elements()
    cg.lines += [f"for o in range({n}):", f"    {name}[o] = {cg.names[id(x)]}[o]"]
    b = [f"b{i}" for i in range(len(plan.update_scatter_dims))]
    w = [f"w{i}" for i in range(len(plan.update_window_dims))]
    starts = _starts(cg, plan, indices, b, "ss")
    body = [f"{v} = {src}" for v, src in starts]
    inside = " and ".join(f"0 <= {v} <= {plan.start_hi[d]}" for d, (v, _) in
                          enumerate(starts)) or "True"
    coords = [v for v, _ in starts]
    for q, d in enumerate(plan.window_operand_dims):
        coords[d] += f" + {w[q]}"
    ucoords = [""] * len(ud)
    for i, d in enumerate(plan.update_scatter_dims):
        ucoords[d] = b[i]
    for q, d in enumerate(plan.update_window_dims):
        ucoords[d] = w[q]
    at, src = _lin(coords, plan.operand_dims), f"{cg.names[id(upd)]}[{_lin(ucoords, ud)}]"
    store = f"{name}[{at}] = {src}" if setting else f"{name}[{at}] = {name}[{at}] + {src}"
    window = [f"for {w[q]} in range({ud[d]}):" for q, d in enumerate(plan.update_window_dims)]
    window = ["    " * q + ln for q, ln in enumerate(window)]
    body += [f"if {inside}:"] + ["    " + ln for ln in window] + \
        ["    " * (len(window) + 1) + store]
    cg._nest([ud[d] for d in plan.update_scatter_dims], body, "b")
