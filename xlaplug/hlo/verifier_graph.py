"""Graph checks of the verifier: cycles among instructions and in the call graph, and uses
before definition.

Our parser resolves names once a computation is read, so it accepts an operand defined on a
later line, and with it a cycle (`s1 = select(p, a, s2)`, `s2 = select(p, b, s1)`).  XLA's
parser does not: it looks each operand (and control predecessor) up among the instructions
already parsed ("instruction does not exist"), so its computations are in definition order
and acyclic; and its verifier rejects a cycle in the call graph (a computation calling
itself directly, through the entry, or mutually, through any called-computation attribute:
to_apply, calls, body, condition, branch_computations, ...).  Here all three are verifier
errors at an instruction involved, so no pass or kernel ever sees them.  `definition_order`
(operands first, text order otherwise) is what passes walk, so that a module built or
edited through the API without verifying still rewrites correctly.

Every walk is iterative: a 10^5-deep chain of calls or operands must not exhaust Python's
stack.
"""
from __future__ import annotations

from typing import Callable, Iterable, TypeVar

from .errors import HloVerifyError
from .ir import Computation, Instruction, Module

T = TypeVar("T")


def find_cycle(nodes: Iterable[T], edges: Callable[[T], Iterable[T]]) -> list[T] | None:
    """One cycle [a, b, ..., z] (a -> b -> ... -> z -> a) of the graph, or None."""
    state: dict[int, int] = {}  # 1: on the current path, 2: finished
    for start in nodes:
        if id(start) in state:
            continue
        path = [start]
        on_path = {id(start): 0}
        iters = [iter(edges(start))]
        state[id(start)] = 1
        while path:
            for nxt in iters[-1]:
                s = state.get(id(nxt))
                if s == 1:
                    return path[on_path[id(nxt)]:]
                if s is None:
                    state[id(nxt)] = 1
                    on_path[id(nxt)] = len(path)
                    path.append(nxt)
                    iters.append(iter(edges(nxt)))
                    break
            else:
                done = path.pop()
                iters.pop()
                del on_path[id(done)]
                state[id(done)] = 2
    return None


def _rotate_to_first(cycle: list, position: dict[int, int]) -> list:
    """The cycle started at its member that comes first in text order (a stable report)."""
    k = min(range(len(cycle)), key=lambda i: position[id(cycle[i])])
    return cycle[k:] + cycle[:k]


def instruction_cycle_problem(module: Module, comp: Computation) -> HloVerifyError | None:
    """An error at an instruction of `comp` that (through operands or control predecessors)
    depends on itself, or None."""
    members = {id(i): k for k, i in enumerate(comp.instructions)}

    def deps(ins: Instruction):
        return [d for d in ins.operands + ins.control_predecessors if id(d) in members]

    cycle = find_cycle(comp.instructions, deps)
    if cycle is None:
        return None
    cycle = _rotate_to_first(cycle, members)
    first = cycle[0]
    chain = " -> ".join(f"'{i.name}'" for i in cycle + [first])
    return HloVerifyError(f"instruction '{first.name}' ({first.opcode}) depends on itself: "
                          f"{chain} (each uses the next as an operand or control predecessor)",
                          file=module.source, line=first.line, column=first.column)


def in_definition_order(comp: Computation) -> bool:
    """Whether every instruction of `comp` uses only instructions defined before it (what
    XLA's parser guarantees): then there is no cycle and no use before definition, and the
    cycle search is skipped."""
    position = {id(i): k for k, i in enumerate(comp.instructions)}
    get = position.get
    for k, ins in enumerate(comp.instructions):
        for dep in ins.operands:
            if get(id(dep), -1) >= k:
                return False
        for dep in ins.control_predecessors:
            if get(id(dep), -1) >= k:
                return False
    return True


def use_before_definition_problem(module: Module, comp: Computation
                                  ) -> HloVerifyError | None:
    """An error at the first instruction of `comp` that uses an operand or control
    predecessor defined after it, or None."""
    position = {id(i): k for k, i in enumerate(comp.instructions)}
    for k, ins in enumerate(comp.instructions):
        for dep in ins.operands + ins.control_predecessors:
            if position.get(id(dep), -1) > k:
                what = "operand" if any(o is dep for o in ins.operands) else \
                    "control predecessor"
                return HloVerifyError(
                    f"instruction '{ins.name}' ({ins.opcode}) uses {what} '{dep.name}', which "
                    f"is defined after it (line {dep.line}): an instruction must come after "
                    f"everything it uses, as XLA's parser requires",
                    file=module.source, line=ins.line, column=ins.column)
    return None


def call_graph_cycle_problem(module: Module) -> HloVerifyError | None:
    """An error at the calling instruction of a cycle in the call graph, or None."""
    comps = list(module.computations)
    known = {id(c) for c in comps}
    position = {id(c): k for k, c in enumerate(comps)}

    def callees(c: Computation):
        return [k for ins in c.instructions for k in ins.called_computations()
                if id(k) in known]

    cycle = find_cycle(comps, callees)
    if cycle is None:
        return None
    cycle = _rotate_to_first(cycle, position)
    caller, callee = cycle[0], cycle[1 % len(cycle)]
    site = next(ins for ins in caller.instructions if any(k is callee for k in
                                                          ins.called_computations()))
    chain = " -> ".join(f"'{c.name}'" for c in cycle + [caller])
    what = ("calls itself" if len(cycle) == 1 else f"calls itself through {chain}")
    return HloVerifyError(f"computation '{caller.name}' {what}: instruction '{site.name}' "
                          f"({site.opcode}) calls '{callee.name}', and the call graph must be "
                          f"acyclic", file=module.source, line=site.line, column=site.column)


def definition_order(comp: Computation) -> list[Instruction]:
    """`comp`'s instructions with operands and control predecessors before their users,
    otherwise in text order.  Raises HloVerifyError on a cycle."""
    members = {id(i) for i in comp.instructions}
    order: list[Instruction] = []
    state: dict[int, int] = {}
    for start in comp.instructions:
        if id(start) in state:
            continue
        stack = [(start, False)]
        while stack:
            ins, done = stack.pop()
            if done:
                state[id(ins)] = 2
                order.append(ins)
                continue
            if id(ins) in state:
                continue
            state[id(ins)] = 1
            stack.append((ins, True))
            for dep in reversed(ins.operands + ins.control_predecessors):
                s = state.get(id(dep))
                if s == 1:
                    raise HloVerifyError(f"instruction '{dep.name}' ({dep.opcode}) depends on "
                                         f"itself", line=dep.line, column=dep.column)
                if s is None and id(dep) in members:
                    stack.append((dep, False))
    return order
