"""Loop fusion: chains of elementwise instructions on large arrays -> one `fusion` (kLoop).

    a = f32[2048,2048] multiply(x, y)        fusion.1 = f32[2048,2048] fusion(x, y, c),
    b = f32[2048,2048] broadcast(c)     ->       kind=kLoop, calls=fused_computation.1
    r = f32[2048,2048] add(a, b)

The interpreter runs one kernel per instruction, each a full pass over memory; a loop
fusion's kernel (backends/cpu/fused_loop.py) evaluates the whole chain per element in one
compiled loop, from the same scalar templates the per-op kernels follow (plus the FMA
contraction XLA applies inside its fusions).  XLA's own optimized HLO arrives with kLoop
fusions; those run the same way.

What fuses is the backend's to say (backends/common/fusion_contents.py; `loop_shape`
decides whether a computation is such a loop):
  * elementwise ops (opcodes.ELEMENTWISE that scalar code expresses), `convert` included;
  * rank-0 `constant`s and `broadcast`s -- duplicated into every fusion that uses them, being
    free to recompute; a broadcast of an array (a bias, a row statistic) keeps its operand
    outside as a parameter, which the loop reads at the mapped index (`param_index_map`);
  * `reshape` and `copy` (row-major order and logical values are unchanged).
A producer joins its consumer's fusion when every user of it is in that fusion (nothing
is computed twice; but a multiply read by an add of the fusion and by a dot or reduce is
copied in, as XLA recomputes it there, for the FMA), it is not the computation's root, and
no loaded plugin overrides its opcode (the plugin's kernel must still run).  Only results of at least `min_elements`
elements start a fusion: below that, the one-time compile of a fused loop costs more than
it saves -- except a chain holding a multiply-add XLA:CPU contracts into an FMA
(fusion_split.contracts), fused at any size from 2 elements so its rounding is XLA's.
A fusion needs two pieces of work (elementwise ops or array broadcasts), or one op that reads
a scalar broadcast to its whole shape (a relu's maximum with zeros: fused, no n-element
array of zeros is written and read back).  Inside each
fusion body, a cheap value that XLA:CPU would recompute in several of its own (smaller)
fusions gets a copy per such fusion (backends/common/fusion_split.py), so that a multiply
is contracted into an FMA exactly where XLA's kernels contract it; the check above for
small chains looks at XLA's fusions the same way.
A group of more than `max_instructions` is cut into pieces of about that many, one fusion
each (passes/fusion_pieces.py): numba's compile of one giant loop grows faster than the
loop, and a cut never falls between a multiply and the add it contracts with.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..backends.common import fusion_split
from ..backends.common.fusion_contents import (DEFAULT_MIN_ELEMENTS, LOOP_OPS,  # noqa: F401
                                               SHAPE_OPS as _SHAPE_OPS, cheap as _cheap,
                                               edge_broadcast as _edge_broadcast,
                                               loop_shape, member as _member,
                                               n_elements as _n, param_index_map)
from ..hlo.attr_types import Word
from ..hlo.ir import Computation, Instruction, Module
from ..hlo.rewrite import NameUniquer, clone_instruction
from .context import PassContext
from .fusion_pieces import DEFAULT_MAX_INSTRUCTIONS, pieces

@dataclass
class LoopFusion:
    name: ClassVar[str] = "loop-fusion"
    min_elements: int = DEFAULT_MIN_ELEMENTS
    # A group of more instructions is cut into pieces of about this many (fusion_pieces.py).
    max_instructions: int = DEFAULT_MAX_INSTRUCTIONS

    def run(self, module: Module, ctx: PassContext) -> bool:
        skip = _overridden_opcodes(ctx.registry)
        return bool(outline_groups(module, lambda c: _groups(c, self.min_elements, skip,
                                                             self.max_instructions)))


def outline_groups(module: Module, groups_of) -> dict[int, list[Computation]]:
    """Every `groups_of(computation)` (lists of instructions, producers first) outlined into
    fusions, in each computation that is not already a fusion's body; each computation's new
    bodies go just before it, in one pass.  Returns {id(computation): its new bodies}."""
    uniq = NameUniquer(module)
    comp_names = NameUniquer.of_computations(module)
    bodies = {id(c) for comp in module.computations for i in comp.instructions
              if i.opcode == "fusion" for c in i.attrs.get("calls", [])}
    new_comps: dict[int, list[Computation]] = {}
    for comp in list(module.computations):
        if id(comp) in bodies:  # already a fusion's body
            continue
        groups = groups_of(comp)
        if groups:
            new_comps[id(comp)] = _outline_all(comp, groups, uniq, comp_names)
    if new_comps:
        module.computations = [c for comp in module.computations
                               for c in new_comps.get(id(comp), []) + [comp]]
    return new_comps


def _overridden_opcodes(registry) -> frozenset:
    """Core opcodes a plugin of the session replaces on some device: they keep their own
    thunk."""
    return registry.overridden_opcodes() & (LOOP_OPS | _SHAPE_OPS)


def _users(comp: Computation) -> dict[int, list[Instruction]]:
    users: dict[int, list[Instruction]] = {id(i): [] for i in comp.instructions}
    for ins in comp.instructions:
        for o in ins.operands:
            users.setdefault(id(o), []).append(ins)
    return users


def _groups(comp: Computation, min_elements: int, skip: frozenset,
            max_instructions: int = DEFAULT_MAX_INSTRUCTIONS) -> list[list[Instruction]]:
    """Disjoint groups of instructions (consumer last) to outline, largest roots first."""
    users = _users(comp)
    taken: set[int] = set()
    dead: set[int] = set()  # members of a rejected group without a multiply: see below
    groups = []
    order = {id(i): k for k, i in enumerate(comp.instructions)}
    for root in reversed(comp.instructions):
        if id(root) in taken or id(root) in dead:
            continue
        n = _n(root.shape)
        if root.opcode not in LOOP_OPS or root.opcode in skip \
                or n < 2 or not _member(root, n):
            continue
        small = n < min_elements  # fused only if it holds an FMA (see the module docstring)
        group, members, copies = [root], {id(root)}, set()
        work = list(root.operands)
        while work:
            p = work.pop()
            if id(p) in copies and all(id(u) in members for u in users.get(id(p), [])):
                copies.discard(id(p))  # every reader joined after all: a member like any
                work.extend(p.operands)
                continue
            if id(p) in members or id(p) in taken or p.opcode in skip or not _member(p, n):
                continue
            if p is comp.root or p.control_predecessors or p.has_side_effect:
                continue
            if _n(p.shape) == 1 and n > 1 and not _cheap(p):
                continue  # a one-element op stays outside: computed once, passed in
            copy = not _cheap(p) and not all(id(u) in members for u in users.get(id(p), []))
            if copy and not _recomputed(p, n, members, users):
                continue
            if copy:
                copies.add(id(p))
            group.append(p)
            members.add(id(p))
            if not _edge_broadcast(p) and not copy:  # (their operands stay parameters)
                work.extend(p.operands)
        work_done = sum(1 for i in group if i.opcode in LOOP_OPS or _edge_broadcast(i))
        if work_done == 1 and not small and _fills(group, n):
            work_done = 2  # the loop saves writing (and reading) an n-element broadcast
        if work_done < 2 or (small and not _holds_multiply(group)):
            # Rejected, and with no multiply (no copies, no FMA): every member is in
            # because all its readers are, so the group of any member, as a root later,
            # is a subset of this one, as short of work and of FMAs -- rejected too.
            # Skipping them keeps a long chain of small adds linear, not quadratic.
            if not _holds_multiply(group):
                dead.update(id(i) for i in group)
            continue
        group.sort(key=lambda i: order[id(i)])
        if small and not fusion_split.contracts(group, root):
            continue
        # A copied multiply stays outside too, for its other readers (not taken).
        taken |= {id(i) for i in group if not _cheap(i) and (i is root or all(
            id(u) in members for u in users.get(id(i), [])))}
        groups.extend(pieces(group, users, max_instructions))
    return groups


def _fills(group: list[Instruction], n: int) -> bool:
    """Whether the group holds a broadcast of one element to all n (a relu's zeros): alone,
    its kernel writes the n elements out for the one op to read back."""
    return any(i.opcode == "broadcast" and not _edge_broadcast(i) and _n(i.shape) == n
               for i in group)


def _holds_multiply(group: list[Instruction]) -> bool:
    return any(i.opcode == "multiply" for i in group)


def _recomputed(p: Instruction, n: int, members: set[int], users) -> bool:
    """A multiply read here by an add or subtract and also by an instruction no loop takes
    (a dot, a reduce, ...): XLA:CPU recomputes it in the add's fusion when that costs no
    extra reads (cheap and effectively unary: fusion_split.recomputable) and contracts the
    copy into an FMA.  So a copy joins this fusion; the original stays for its other
    readers.  (Readers that loops take are fused with it, as XLA fuses them.)"""
    readers = users.get(id(p), [])
    return (p.opcode == "multiply" and p.shape.element_type in ("f32", "f64")
            and fusion_split.recomputable(p)
            and any(u.opcode in ("add", "subtract") and id(u) in members for u in readers)
            and any(u.opcode not in LOOP_OPS | _SHAPE_OPS or not _member(u, n)
                    for u in readers))


def _outline_all(comp: Computation, groups: list[list[Instruction]], uniq: NameUniquer,
                 comp_names: NameUniquer) -> list[Computation]:
    """Replace each group (topological order, root last) by a fusion calling a new
    computation; the new computations, in outline order.  One pass over the computation
    for all groups (not one per group: a computation with k fusions would cost k passes)."""
    fusions: dict[int, Instruction] = {}     # id(root) -> its fusion
    inside: set[int] = set()
    bodies = []
    for group in groups:
        fusion, fused = _outline(group, uniq, comp_names)
        fusions[id(group[-1])] = fusion
        inside.update(id(i) for i in group)
        bodies.append(fused)
    instructions = [fusions.get(id(i), i) for i in comp.instructions]
    for ins in instructions:  # readers of a root read its fusion (fusions included)
        if any(id(o) in fusions for o in ins.operands):
            ins.operands = [fusions.get(id(o), o) for o in ins.operands]
    comp.root = fusions.get(id(comp.root), comp.root)
    # Members are gone, unless a cheap one is still read by an instruction that stays (a
    # kept broadcast keeps its constant too: walk users before operands).
    kept: set[int] = set()
    for ins in reversed(instructions):
        if id(ins) not in inside or id(ins) in kept:
            kept.add(id(ins))
            kept.update(id(o) for o in ins.operands)
    comp.instructions = [i for i in instructions if id(i) in kept]
    return bodies


def _outline(group: list[Instruction], uniq: NameUniquer,
             comp_names: NameUniquer) -> tuple[Instruction, Computation]:
    """The fusion instruction for `group` (reading the outside values) and its body."""
    root = group[-1]
    inside = {id(i) for i in group}
    params: list[Instruction] = []   # outside values, in order of first use
    mapping: dict[int, Instruction] = {}
    body: list[Instruction] = []
    for ins in group:
        ops = []
        for o in ins.operands:
            if id(o) not in inside:
                if id(o) not in mapping:
                    p = Instruction(uniq(f"param_{len(params)}"), "parameter", o.shape,
                                    parameter_number=len(params))
                    mapping[id(o)] = p
                    params.append(o)
                    body.append(p)
            ops.append(mapping[id(o)])
        clone = clone_instruction(ins, ops, uniq(ins.name))
        mapping[id(ins)] = clone
        body.append(clone)
    fused = Computation(comp_names("fused_computation"), body, mapping[id(root)])
    fusion_split.split(fused, uniq)  # XLA's fusions within it: its FMA contractions
    fusion = Instruction(uniq("fusion"), "fusion", root.shape, list(params),
                         {"kind": Word("kLoop"), "calls": [fused]}, line=root.line,
                         column=root.column)
    return fusion, fused
