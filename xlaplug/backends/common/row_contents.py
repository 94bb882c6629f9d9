"""What a row fusion may contain: reductions over the minor dimensions with their
elementwise producers and consumers -- softmax, layernorm, logsumexp, mean/variance -- the
backend's answer, which passes/reduce_fusion.py asks (it outlines such groups) and the CPU
fusion kernel asks (cpu/row_loop.py: is this body a row loop?), for our fusions and XLA's
(kInput reductions, the `__ynn_fusion` kCustom fusions XLA:CPU makes of softmax).

Seen from a reduce of x[M..., K...] over its trailing dimensions (K elements per row, M
rows), every value of the group has one of two levels:
  * "full": M*K elements, in x's row-major order (flat index i = m*K + k): elementwise ops,
    reshapes/copies, broadcasts of a row value along the leading dimensions, of a
    one-element value, or of a fusion parameter (any mapping: read at param_index_map);
  * "row": M elements (or one): the reduces, elementwise ops, reshapes/copies and
    order-keeping broadcasts of row values, rank-0 constants.
A full value reaches a row value only through a reduce; a row value reaches a full one
only through a broadcast.  So a row fusion runs, per row, one loop over K for each reduce
(its full producers evaluated inline) and one for the full outputs -- the row stays in
cache, memory is read once and written once.
"""
from __future__ import annotations

import numpy as np

from ...hlo.ir import Computation, Instruction
from .fusion_contents import LOOP_OPS, SHAPE_OPS, n_elements
from .plans import physical_order

FULL, ROW = "full", "row"
# The longest row a row loop takes: a reduce of a computed row fills a buffer of K elements
# per row (a few KiB stay in cache; a whole-array reduction would allocate its size).
MAX_ROW = 1 << 16


def postorder(comp: Computation) -> list[Instruction]:
    """The body's instructions, operands before users, from the parameters and the root."""
    order, seen = [], set()
    for root in [*comp.parameters, comp.root]:
        stack = [(root, False)]
        while stack:
            ins, done = stack.pop()
            if done:
                order.append(ins)
            elif id(ins) not in seen:
                seen.add(id(ins))
                stack.append((ins, True))
                stack.extend((o, False) for o in reversed(ins.operands) if id(o) not in seen)
    return order


def row_reduce_dims(ins: Instruction) -> tuple[int, int] | None:
    """(M, K) for a one-operand reduce over trailing dimensions of its operand (K the
    reduced elements per row, 1 < K <= MAX_ROW), with a rank-0 init; else None."""
    if ins.opcode != "reduce" or len(ins.operands) != 2 or not ins.shape.is_array:
        return None
    x, init = ins.operands
    if not x.shape.is_array or not init.shape.is_array or init.shape.rank != 0:
        return None
    dims = sorted(int(d) for d in ins.attrs.get("dimensions", ()))
    r = x.shape.rank
    if not dims or dims != list(range(r - len(dims), r)):
        return None
    k = 1
    for d in dims:
        k *= int(x.shape.dims[d])
    m = n_elements(ins.shape)
    if k < 2 or k > MAX_ROW or m < 1 or m * k != n_elements(x.shape):
        return None
    return m, k


# The longest row whose sum the CPU's row loop folds as vector code (cpu/pairwise_vector.py:
# its code grows with the row's 128-element leaves).
VECTOR_SUM_MAX = 1 << 14
_IDENTITY = {"add": 0.0, "maximum": -np.inf, "minimum": np.inf}


def vector_fold(ins: Instruction) -> bool:
    """Does the CPU's row loop fold this row reduce as vector code -- an f32/f64 sum of 8 to
    VECTOR_SUM_MAX elements a row (numpy's pairwise order, cpu/pairwise_vector.py) or an
    f32 maximum/minimum (row_folds.coded_extreme), from the reducer's identity (a constant,
    or a fusion parameter, whose value the run checks)?  Such a reduce is worth a row loop
    alone: numpy's own reduce folds a sum one element per add (f32[4096,1024] rows: 0.60 ms
    on one core against 0.18 in XLA:CPU), a maximum not much faster."""
    mk = row_reduce_dims(ins)
    op = reducer_op(ins.attrs["to_apply"]) if mk is not None else None
    t = ins.shape.element_type
    if op not in _IDENTITY or t not in (("f32", "f64") if op == "add" else ("f32",)):
        return False
    if op == "add" and not 8 <= mk[1] <= VECTOR_SUM_MAX:
        return False
    init = ins.operands[1]
    if init.opcode == "parameter":
        return True
    ident = np.asarray(_IDENTITY[op], np.float32 if t == "f32" else np.float64)
    return init.opcode == "constant" and \
        np.asarray(init.literal).reshape(()).tobytes() == ident.tobytes()


def worth_a_row_loop(reduces: list[Instruction], full_ops: bool) -> bool:
    """Is a row group worth compiling: two reduces or more, a reduce with an elementwise op
    over the full rows (`full_ops`), or a lone reduce that folds as vector code
    (vector_fold)?  Any other lone reduce runs as fast through numpy's reduce, uncompiled.
    The row-fusion pass (whole groups) and the CPU's row fusion (a fused body) ask this."""
    return len(reduces) >= 2 or full_ops or (len(reduces) == 1 and vector_fold(reduces[0]))


def reducer_op(comp: Computation) -> str | None:
    """The opcode when the reducer `comp` is one binary op of its two scalar parameters."""
    root, params = comp.root, comp.parameters
    if root is None or len(params) != 2 or len(root.operands) != 2 or \
            not root.shape.is_array or root.shape.rank != 0:
        return None
    if {id(o) for o in root.operands} != {id(p) for p in params}:
        return None
    return root.opcode


def row_broadcast(b: Instruction, m: int) -> bool:
    """Does broadcast `b` (to a full value) read its operand at row m of element m*K + k:
    the operand's dimensions are b's leading ones, in order, M elements in all?"""
    src = b.operands[0]
    r = src.shape.rank
    dims = [int(d) for d in b.attrs.get("dimensions", ())]
    return (n_elements(src.shape) == m and dims == list(range(r))
            and [int(d) for d in src.shape.dims] == [int(d) for d in b.shape.dims[:r]])


def level(ins: Instruction, m: int, k: int, levels: dict, is_input=None) -> str | None:
    """FULL, ROW or None (not in a row fusion over M rows of K) for a non-parameter
    instruction whose operands' levels are in `levels` (id -> level; a parameter or any
    value from outside the group: FULL, ROW or None by its size).  `is_input(v)`: is v read
    from outside (a parameter of the fusion; default: v is a parameter)?"""
    if not ins.shape.is_array or ins.has_side_effect:
        return None
    n = n_elements(ins.shape)
    op = ins.opcode
    if op == "constant":
        return ROW if ins.shape.rank == 0 and not ins.literal_elided else None
    if op == "reduce":
        ok = row_reduce_dims(ins) == (m, k) and levels.get(id(ins.operands[0])) == FULL \
            and levels.get(id(ins.operands[1])) == ROW and n_elements(ins.operands[1].shape) == 1
        return ROW if ok else None
    if op == "broadcast":
        src = ins.operands[0]
        ns = n_elements(src.shape)
        if n == m * k:
            if ns == 1 or (levels.get(id(src)) == ROW and row_broadcast(ins, m)) or \
                    (is_input(src) if is_input else src.opcode == "parameter"):
                return FULL
            return None
        dims = [int(d) for d in ins.attrs.get("dimensions", ())]
        if n in (m, 1) and (ns == 1 or (ns == n and dims == sorted(dims))):
            return ROW
        return None
    want = FULL if n == m * k else ROW if n in (m, 1) else None
    if want is None:
        return None
    if op in SHAPE_OPS or plain_bitcast(ins):
        return want if n_elements(ins.operands[0].shape) == n else None
    if op in LOOP_OPS:
        for o in ins.operands:
            lo = levels.get(id(o))
            if lo is None or (lo != want and n_elements(o.shape) != 1):
                return None
        return want
    return None


def plain_bitcast(ins: Instruction) -> bool:
    """A `bitcast` that is a reshape (XLA's optimized HLO has them): same element type, both
    layouts row-major, so the row-major order of the elements is kept."""
    if ins.opcode != "bitcast" or len(ins.operands) != 1:
        return False
    src = ins.operands[0].shape
    dst = ins.shape
    return (src.is_array and dst.is_array and src.element_type == dst.element_type
            and list(physical_order(src)) == list(range(src.rank))
            and list(physical_order(dst)) == list(range(dst.rank)))


def value_level(ins: Instruction, m: int, k: int) -> str | None:
    """The level of a value read from outside (a parameter), by its size."""
    if not ins.shape.is_array:
        return None
    n = n_elements(ins.shape)
    return FULL if n == m * k else ROW if n in (m, 1) else None


def _rows_of(comp: Computation) -> tuple[int, int] | None:
    """(M, K) from the body's first reduce, else from its first broadcast of a computed
    value along leading dimensions (XLA's kLoop fusions that compute a row statistic, then
    broadcast it: `x - mean * (1/K)`, which fused_loop's one loop cannot express)."""
    for ins in comp.instructions:
        if ins.opcode == "reduce":
            return row_reduce_dims(ins)
    for ins in comp.instructions:
        if ins.opcode == "broadcast" and ins.operands[0].opcode != "parameter":
            m, n = n_elements(ins.operands[0].shape), n_elements(ins.shape)
            if 1 < m < n and n // m <= MAX_ROW and row_broadcast(ins, m):
                return m, n // m
    return None


def row_shape(comp: Computation) -> tuple[int, int, dict] | None:
    """(M, K, levels) when the fused computation `comp` is a row fusion (see the module
    docstring): its reduces (none, or several) all over M rows of K, every instruction at
    a level, a root (or tuple of roots) of arrays; else None."""
    if comp.root is None:
        return None
    mk = _rows_of(comp)
    if mk is None:
        return None
    m, k = mk
    levels: dict[int, str | None] = {}
    for ins in comp.instructions:
        if ins.opcode == "parameter":
            levels[id(ins)] = value_level(ins, m, k)
            continue
        if ins is comp.root and ins.opcode == "tuple":
            continue
        lv = level(ins, m, k, levels)
        if lv is None:
            return None
        levels[id(ins)] = lv
    outs = comp.root.operands if comp.root.opcode == "tuple" else [comp.root]
    if not outs or any(levels.get(id(o)) is None or o.opcode == "parameter" for o in outs):
        return None
    return m, k, levels
