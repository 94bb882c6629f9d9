"""Call inlining: `call(args), to_apply=f` -> f's body, cloned into the caller.

Composite calls (`is_composite=true`) are left alone: the custom-call lowering pass decides
whether a plugin kernel replaces them or their body is used.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..hlo.ir import Computation, Instruction, Module
from ..hlo.rewrite import NameUniquer, clone_instruction, replace_all_uses
from .context import PassContext


def _inline_one(comp: Computation, call: Instruction, uniq: NameUniquer) -> None:
    callee: Computation = call.attrs["to_apply"]
    mapping: dict[int, Instruction] = {}
    for p in callee.parameters:
        mapping[id(p)] = call.operands[p.parameter_number]
    new_instrs: list[Instruction] = []
    for ins in callee.instructions:
        if ins.opcode == "parameter":
            continue
        clone = clone_instruction(ins, [mapping[id(o)] for o in ins.operands], uniq(ins.name))
        clone.control_predecessors = [mapping[id(p)] for p in ins.control_predecessors]
        mapping[id(ins)] = clone
        new_instrs.append(clone)
    pos = comp.instructions.index(call)
    comp.instructions[pos:pos] = new_instrs
    replace_all_uses(comp, call, mapping[id(callee.root)])
    # The call's own control edges carry over to the inlined body's first instructions.
    for ins in new_instrs:
        ins.control_predecessors = ins.control_predecessors or list(call.control_predecessors)
    comp.instructions.remove(call)


@dataclass
class CallInlining:
    name: ClassVar[str] = "inline-calls"

    def run(self, module: Module, ctx: PassContext) -> bool:
        uniq = NameUniquer(module)
        changed = False
        for comp in module.computations:
            # Repeat until no call is left: an inlined body may itself contain calls.
            while True:
                calls = [i for i in comp.instructions
                         if i.opcode == "call" and not i.attrs.get("is_composite")]
                if not calls:
                    break
                for c in calls:
                    _inline_one(comp, c, uniq)
                changed = True
        return changed
