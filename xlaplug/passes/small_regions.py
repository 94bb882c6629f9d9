"""Small regions: runs of entry-computation instructions on small arrays -> one `fusion` each.

    b = f32[32,128] broadcast(b1)               r = (f32[32,128], f32[32,128]) fusion(d,
    c = f32[32,128] add(d, b)           ->          b1), kind=kCustom, calls=small_region,
    e = f32[32,128] maximum(c, z)                   backend_config={"fusion_config":
    ...                                             {"kind":"__xlaplug_small_region"}}
                                                c = f32[32,128] get-tuple-element(r), index=0

A step of a small model is ~100 instructions of a few thousand elements each; interpreted,
each is a Python kernel call of 5-10 us, far more than its arithmetic.  The CPU kernel of
such a fusion (backends/cpu/region_code.py) compiles the region into one numba function
(loop_codegen.ArrayCodegen, the code of compiled while loops) run with preallocated buffers.

An instruction is a member when it is not a parameter, a constant (constants are read as
the region's parameters: the code does not depend on their values), a get-tuple-element
or side-effecting, has no control edges, its result and every operand are arrays of at
most `max_elements` elements, no loaded plugin overrides its opcode, and ArrayCodegen can
emit it (region_code.expressible) with the interpreter's bits: no dot, unless `sums`;
reduces folded as the unfused kernel folds them (cpu/region_sums.py: numpy's order over
any dimensions); gathers and scatters (set / add: cpu/region_gather.py).  Regions grow in
the computation's order: a member joins the open region unless it reads (through
non-members) a value the region computed -- then the region could not be one call -- or
the region holds `max_instructions` already
(numba's compile time grows with the function); a side-effecting instruction closes it.
Non-members between a region's members that read none of its values move before its
fusion, those that do after it.  Regions of fewer than `min_instructions` members stay as
they are.  The pass runs on the CPU only, last in the default pipeline (after loop-fusion
and dot-epilogue, whose fusions join a region whole); `compile --decompose-all` runs the
portable pipeline, without it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..backends.common.fusion_contents import DEFAULT_MIN_ELEMENTS
from ..hlo.attr_types import Word
from ..hlo.ir import Computation, Instruction, Module, Shape
from ..hlo.rewrite import NameUniquer, clone_instruction
from .context import PassContext


@dataclass
class SmallRegions:
    name: ClassVar[str] = "small-regions"
    # Largest array (result or operand) a member may have, in elements: below loop fusion's
    # threshold, so that the arrays of a small CNN (f32[8,16,16,16]: 32,768) join too --
    # one instruction at a time they cost it 3.5-5 ms a step, in regions 3.0 (CPU clock,
    # load 6-7; 8,192 before).
    max_elements: int = DEFAULT_MIN_ELEMENTS - 1
    # Most members in one region (one numba function).
    max_instructions: int = 200
    # Fewer members than this: left interpreted.
    min_instructions: int = 3
    # Dots join too, and every reduce is folded in row order (loop_sums.py: a dot in vector
    # lanes or by numba's BLAS): faster, but not the interpreter's bits (numpy's BLAS under
    # FTZ, numpy's pairwise sums): off by default.
    sums: bool = False
    enabled: bool = True

    def run(self, module: Module, ctx: PassContext) -> bool:
        from ..backends.backend import backend_for, is_backend
        if not self.enabled or module.entry is None or not (
                is_backend(ctx.device) and backend_for(ctx.device).small_regions):
            return False
        from ..backends.cpu.region_code import expressible, region_config
        skip = ctx.registry.overridden_opcodes()
        comp = module.entry
        controlled = {id(i) for i in comp.instructions if i.control_predecessors} | {
            id(p) for i in comp.instructions for p in i.control_predecessors}

        def member(ins: Instruction) -> bool:
            return (ins.opcode not in ("parameter", "constant", "get-tuple-element", "tuple")
                    and ins.opcode not in skip and id(ins) not in controlled
                    and not ins.has_side_effect and ins.shape.is_array
                    and _small(ins, self.max_elements) and expressible(ins, self.sums))

        # A broadcast of a scalar constant that only members read is made again by each
        # region that reads it (its value in the code), not computed by one region and
        # handed to the next through memory: the attention's scale, f32[4,2,32,32] of one
        # value, was a region's output written and read back across a dot.
        users = comp.users()
        free = {id(i) for i in comp.instructions
                if i.opcode == "broadcast" and i.operands[0].opcode == "constant"
                and i.operands[0].shape.rank == 0 and i is not comp.root and member(i)
                and users[i] and all(member(u) for u in users[i])}
        regions = _regions(comp, lambda i: id(i) not in free and member(i),
                           self.max_instructions, self.min_instructions, free)
        if not regions:
            return False
        uniq, names = NameUniquer(module), NameUniquer.of_computations(module)
        bodies = _outline(comp, regions, uniq, names, region_config(self.sums), free)
        at = module.computations.index(comp)
        module.computations[at:at] = bodies
        return True


def _small(ins: Instruction, limit: int) -> bool:
    return all(x.shape.is_array and x.shape.is_static and x.shape.num_elements() <= limit
               for x in (ins, *ins.operands))


def _regions(comp: Computation, member, cap: int, least: int,
             free: set[int] = frozenset()) -> list[tuple[list, set]]:
    """[(members in order, ids of the non-members in its span that read its values)].
    The `free` broadcasts a region's members read are copied into it: they count towards
    the cap (the function's size), not towards `least`."""
    out: list[tuple[list, set]] = []
    cur: list[Instruction] = []
    inside: set[int] = set()
    tainted: set[int] = set()
    pulled: set[int] = set()

    def close():
        nonlocal cur, inside, tainted, pulled
        if len(cur) >= least:
            out.append((cur, tainted))
        cur, inside, tainted, pulled = [], set(), set(), set()

    for ins in comp.instructions:
        if member(ins):
            new = {id(o) for o in ins.operands if id(o) in free} - pulled
            if any(id(o) in tainted for o in ins.operands) or \
                    len(cur) + len(pulled) + len(new) >= cap:
                close()
                new = {id(o) for o in ins.operands if id(o) in free}
            cur.append(ins)
            inside.add(id(ins))
            pulled |= new
        elif ins.has_side_effect:
            close()
        elif any(id(o) in inside or id(o) in tainted for o in ins.operands):
            tainted.add(id(ins))
    close()
    return out


def _outline(comp: Computation, regions, uniq: NameUniquer, names: NameUniquer,
             config, free: set[int]) -> list[Computation]:
    """Each region replaced by its fusion (and get-tuple-elements); returns the bodies.
    `free`: broadcasts of a scalar constant copied into each region that reads them."""
    users = comp.users()
    replace: dict[int, Instruction] = {}    # id(member read outside) -> its value outside
    placed: dict[int, list[Instruction]] = {}  # id(last member) -> the new order there
    dropped: set[int] = set()
    copied: set[int] = set()  # scalar constants (and `free` broadcasts) copied into a region
    bodies = []
    order = {id(i): k for k, i in enumerate(comp.instructions)}
    for members, tainted in regions:
        inside = {id(m) for m in members}
        outside: list[Instruction] = []
        params: dict[int, Instruction] = {}
        copies: list[Instruction] = []
        for m in members:
            for o in m.operands:
                if o.opcode == "constant" and o.shape.rank == 0 and id(o) not in params:
                    # A scalar constant (a reduce's init): copied in, its value in the code.
                    params[id(o)] = clone_instruction(o, [], uniq(o.name))
                    copies.append(params[id(o)])
                    copied.add(id(o))
                elif id(o) in free and id(o) not in params:
                    c = o.operands[0]
                    if id(c) not in params:
                        params[id(c)] = clone_instruction(c, [], uniq(c.name))
                        copies.append(params[id(c)])
                        copied.add(id(c))
                    params[id(o)] = clone_instruction(o, [params[id(c)]], uniq(o.name))
                    copies.append(params[id(o)])
                    copied.add(id(o))
                elif id(o) not in inside and id(o) not in params:
                    params[id(o)] = Instruction(uniq(f"param_{len(outside)}"), "parameter",
                                                o.shape, parameter_number=len(outside))
                    outside.append(o)
        outs = [m for m in members if m is comp.root
                or any(id(u) not in inside for u in users[m])]
        for m in members:
            m.operands = [params.get(id(o), o) for o in m.operands]
        body = [p for p in params.values() if p.opcode == "parameter"] + copies + members
        if len(outs) == 1:
            root, shape = outs[0], outs[0].shape
        else:
            shape = Shape.tuple_of(o.shape for o in outs)
            root = Instruction(uniq("tuple"), "tuple", shape, list(outs))
            body.append(root)
        bodies.append(Computation(names("small_region"), body, root))
        fusion = Instruction(uniq("small_region"), "fusion", shape,
                             [replace.get(id(o), o) for o in outside],
                             {"kind": Word("kCustom"), "calls": [bodies[-1]],
                              "backend_config": config},
                             line=members[0].line, column=members[0].column)
        new = [fusion]
        if len(outs) == 1:
            replace[id(outs[0])] = fusion
        else:
            for k, o in enumerate(outs):
                g = Instruction(uniq("get-tuple-element"), "get-tuple-element", o.shape,
                                [fusion], {"index": k})
                replace[id(o)] = g
                new.append(g)
        lo, hi = order[id(members[0])], order[id(members[-1])]
        span = [i for i in comp.instructions[lo:hi + 1] if id(i) not in inside]
        placed[id(members[-1])] = [i for i in span if id(i) not in tainted] + new + \
            [i for i in span if id(i) in tainted]
        dropped |= inside | {id(i) for i in span}
    result = []
    for ins in comp.instructions:
        if id(ins) in placed:
            result.extend(placed[id(ins)])
        elif id(ins) not in dropped:
            result.append(ins)
    for ins in result:  # (a fusion's operands are outside values: none replaced)
        if any(id(o) in replace for o in ins.operands):
            ins.operands = [replace.get(id(o), o) for o in ins.operands]
    comp.root = replace.get(id(comp.root), comp.root)
    # What was copied into regions and is read by nothing else leaves the entry (a thunk
    # fewer a run); a free broadcast first, then its constant.
    for _ in range(2):
        read = {id(o) for ins in result for o in (*ins.operands, *ins.control_predecessors)}
        read.add(id(comp.root))
        result = [i for i in result if id(i) not in copied or id(i) in read]
    comp.instructions = result
    return bodies
