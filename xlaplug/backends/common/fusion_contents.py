"""What a loop fusion may contain: the backend's answer, which passes/loop_fusion.py asks
(it outlines such chains) and the devices' fusion kernels ask (cpu/fused_loop.py,
cuda/fused_loop.py: is this body one loop, and how does it read each parameter?).

A loop over n elements may hold
  * the elementwise ops the scalar op table expresses (LOOP_OPS: opcodes.ELEMENTWISE less
    those with no scalar form), `convert` included;
  * rank-0 `constant`s and `broadcast`s -- free to recompute; a broadcast of an array keeps
    its operand outside as a parameter, read at the mapped index (`param_index_map`);
  * `reshape` and `copy` (row-major order and logical values are unchanged).
"""
from __future__ import annotations

import re

from ...hlo.ir import Computation, Instruction, Shape
from ...hlo.opcodes import ELEMENTWISE, EXPANDED_UNARY
from .errors import ScalarCompileError

# Elementwise opcodes with no scalar form in compiled loops.
_NO_SCALAR_FORM = frozenset({"stochastic-convert", "rng", "map"}) | EXPANDED_UNARY
LOOP_OPS = frozenset(ELEMENTWISE) - _NO_SCALAR_FORM
SHAPE_OPS = frozenset({"reshape", "copy"})
DEFAULT_MIN_ELEMENTS = 1 << 16


def n_elements(shape: Shape) -> int:
    """Elements of an array shape; -1 for a tuple or token (never a loop's size)."""
    return shape.num_elements() if shape.is_array else -1


def cheap(ins: Instruction) -> bool:
    """Free to recompute in every fusion that reads it: rank-0 constants, and broadcasts
    (read in place: a loop reads the broadcast operand at the element's source index)."""
    return (ins.opcode == "constant" and ins.shape.is_array and ins.shape.rank == 0
            and not ins.literal_elided) or (ins.opcode == "broadcast" and bool(ins.operands))


def edge_broadcast(ins: Instruction) -> bool:
    """A broadcast of more than one element: its operand must be a fusion parameter, read
    through an index map (param_index_map)."""
    return ins.opcode == "broadcast" and n_elements(ins.operands[0].shape) != 1


def member(ins: Instruction, n: int) -> bool:
    """May this instruction be inside a loop over n elements?"""
    if not ins.shape.is_array or n_elements(ins.shape) not in (1, n):
        return False
    if ins.opcode in LOOP_OPS:
        return all(o.shape.is_array and n_elements(o.shape) in (1, n) for o in ins.operands)
    if ins.opcode in SHAPE_OPS:
        return n_elements(ins.operands[0].shape) == n_elements(ins.shape)
    return cheap(ins)


def contracts(instructions, users: dict) -> bool:
    """Does this loop (its instructions; `users`: id -> the instructions reading it) hold a
    multiply XLA:CPU contracts into an FMA: an f32/f64 multiply whose only user is an add or
    subtract of the loop, through single-user reshapes/copies (scalar_codegen's rule, which
    then does the contracting)?  XLA does it in every fused loop, whatever its size, so such
    a chain is fused, and run compiled, however small (one rounding, not two)."""
    inside = {id(i) for i in instructions}
    for ins in instructions:
        if ins.opcode not in ("add", "subtract") or len(ins.operands) != 2 or \
                ins.shape.element_type not in ("f32", "f64"):
            continue
        for m in ins.operands:
            while m.opcode in SHAPE_OPS and id(m) in inside and len(users.get(id(m), ())) == 1:
                m = m.operands[0]
            if (m.opcode == "multiply" and id(m) in inside and len(users.get(id(m), ())) == 1
                    and m.shape.element_type == ins.shape.element_type):
                return True
    return False


def computation_contracts(comp: Computation) -> bool:
    """`contracts` for a fusion's body."""
    users: dict[int, list] = {}
    for ins in comp.instructions:
        for o in ins.operands:
            users.setdefault(id(o), []).append(ins)
    return contracts(comp.instructions, users)


def param_index_map(b: Instruction) -> str:
    """For `b = broadcast(p)` in a loop over b's elements: p's flat index, as an expression
    of the loop index `i` (row-major coordinates of b, those p keeps, p's strides)."""
    out_dims = [int(d) for d in b.shape.dims]
    in_dims = [int(d) for d in b.operands[0].shape.dims]
    out_strides = [1] * len(out_dims)
    for d in range(len(out_dims) - 2, -1, -1):
        out_strides[d] = out_strides[d + 1] * out_dims[d + 1]
    in_stride, terms = 1, []
    for k in range(len(in_dims) - 1, -1, -1):
        d = int(b.attrs["dimensions"][k])
        coord = f"(i // {out_strides[d]})" if out_strides[d] != 1 else "i"
        if out_strides[d] * out_dims[d] != n_elements(b.shape):  # not the outermost: wrap
            coord = f"({coord} % {out_dims[d]})"
        terms.append(coord if in_stride == 1 else f"{coord} * {in_stride}")
        in_stride *= in_dims[k]
    return " + ".join(reversed(terms)) or "0"


def loop_shape(comp: Computation) -> list | None:
    """For a fused computation that is one elementwise loop: each parameter's role,
    "array" (read at the loop index), "scalar" (one element, read once) or ("index", expr)
    (read at the flat index `expr` of the loop index `i`: the operand of broadcasts);
    else None."""
    root = comp.root
    if root is None or not root.shape.is_array:
        return None
    n = n_elements(root.shape)
    users: dict[int, list[Instruction]] = {}
    for ins in comp.instructions:
        for o in ins.operands:
            users.setdefault(id(o), []).append(ins)
    maps: dict[int, str] = {}
    for ins in comp.instructions:
        if ins.opcode == "parameter":
            if not ins.shape.is_array:
                return None
            us = users.get(id(ins), [])
            edge = [u for u in us if edge_broadcast(u)]
            if edge:  # read only through broadcasts, all mapping the same way
                exprs = {param_index_map(u) for u in edge}
                if len(edge) != len(us) or len(exprs) != 1 or n_elements(edge[0].shape) != n:
                    return None
                maps[id(ins)] = exprs.pop()
            elif n_elements(ins.shape) not in (1, n):
                return None
            continue
        if edge_broadcast(ins) and ins.operands[0].opcode != "parameter":
            return None
        if not member(ins, n):
            return None
        # A one-element value feeding an n-element op other than through broadcast (select
        # and clamp's scalar operands) is fine; an n-element value must never meet a
        # one-element op, which would read it at index 0 only.
        if n_elements(ins.shape) == 1 and n > 1 and any(n_elements(o.shape) == n for o in ins.operands):
            return None
    roles: list = []
    for p in comp.parameters:
        if id(p) in maps:
            roles.append(("index", maps[id(p)]))
        else:
            roles.append("array" if n_elements(p.shape) == n and n > 1 else "scalar")
    return roles


_TERM = re.compile(r"^\(*i(?: // (\d+)\))?(?: % (\d+)\))?(?: \* (\d+))?$")


def _term_step(term: str, row: int) -> int | None:
    """One term of param_index_map's sum, `((i // s) % d) * k` with any part absent, over
    the loop index i = r * row + j: its step in j when it is r's alone (0) or affine in j
    within every row (k), else None."""
    m = _TERM.match(term.strip())
    if m is None:
        return None
    s, d, k = (int(g) if g else None for g in m.groups())
    s, k = s or 1, k or 1
    if s % row == 0:
        return 0
    if s == 1 and (d is None or d % row == 0):
        return k
    return None


def index_step(expr: str, row: int) -> int | None:
    """For a param_index_map expression over i = r * row + j (rows of `row` elements): how
    far the index moves per step of j when it is affine in j within every row (0: one
    element per row; 1: contiguous), else None."""
    parts = [_term_step(t, row) for t in expr.split(" + ")] if expr != "0" else [0]
    return None if any(p is None for p in parts) else sum(parts)


_NO_PLAN = object()


def element_index(role) -> str:
    """Where a loop over `i` reads an array parameter, by its loop_shape role: at i, or at
    the broadcast operand index of an ("index", expr) role."""
    return "i" if role == "array" else role[1]


def loop_plan(ctx, comp, compile_body, cache: str = "_fused_loop_plans"):
    """(compiled body, parameter roles) for a loop-fusion body, or None when it is not one
    loop or scalar code cannot express it; worked out once per computation and run context.
    `compile_body(comp, roles)` compiles the body in elementwise mode (for this device)."""
    plans = ctx.kernel_cache.table(cache)
    plan = plans.get(id(comp), _NO_PLAN)
    if plan is _NO_PLAN:
        roles = loop_shape(comp)
        plan = None
        if roles is not None:
            try:
                plan = (compile_body(comp, tuple(roles)), tuple(roles))
            except ScalarCompileError:
                plan = None
        plans[id(comp)] = plan
    return plan
