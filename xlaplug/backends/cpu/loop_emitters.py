"""Loop code (loop_codegen.py) of the data-movement ops: broadcast, slice, transpose, iota,
concatenate, dynamic-slice and dynamic-update-slice, each a loop nest writing its buffer
(a dynamic-update-slice of a state leaf the body owns writes into that leaf)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ...hlo.ir import Instruction
from .jit_drivers import numba_dtype
from .loop_index import _dims, _lin

if TYPE_CHECKING:
    from .loop_codegen import ArrayCodegen


def _broadcast(cg: ArrayCodegen, ins: Instruction, name: str) -> None:
    bd = list(ins.attrs.get("dimensions", ()))
    cg._mapped(ins, name, cg._operand(ins, 0, [f"j{d}" for d in bd]))


def _slice(cg: ArrayCodegen, ins: Instruction, name: str) -> None:
    sl = ins.attrs["slice"].dims
    cg._mapped(ins, name, cg._operand(ins, 0, [f"{s.start} + j{d} * {s.stride}"
                                              for d, s in enumerate(sl)]))


def _transpose(cg: ArrayCodegen, ins: Instruction, name: str) -> None:
    perm = list(ins.attrs["dimensions"])
    idx = [""] * len(perm)
    for j, p in enumerate(perm):  # output dimension j is operand dimension perm[j]
        idx[p] = f"j{j}"
    cg._mapped(ins, name, cg._operand(ins, 0, idx))


def _iota(cg: ArrayCodegen, ins: Instruction, name: str) -> None:
    d = int(ins.attrs.get("iota_dimension", 0))
    cg._mapped(ins, name, f"np.{numba_dtype(ins.shape.dtype).name}(j{d})")


def _concatenate(cg: ArrayCodegen, ins: Instruction, name: str) -> None:
    cd = int(ins.attrs["dimensions"][0])
    dims = _dims(ins)
    cg._alloc(ins, name)
    idx = [f"j{d}" for d in range(len(dims))]
    body, off = [], 0
    for k, o in enumerate(ins.operands):
        size = int(o.shape.dims[cd])
        src = list(idx)
        src[cd] = f"j{cd} - {off}"
        kw = "if" if k == 0 else "elif"
        body += [f"{kw} j{cd} < {off + size}:",
                 f"    {name}[{_lin(idx, dims)}] = {cg._operand(ins, k, src)}"]
        off += size
    cg._nest(dims, body)


def _dynamic_slice(cg: ArrayCodegen, ins: Instruction, name: str) -> None:
    x = ins.operands[0]
    sizes = _dims(ins)
    st = cg._start_indices(ins, 1, [int(e) - s for e, s in zip(x.shape.dims, sizes)])
    cg._mapped(ins, name, cg._operand(ins, 0, [f"{s} + j{d}" for d, s in enumerate(st)]))


def _dynamic_update_slice(cg: ArrayCodegen, ins: Instruction, name: str) -> None:
    x, u = ins.operands[0], ins.operands[1]
    st = cg._start_indices(ins, 2, [int(e) - int(s) for e, s in zip(x.shape.dims, u.shape.dims)])
    leaf = cg._in_place.get(id(ins))
    if leaf is not None:  # into the state leaf itself (the loop's own copy of it)
        cg.owned.add(leaf)
        name = cg.names[id(x)]
    else:
        cg._alloc(ins, name)
        cg.lines.append(f"{name}[:] = {cg.names[id(x)]}")
    idx = [f"j{d}" for d in range(u.shape.rank)]
    dst = _lin([f"{s} + j{d}" for d, s in enumerate(st)], x.shape.dims)
    cg._nest(tuple(u.shape.dims), [f"{name}[{dst}] = {cg.names[id(u)]}[{_lin(idx, u.shape.dims)}]"])
    return name


EMITTERS = {"broadcast": _broadcast, "slice": _slice, "transpose": _transpose,
            "iota": _iota, "concatenate": _concatenate, "dynamic-slice": _dynamic_slice,
            "dynamic-update-slice": _dynamic_update_slice}
