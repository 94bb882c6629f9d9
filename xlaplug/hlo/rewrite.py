"""Small IR-editing helpers shared by passes: replace uses, clone, unique names."""
from __future__ import annotations

import copy
import itertools

from .ir import Computation, Instruction, Module


def replace_all_uses(comp: Computation, old: Instruction, new: Instruction) -> None:
    for ins in comp.instructions:
        if ins is new:
            continue
        if any(o is old for o in ins.operands):
            ins.operands = [new if o is old else o for o in ins.operands]
        if any(p is old for p in ins.control_predecessors):
            ins.control_predecessors = [new if p is old else p for p in ins.control_predecessors]
    if comp.root is old:
        comp.root = new


def clone_instruction(ins: Instruction, operands: list[Instruction], name: str) -> Instruction:
    return Instruction(name, ins.opcode, ins.shape, list(operands), dict(ins.attrs),
                       copy.copy(ins.literal), ins.parameter_number, [], ins.line, ins.column,
                       ins.literal_elided)


class NameUniquer:
    """Hands out names unused anywhere in a module (`add.7` -> `add.7.1`, ...)."""

    def __init__(self, module: Module):
        self.used = {i.name for c in module.computations for i in c.instructions}

    def __call__(self, base: str) -> str:
        if base not in self.used:
            self.used.add(base)
            return base
        for n in itertools.count(1):
            cand = f"{base}.{n}"
            if cand not in self.used:
                self.used.add(cand)
                return cand
        raise AssertionError("unreachable")


def reachable_computations(module: Module) -> list[Computation]:
    """Computations reachable from the entry, callees first (XLA's print order)."""
    order: list[Computation] = []
    seen: set[int] = set()

    def visit(c: Computation) -> None:
        if id(c) in seen:
            return
        seen.add(id(c))
        for ins in c.instructions:
            for callee in ins.called_computations():
                visit(callee)
        order.append(c)

    visit(module.entry)
    return order
