"""Slices and broadcasts that element loops read in place (loop_codegen.py), not copied.

A loop body splits its gates out of one product (an LSTM's four slices of x W + h U + b)
and broadcasts a bias over the batch; written as loop nests of their own, those copies
were a third of a scanned LSTM cell's non-dot time.  A slice or broadcast of rank 1 or 2
(its operand too) whose every reader is an elementwise op -- directly, or through a fusion
or call parameter whose readers all are -- is a *view*: it gets no buffer, and the element
loop that reads it runs over its rows and columns

    for r in range(8):                   # rows of the loop's values
        for c in range(64):              # their last dimension
            o = r * 64 + c
            s_v24 = (-v22[(r * 1) * 256 + 192 + c * 1])     # the slice, read in place

reading each view at its operand's index for (r, c).  The values are the same: a copy
moves bits, and the loop computes each element by the same expression.
"""
from __future__ import annotations

from ...hlo.ir import Computation, Instruction
from ..common.fusion_contents import LOOP_OPS

_CALLS = ("fusion", "call")


def _callee(ins: Instruction) -> Computation:
    callee = ins.attrs.get("calls") or ins.attrs.get("to_apply")
    return callee[0] if isinstance(callee, list) else callee


def _users(comp: Computation) -> dict:
    out: dict[int, list] = {}
    for ins in comp.instructions:
        for o in ins.operands:
            out.setdefault(id(o), []).append(ins)
    return out


def _elementwise_readers(x: Instruction, comp: Computation, users: dict) -> bool:
    """Whether every reader of `x` reads it as an elementwise operand (see the module
    docstring); the root of `comp` is read by the computation's caller."""
    if x is comp.root:
        return False
    for u in users.get(id(x), []):
        if u.opcode in LOOP_OPS:
            continue
        if u.opcode not in _CALLS:
            return False
        callee = _callee(u)
        inner = _users(callee)
        for k, o in enumerate(u.operands):
            if o is x and not _elementwise_readers(callee.parameters[k], callee, inner):
                return False
    return True


def _shape_ok(ins: Instruction) -> bool:
    x = ins.operands[0]
    if ins.opcode == "broadcast" and x.shape.num_elements() == 1:
        return True  # a scalar: read at 0 by a loop of any shape
    if not (1 <= ins.shape.rank <= 2 and x.shape.rank <= 2 and ins.shape.num_elements() > 1):
        return False
    if ins.opcode == "broadcast":
        dims = [int(d) for d in ins.attrs.get("dimensions", ())]
        return dims == sorted(dims)
    return ins.opcode == "slice"


def find_views(comp: Computation, out: set | None = None) -> set:
    """ids of the slices and broadcasts of `comp` (and the computations its fusions and
    calls inline) that can be views."""
    out = set() if out is None else out
    users = _users(comp)
    for ins in comp.instructions:
        if ins.opcode in _CALLS:
            find_views(_callee(ins), out)
        elif ins.opcode in ("slice", "broadcast") and _shape_ok(ins) \
                and _elementwise_readers(ins, comp, users):
            out.add(id(ins))
    return out


def view_index(ins: Instruction) -> tuple[int | None, str]:
    """(the view's last dimension C, its operand's index for row r and column c); C is
    None for a broadcast scalar (index 0 in any loop)."""
    if ins.operands[0].shape.num_elements() == 1:
        return None, "0"
    dims = [int(d) for d in ins.shape.dims]
    cols = dims[-1]
    src = [int(d) for d in ins.operands[0].shape.dims]
    if ins.opcode == "slice":
        sl = ins.attrs["slice"].dims
        idx = [f"{s.start} + {v} * {s.stride}"
               for s, v in zip(sl, ["c"] if len(dims) == 1 else ["r", "c"])]
        return cols, (f"({idx[0]}) * {src[1]} + {idx[1]}" if len(idx) == 2 else idx[0])
    at = ["c"] if len(dims) == 1 else ["r", "c"]
    used = [at[int(d)] for d in ins.attrs.get("dimensions", ())]
    return cols, (f"r * {cols} + c" if len(used) == 2 else used[0])
