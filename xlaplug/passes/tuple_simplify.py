"""Tuple simplification (XLA's TupleSimplifier):

  get-tuple-element(tuple(a0, ..., an), i)            -> ai
  tuple(gte(t, 0), gte(t, 1), ..., gte(t, n-1))       -> t   when t has exactly n elements
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..hlo.ir import Computation, Module
from ..hlo.rewrite import replace_all_uses
from .context import PassContext


def _simplify(comp: Computation) -> bool:
    changed = False
    for ins in list(comp.instructions):
        if ins.opcode == "get-tuple-element" and ins.operands[0].opcode == "tuple":
            src = ins.operands[0].operands[ins.attrs["index"]]
            if src.shape.compatible(ins.shape):
                replace_all_uses(comp, ins, src)
                changed = True
        elif ins.opcode == "tuple" and ins.operands:
            ops = ins.operands
            first = ops[0]
            if first.opcode != "get-tuple-element":
                continue
            t = first.operands[0]
            if (len(t.shape.tuple_shapes) == len(ops)
                    and all(o.opcode == "get-tuple-element" and o.operands[0] is t
                            and o.attrs["index"] == k for k, o in enumerate(ops))
                    and t.shape.compatible(ins.shape)):
                replace_all_uses(comp, ins, t)
                changed = True
    return changed


@dataclass
class TupleSimplification:
    name: ClassVar[str] = "tuple-simplify"

    def run(self, module: Module, ctx: PassContext) -> bool:
        changed = False
        for comp in module.computations:
            changed |= _simplify(comp)
        return changed
