"""XLA:CPU's fusions inside one of ours, so that FMA contraction sees XLA's use counts.

XLA:CPU compiles each fusion with LLVM's AllowFPOpFusion=Fast: the instruction selector
turns `fadd(fmul(a, b), c)` into one FMA when the fmul has no other use in the kernel
(scalar_codegen._contractions follows that rule within a loop body).  Whether a multiply
has one use depends on how the elementwise graph was cut into fusions, and XLA cuts it
otherwise than passes/loop_fusion.py does: its instruction fusion (instruction_fusion.cc,
cpu_instruction_fusion.cc) recomputes cheap producers in every consumer fusion, and
materializes an expensive value (sqrt, log, divide, ...) that would otherwise be
recomputed.  So in

    m = multiply(d, d)   s = sqrt(add(m, 1))   t = multiply(x, m)   (s used twice)

XLA computes s in a fusion of its own, where m has one use (`fma(d, d, 1)`), while one
loop over the whole chain sees m with two uses (and rounds d*d first).  `split` rewrites a
loop body so that each of XLA's fusions holds its own copy of the cheap values it
recomputes; a copy's users are then its users in that fusion, and the codegen's
single-use rule gives XLA's contractions.  The values are the same either way, except for
those contractions.

What XLA materializes (`materialized`), inside a body (whose parameters and root are
materialized anyway):
  * "globally unfusible" producers (InstructionFusion::ComputeGloballyUnfusible): more
    than effectively unary, reading more elements than they write, and not fusible into
    every consumer along every path -- a path fails at an expensive value with several
    users, or at another such producer;
  * an expensive value whose users end up in more than one fusion (fusing it would
    duplicate it: InstructionFusion::ShouldFuse).
Everything else is duplicated into each fusion that reaches it.
"""
from __future__ import annotations

from ...hlo.ir import Computation, Instruction
from ...hlo.rewrite import clone_instruction
from .fusion_contents import contracts as _contracts_within

# cpu_instruction_fusion.cc IsExpensive, in our opcode names (the elementwise ones).
_EXPENSIVE = frozenset({
    "acos", "acosh", "asin", "asinh", "atan2", "atanh", "cosh", "sinh", "tanh", "cbrt",
    "power", "rsqrt", "sqrt", "erf", "exponential", "exponential-minus-one", "log",
    "log-plus-one", "logistic", "map", "rng"})
_EXPENSIVE_IF_COMPLEX = frozenset({"abs", "sign", "cosine", "sine", "tan"})
_INTEGRAL = frozenset({"s1", "s2", "s4", "s8", "s16", "s32", "s64",
                       "u1", "u2", "u4", "u8", "u16", "u32", "u64"})


def expensive(ins: Instruction) -> bool:
    op, t = ins.opcode, ins.shape.element_type
    if op in _EXPENSIVE:
        return True
    if op in _EXPENSIVE_IF_COMPLEX:
        return t in ("c64", "c128")
    if op == "convert":  # f32 -> bf16 checks for NaN
        return t == "bf16" and ins.operands[0].shape.element_type == "f32"
    if op in ("divide", "remainder"):  # integers with a constant (XLA tests operand 0)
        a = ins.operands[0]
        a = a.operands[0] if a.opcode == "broadcast" else a
        return t not in _INTEGRAL or not (a.opcode == "constant" and _elements(a) == 1)
    return False


def _elements(ins: Instruction) -> int:
    return ins.shape.num_elements() if ins.shape.is_array else 0


def _true_rank(ins: Instruction) -> int:
    return sum(1 for d in ins.shape.dims if d != 1) if ins.shape.is_array else 0


def recomputable(ins: Instruction) -> bool:
    """EffectivelyAtMostUnary, or reading no more elements than it writes: duplicating it
    costs no extra reads, so XLA never forbids it globally."""
    rank = _true_rank(ins)
    big = [o for o in ins.operands if o.opcode not in ("broadcast", "iota")
           and not (o.opcode == "constant" and _elements(o) == 1) and _true_rank(o) >= rank]
    if len(big) <= 1:
        return True
    unique = {id(o): o for o in ins.operands}
    return sum(_elements(o) for o in unique.values()) <= _elements(ins)


def materialized(instructions: list[Instruction], root: Instruction) -> set[int]:
    """ids of the instructions (a topologically ordered loop body, or a group about to
    become one) that XLA:CPU would compute once, in a fusion of their own (see the module
    docstring); the root among them.  Values from outside count as materialized too."""
    index = {id(i): k for k, i in enumerate(instructions)}
    users: dict[int, list[Instruction]] = {id(i): [] for i in instructions}
    for ins in instructions:
        for o in {id(o): o for o in ins.operands}.values():
            if id(o) in index:
                users[id(o)].append(ins)
    if all(len(u) <= 1 for u in users.values()):
        return {id(root)}  # a tree: one fusion (the common case, so no more work)
    reach: dict[int, int] = {}  # bit set of what each instruction reaches (itself included)
    for ins in reversed(instructions):
        r = 1 << index[id(ins)]
        for u in users[id(ins)]:
            r |= reach[id(u)]
        reach[id(ins)] = r

    def edge_fails(x: Instruction, consumer: Instruction) -> bool:
        return expensive(x) and any(u is not consumer for u in users[id(x)])

    unfusible: set[int] = set()
    for p in reversed(instructions):  # consumers first, as XLA walks the post order
        if p is root or p.opcode == "parameter" or not users[id(p)] or \
                recomputable(p):
            continue
        cache: dict[int, bool] = {}

        def all_paths(c: Instruction) -> bool:
            if c is p:
                return True
            if id(c) not in cache:
                ok = True
                for x in {id(o): o for o in c.operands}.values():
                    if id(x) not in index or not (reach[id(p)] >> index[id(x)]) & 1:
                        continue
                    if (x is not p and id(x) in unfusible) or edge_fails(x, c) \
                            or not all_paths(x):
                        ok = False
                        break
                cache[id(c)] = ok
            return cache[id(c)]
        if not all(all_paths(c) for c in users[id(p)]):
            unfusible.add(id(p))

    out = {id(root)} | unfusible
    fusions_of: dict[int, frozenset] = {}  # the fusions (by root id) that compute a value
    for ins in reversed(instructions):
        if id(ins) not in out and ins.opcode != "parameter" and expensive(ins):
            roots = frozenset().union(*(fusions_of[id(u)] for u in users[id(ins)]))
            if len(roots) > 1:
                out.add(id(ins))
        fusions_of[id(ins)] = (frozenset({id(ins)}) if id(ins) in out else
                               frozenset().union(*(fusions_of[id(u)] for u in users[id(ins)])))
    return out


def fusions(instructions: list[Instruction], root: Instruction
            ) -> list[tuple[Instruction, list[Instruction]]]:
    """XLA's fusions within `instructions`: (root, members in order, root last) for each
    materialized value, in order; a member may be in several (XLA recomputes it)."""
    roots = materialized(instructions, root)
    if len(roots) == 1:  # one fusion: everything (the common case)
        return [(root, [i for i in instructions if i.opcode != "parameter"])]
    index = {id(i): k for k, i in enumerate(instructions)}
    out = []
    for r in instructions:
        if id(r) not in roots or r.opcode == "parameter":
            continue
        members, stack = {id(r)}, [r]
        while stack:
            for o in stack.pop().operands:
                if id(o) in index and id(o) not in roots and id(o) not in members \
                        and o.opcode != "parameter":
                    members.add(id(o))
                    stack.append(o)
        out.append((r, sorted((instructions[index[m]] for m in members),
                              key=lambda i: index[id(i)])))
    return out


def split(body: Computation, uniq) -> bool:
    """Rewrite a loop body (parameters, then its instructions in order) so that each XLA
    fusion in it has its own copy of every value it recomputes; True when anything was
    copied.  `uniq` names the copies."""
    parts = fusions(body.instructions, body.root)
    seen: set[int] = set()
    if sum(len(m) for _, m in parts) == len({id(i) for _, m in parts for i in m}):
        return False  # no value in two fusions: nothing to copy
    new = [i for i in body.instructions if i.opcode == "parameter"]
    for _, members in parts:
        mapping: dict[int, Instruction] = {}
        for ins in members:
            ops = [mapping.get(id(o), o) for o in ins.operands]
            if id(ins) in seen:  # already in an earlier fusion: this fusion's own copy
                copy = clone_instruction(ins, ops, uniq(ins.name))
                mapping[id(ins)] = copy
                new.append(copy)
            else:
                seen.add(id(ins))
                ins.operands = ops
                new.append(ins)
    body.instructions = new
    return True


def contracts(instructions: list[Instruction], root: Instruction) -> bool:
    """Would the loop these instructions become (root last) hold a multiply-add XLA:CPU
    contracts into an FMA, in any of XLA's fusions within it?"""
    for _, members in fusions(instructions, root):
        inside = {id(i) for i in members}
        users: dict[int, list[Instruction]] = {}
        for ins in members:
            for o in ins.operands:
                if id(o) in inside:
                    users.setdefault(id(o), []).append(ins)
        if _contracts_within(members, users):
            return True
    return False
