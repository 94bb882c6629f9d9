"""Dead-code elimination: drop instructions nothing live needs, and unreachable computations.

Live roots are each computation's ROOT, its parameters (they fix the signature) and every
side-effecting instruction -- e.g. a `custom_call_has_side_effect=true` check that stands
after ROOT and that nothing uses.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..hlo.ir import Computation, Module
from ..hlo.rewrite import reachable_computations
from .context import PassContext


def _dce_computation(comp: Computation) -> bool:
    live: set[int] = set()
    stack = [comp.root] + [i for i in comp.instructions
                           if i.opcode == "parameter" or i.has_side_effect]
    while stack:
        ins = stack.pop()
        if id(ins) in live:
            continue
        live.add(id(ins))
        stack.extend(ins.operands)
        stack.extend(ins.control_predecessors)
    kept = [i for i in comp.instructions if id(i) in live]
    changed = len(kept) != len(comp.instructions)
    comp.instructions = kept
    return changed


@dataclass
class DeadCodeElimination:
    name: ClassVar[str] = "dce"
    remove_dead_computations: bool = True

    def run(self, module: Module, ctx: PassContext) -> bool:
        changed = False
        for comp in module.computations:
            changed |= _dce_computation(comp)
        if self.remove_dead_computations:
            reachable = reachable_computations(module)
            keep = {id(c) for c in reachable}
            if len(keep) != len(module.computations):
                module.computations = [c for c in module.computations if id(c) in keep]
                changed = True
        return changed
