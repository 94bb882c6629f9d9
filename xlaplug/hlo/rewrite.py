"""Small IR-editing helpers shared by passes: replace uses, clone, unique names."""
from __future__ import annotations

import copy

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
    """Hands out names unused anywhere in a module (`add.7` -> `add.7.1`, `add.7.2`, ...).

    Each base remembers the last suffix it handed out, so n clones of one name cost O(n)
    probes in all, not O(n^2): every suffix below the counter is taken already (names are
    only ever added), so the first free one at or above it is the smallest free one."""

    def __init__(self, module: Module):
        self.used = {i.name for c in module.computations for i in c.instructions}
        self.next_suffix: dict[str, int] = {}

    @classmethod
    def of_computations(cls, module: Module) -> "NameUniquer":
        """The same, for computation names."""
        u = cls.__new__(cls)
        u.used = {c.name for c in module.computations}
        u.next_suffix = {}
        return u

    def __call__(self, base: str) -> str:
        if base not in self.used:
            self.used.add(base)
            return base
        n = self.next_suffix.get(base, 1)
        while f"{base}.{n}" in self.used:
            n += 1
        self.next_suffix[base] = n + 1
        cand = f"{base}.{n}"
        self.used.add(cand)
        return cand


def reachable_computations(module: Module) -> list[Computation]:
    """Computations reachable from the entry, callees first (XLA's print order).  Iterative:
    a call chain may be far deeper than Python's stack."""
    order: list[Computation] = []
    seen: set[int] = {id(module.entry)}
    stack = [(module.entry, iter(_callees(module.entry)))]
    while stack:
        comp, it = stack[-1]
        for callee in it:
            if id(callee) not in seen:
                seen.add(id(callee))
                stack.append((callee, iter(_callees(callee))))
                break
        else:
            stack.pop()
            order.append(comp)
    return order


def _callees(comp: Computation) -> list[Computation]:
    return [callee for ins in comp.instructions for callee in ins.called_computations()]
