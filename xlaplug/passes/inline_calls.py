"""Call inlining: `call(args), to_apply=f` -> f's body, cloned into the caller.

Composite calls (`is_composite=true`) are left alone: the custom-call lowering pass decides
whether a plugin kernel replaces them or their body is used.  So is the call of a jax
shard_map region's body (`xla.sdy.manual_computation_body...`), as XLA's ShardyCallInliner
leaves it: the sdy-shard-map pass, and XLA's partitioner, find the region by that call.

Linear in the size of the result: each computation that keeps existing (the entry and every
computation something other than an inlined call refers to: while bodies, reducers, ...) is
rebuilt in one sweep, a call's callee cloned straight from its original instructions,
nested calls expanded on an explicit stack (a call chain may be 10^5 deep).  A computation
reached only through inlined calls is then unreferenced and removed, as XLA's CallInliner
does (it runs DCE after inlining).  Before any work the expanded size is counted: a call
graph that reuses a callee at every level grows exponentially, and is refused with an error
instead of exhausting memory.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..hlo.errors import HloError
from ..hlo.ir import Computation, Instruction, Module
from ..hlo.opcodes import SHARD_MAP_BODY
from ..hlo.rewrite import NameUniquer, clone_instruction
from ..hlo.verifier_graph import definition_order
from .context import PassContext

# The most instructions inlining may leave in one computation (memory is ~1 KB each).
MAX_INLINED_INSTRUCTIONS = 2_000_000


def _inlinable(ins: Instruction) -> bool:
    return ins.opcode == "call" and not ins.attrs.get("is_composite") and \
        not ins.attrs["to_apply"].name.startswith(SHARD_MAP_BODY)


class _Frame:
    """One computation being copied: the target itself (kept instructions) or a callee
    being cloned for one call."""

    __slots__ = ("instrs", "pos", "mapping", "call", "callee", "inherit")

    def __init__(self, instrs, mapping, call=None, callee=None, inherit=()):
        self.instrs = instrs
        self.pos = 0
        self.mapping: dict[int, Instruction] = mapping
        self.call = call
        self.callee = callee
        # Control predecessors for clones that have none: the call's own (mapped), which
        # then come first in the inlined body, as they did before the call.
        self.inherit = list(inherit)


def _expanded_sizes(comps: list[Computation]) -> dict[int, int]:
    """Instructions each computation has once every call in it is inlined (callees first).
    The verifier rejects a cyclic call graph; a module that skipped it gets an error here
    rather than an endless expansion."""
    size: dict[int, int] = {}
    waiting: set[int] = set()  # computations whose callees are being sized
    pending = list(reversed(comps))
    while pending:
        c = pending[-1]
        if id(c) in size:
            pending.pop()
            continue
        missing = [i.attrs["to_apply"] for i in c.instructions
                   if _inlinable(i) and id(i.attrs["to_apply"]) not in size]
        if missing:
            # Everything above a waiting computation on the stack is reached from it, so
            # calling one back is a cycle.
            back = next((k for k in missing if id(k) in waiting), None)
            if back is not None:
                raise HloError(f"computation '{c.name}' calls '{back.name}', which calls it "
                               f"back: calls cannot be inlined in a cyclic call graph")
            waiting.add(id(c))
            pending.extend(missing)
            continue
        waiting.discard(id(c))
        pending.pop()
        n = 0
        for i in c.instructions:
            if _inlinable(i):
                callee = i.attrs["to_apply"]
                n += size[id(callee)] - len(callee.parameters)
            else:
                n += 1
        size[id(c)] = n
    return size


def _inline_into(target: Computation, uniq: NameUniquer, order_of) -> None:
    out: list[Instruction] = []
    top = _Frame(order_of(target), {})
    stack = [top]
    while stack:
        f = stack[-1]
        if f.pos == len(f.instrs):
            stack.pop()
            if f.call is not None:
                stack[-1].mapping[id(f.call)] = f.mapping[id(f.callee.root)]
            continue
        ins = f.instrs[f.pos]
        f.pos += 1
        m = f.mapping
        if _inlinable(ins):
            callee: Computation = ins.attrs["to_apply"]
            inner = {id(p): m.get(id(ins.operands[p.parameter_number]),
                                  ins.operands[p.parameter_number])
                     for p in callee.parameters}
            preds = [m.get(id(p), p) for p in ins.control_predecessors] or f.inherit
            stack.append(_Frame(order_of(callee), inner, ins, callee, preds))
            continue
        if f.call is None:  # the target's own instruction: kept, operands remapped
            if any(id(o) in m for o in ins.operands):
                ins.operands = [m.get(id(o), o) for o in ins.operands]
            if any(id(p) in m for p in ins.control_predecessors):
                ins.control_predecessors = [m.get(id(p), p) for p in ins.control_predecessors]
            out.append(ins)
            continue
        if ins.opcode == "parameter":
            continue
        clone = clone_instruction(ins, [m[id(o)] for o in ins.operands], uniq(ins.name))
        clone.control_predecessors = ([m[id(p)] for p in ins.control_predecessors]
                                      or list(f.inherit))
        m[id(ins)] = clone
        out.append(clone)
    target.instructions = out
    target.root = top.mapping.get(id(target.root), target.root)


@dataclass
class CallInlining:
    name: ClassVar[str] = "inline-calls"

    def run(self, module: Module, ctx: PassContext) -> bool:
        comps = list(module.computations)
        if not any(_inlinable(i) for c in comps for i in c.instructions):
            return False
        orders: dict[int, list[Instruction]] = {}

        def order_of(c: Computation) -> list[Instruction]:
            o = orders.get(id(c))
            if o is None:
                o = orders[id(c)] = definition_order(c)
            return o

        only_called = _only_called(module)
        targets = [c for c in comps if id(c) not in only_called]
        sizes = _expanded_sizes(comps)
        for c in targets:
            if sizes[id(c)] > MAX_INLINED_INSTRUCTIONS:
                raise HloError(f"inlining the calls in computation '{c.name}' would give it "
                               f"{sizes[id(c)]:,} instructions (at most "
                               f"{MAX_INLINED_INSTRUCTIONS:,}): its calls reach the same "
                               f"computations over and over", file=module.source,
                               line=c.line, column=c.column)
        uniq = NameUniquer(module)
        for c in targets:
            if any(_inlinable(i) for i in c.instructions):
                _inline_into(c, uniq, order_of)
        module.computations = targets
        return True


def _only_called(module: Module) -> set[int]:
    """Computations referred to only as the callee of inlinable calls (and not the entry):
    after inlining nothing refers to them."""
    by_call: set[int] = set()
    other: set[int] = {id(module.entry)}
    for c in module.computations:
        for ins in c.instructions:
            for k, v in ins.attrs.items():
                refs = v if isinstance(v, list) else [v]
                for r in refs:
                    if isinstance(r, Computation):
                        (by_call if k == "to_apply" and _inlinable(ins) else other).add(id(r))
    return by_call - other

