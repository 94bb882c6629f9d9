"""Tuple simplification (XLA's TupleSimplifier):

  get-tuple-element(tuple(a0, ..., an), i)            -> ai
  tuple(gte(t, 0), gte(t, 1), ..., gte(t, n-1))       -> t   when t has exactly n elements

One sweep in definition order: each instruction's operands are first rewritten through the
replacements made so far (so a chain gte(gte(tuple(tuple(...)))) folds in the same sweep),
then the instruction itself may be replaced.  Linear in the computation's size: uses are
rewritten as they are met, never by rescanning the computation per replacement.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..hlo.ir import Computation, Instruction, Module
from ..hlo.verifier_graph import definition_order
from .context import PassContext


def _replacement(ins: Instruction) -> Instruction | None:
    if ins.opcode == "get-tuple-element" and ins.operands[0].opcode == "tuple":
        src = ins.operands[0].operands[ins.attrs["index"]]
        return src if src.shape.compatible(ins.shape) else None
    if ins.opcode == "tuple" and ins.operands:
        ops = ins.operands
        first = ops[0]
        if first.opcode != "get-tuple-element":
            return None
        t = first.operands[0]
        if (len(t.shape.tuple_shapes) == len(ops)
                and all(o.opcode == "get-tuple-element" and o.operands[0] is t
                        and o.attrs["index"] == k for k, o in enumerate(ops))
                and t.shape.compatible(ins.shape)):
            return t
    return None


def _simplify(comp: Computation) -> bool:
    new: dict[int, Instruction] = {}
    for ins in definition_order(comp):
        if new:
            if any(id(o) in new for o in ins.operands):
                ins.operands = [new.get(id(o), o) for o in ins.operands]
            if any(id(p) in new for p in ins.control_predecessors):
                ins.control_predecessors = [new.get(id(p), p) for p in ins.control_predecessors]
        r = _replacement(ins)
        if r is not None:
            new[id(ins)] = r
    if comp.root is not None and id(comp.root) in new:
        comp.root = new[id(comp.root)]
    return bool(new)


@dataclass
class TupleSimplification:
    name: ClassVar[str] = "tuple-simplify"

    def run(self, module: Module, ctx: PassContext) -> bool:
        changed = False
        for comp in module.computations:
            changed |= _simplify(comp)
        return changed
