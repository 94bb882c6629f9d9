"""Reduction fusion: row reductions with their elementwise producers and consumers -> one
`fusion` (kInput when a reduce is its root, else kLoop), as XLA's input fusion (and
XLA:CPU's `__ynn_fusion` of a whole softmax) does.

    m = f32[4096] reduce(x, -inf), dimensions={1}, to_apply=max
    e = f32[4096,1024] exponential(subtract(x, broadcast(m)))     ->  one fusion(x)
    s = f32[4096] reduce(e, 0), dimensions={1}, to_apply=add
    ROOT r = f32[4096,1024] divide(e, broadcast(s))

Unfused, softmax is four passes over f32[4096,1024] (max, exp, sum, divide) and two
temporaries of that size; the fusion's kernel (backends/cpu/row_fusion.py) runs per row one
loop per reduce, its producers inline, and one loop for the output -- read x, write r.

What a group may hold is the backend's to say (backends/common/row_contents.py: values of
M*K elements in x's order or of M, reduces over the trailing K elements).  A group grows
from a root upward, like loop-fusion's: an instruction joins when every user of it is in the
group (nothing computed twice, no cycle through the outside), it is not the computation's
root, has no control edges or side effects, and no loaded plugin overrides its opcode;
rank-0 constants and broadcasts are copied in.  A group needs a reduce and more work than it
(another reduce, or an elementwise op over M*K elements), or a reduce whose fold is vector
code in the row loop (a sum, or an f32 max/min: numpy's folds are several times slower);
and only reduces of at least `min_elements` elements (M*K) start one: below,
compiling costs more than it saves.  The pass runs before loop-fusion, which takes the
elementwise chains left over.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..backends.common.fusion_contents import DEFAULT_MIN_ELEMENTS, LOOP_OPS, SHAPE_OPS, cheap
from ..backends.common.row_contents import (level, reducer_op, row_reduce_dims, value_level,
                                            worth_a_row_loop)
from ..hlo.attr_types import Word
from ..hlo.ir import Computation, Instruction, Module
from .context import PassContext
from .loop_fusion import _users, outline_groups

_REDUCERS = frozenset({"add", "maximum", "minimum", "multiply"})
_FLOATS = frozenset({"f32", "f64", "bf16", "f16"})


@dataclass
class ReduceFusion:
    name: ClassVar[str] = "reduce-fusion"
    min_elements: int = DEFAULT_MIN_ELEMENTS

    def run(self, module: Module, ctx: PassContext) -> bool:
        skip = ctx.registry.overridden_opcodes() & (LOOP_OPS | SHAPE_OPS | {"reduce",
                                                                            "broadcast"})
        new_comps = outline_groups(module, lambda c: _groups(c, self.min_elements, skip))
        for comp in module.computations:  # name the fusions' kind
            if id(comp) in new_comps:
                for ins in comp.instructions:
                    if ins.opcode == "fusion" and ins.attrs["calls"][0] in new_comps[id(comp)]:
                        root = ins.attrs["calls"][0].root
                        ins.attrs["kind"] = Word("kInput" if root.opcode == "reduce"
                                                 else "kLoop")
        return bool(new_comps)


def _starts(ins: Instruction, min_elements: int, skip: frozenset) -> tuple[int, int] | None:
    """(M, K) of a reduce that may start a group: a row reduction of a float type with a
    common reducer (add, maximum, minimum, multiply), of at least min_elements elements."""
    mk = row_reduce_dims(ins)
    if mk is None or mk[0] * mk[1] < min_elements or "reduce" in skip:
        return None
    if ins.shape.element_type not in _FLOATS or \
            reducer_op(ins.attrs["to_apply"]) not in _REDUCERS:
        return None
    return mk


def _eligible(ins: Instruction, skip: frozenset) -> bool:
    return not (ins.opcode in skip or ins.control_predecessors or ins.has_side_effect
                or ins.opcode == "parameter")


def _groups(comp: Computation, min_elements: int, skip: frozenset) -> list[list[Instruction]]:
    """Disjoint groups (topological order, root last) to outline, one per (M, K) seen in
    the computation's row reductions, roots from the last instruction back."""
    sizes = []
    for ins in comp.instructions:
        mk = _starts(ins, min_elements, skip) if ins.opcode == "reduce" else None
        if mk is not None and mk not in sizes:
            sizes.append(mk)
    if not sizes:
        return []
    users = _users(comp)
    order = {id(i): k for k, i in enumerate(comp.instructions)}
    taken: set[int] = set()
    groups = []
    for m, k in sizes:
        dead: set[int] = set()  # in a closure that held no reduce: no root above them will
        levels: dict[int, str | None] = {}  # shared by the roots: each level worked out once
        for root in reversed(comp.instructions):
            if id(root) in taken or id(root) in dead or cheap(root) or \
                    not _eligible(root, skip):
                continue
            group = _grow(root, comp, m, k, users, taken, skip, min_elements, levels)
            if group is None:
                continue
            if not any(i.opcode == "reduce" for i in group):
                dead.update(id(i) for i in group)
                continue
            if not _worth_it(group, m * k):
                continue
            taken |= {id(i) for i in group if not cheap(i)}
            groups.append(sorted(group, key=lambda i: order[id(i)]))
    return groups


def _worth_it(group: list[Instruction], n: int) -> bool:
    """row_contents.worth_a_row_loop, an op over all M*K = n elements being a full-row op
    (a lone reduce with only row-sized consumers runs as fast through numpy's reduce)."""
    full_ops = any(i.opcode in LOOP_OPS and i.shape.is_array and i.shape.num_elements() == n
                   for i in group)
    return worth_a_row_loop([i for i in group if i.opcode == "reduce"], full_ops)


def _grow(root, comp, m, k, users, taken, skip, min_elements,
          levels: dict) -> list[Instruction] | None:
    """The group under `root` at (M, K): the eligible producers whose users are all in it
    (to a fixpoint: dropping one may strand another), with levels row_contents accepts
    (`levels`: each instruction's as if its operands were in the group; a value taken by
    an earlier group is an input, which the final check sees)."""
    members: dict[int, Instruction] = {}

    def lv(ins):  # the level of ins inside the group, operands first (iterative)
        stack = [ins]
        while stack:
            v = stack[-1]
            if id(v) in levels:
                stack.pop()
                continue
            if not _eligible(v, skip) or (
                    v.opcode == "reduce" and _starts(v, min_elements, skip) != (m, k)):
                levels[id(v)] = None
                stack.pop()
                continue
            pending = [o for o in v.operands if id(o) not in levels]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            ops = {id(o): levels[id(o)] if levels[id(o)] is not None else
                   value_level(o, m, k) for o in v.operands}
            levels[id(v)] = level(v, m, k, ops, is_input=lambda s: levels.get(id(s)) is None)
        return levels[id(ins)]

    if lv(root) is None:
        return None
    # Upward closure of members (an input's broadcast keeps the input outside).
    stack = [root]
    while stack:
        v = stack.pop()
        if id(v) in members or id(v) in taken or lv(v) is None:
            continue
        members[id(v)] = v
        stack.extend(v.operands)
    def free(v):  # copied into the group, the original staying for outside readers
        return v.opcode == "constant" or (v.opcode == "broadcast" and (
            id(v.operands[0]) not in members or v.operands[0].opcode == "constant"))

    while True:  # drop producers read from outside the group, until none is
        # (a broadcast of a computed member is no copy: it would keep that member -- a
        # reduce, say -- alive outside as well, computed twice)
        drop = [v for v in members.values() if v is not root and not free(v) and
                (v is comp.root or any(id(u) not in members for u in users.get(id(v), [])))]
        if not drop:
            break
        for v in drop:
            del members[id(v)]
        reach, stack = {}, [root]  # what is still reached from the root through members
        while stack:
            v = stack.pop()
            if id(v) in members and id(v) not in reach:
                reach[id(v)] = v
                stack.extend(v.operands)
        members = reach
    # A member read from outside the group is now an input: re-check levels that
    # depended on it being computed inside (a broadcast of a computed row value).
    inside = set(members)
    for v in members.values():
        ops = {id(o): (levels[id(o)] if id(o) in inside else value_level(o, m, k))
               for o in v.operands}
        if level(v, m, k, ops, is_input=lambda s: id(s) not in inside) is None:
            return None
    return list(members.values())
