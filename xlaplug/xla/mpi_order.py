"""The order token of a rank's `xlaplug.mpi.*` calls, threaded through control flow
(mpi_rewrite.py chains the calls of one computation).

XLA:CPU orders thunks by their data only: a control predecessor orders its schedule, not
its runtime, which may start a while loop while a collective before it is still running.
So the token -- a u32[] each call takes last and returns last -- goes through every while,
conditional and call whose computations hold calls, as data:

    while      state S -> (S, u32[]): its init, body parameter and root, condition
               parameter (a condition's calls take the token, return none: the body runs
               after it)
    conditional  branch operand b -> (b, u32[]), every branch returns (its root, u32[])
    call       one more parameter, u32[]; the callee returns (its root, u32[])

and the caller's users get element 0 of its new value.  A computation holding calls that
something else calls (a reduce's reducer, a map, a fusion), or that two kinds of callers
share, is a one-line error.
"""
from __future__ import annotations

from ..hlo.ir import Instruction, Module, Shape
from ..hlo.rewrite import replace_all_uses
from .engine import EngineError

ORDER = Shape.array("u32", ())
# what the calls are, in the errors: under mpiexec every collective is one; on many devices
# (devices_rewrite.py) XLA runs its own collectives, and the calls are the plugins'
_WHAT = {"over MPI": "collectives",
         "on many devices": "communicator calls or overridden instructions"}
_BRANCHES = ("true_computation", "false_computation", "branch_computations")


def _roles_of(ins) -> list[tuple[str, object]]:
    """(role, computation) of each computation `ins` calls."""
    out = []
    for key, value in ins.attrs.items():
        for comp in value if isinstance(value, list) else [value]:
            if not hasattr(comp, "instructions"):
                continue
            role = {"body": "body", "condition": "condition"}.get(key) if \
                ins.opcode == "while" else "branch" if ins.opcode == "conditional" and \
                key in _BRANCHES else "call" if ins.opcode == "call" else None
            out.append((role, comp))
    return out


def threaded(ins, holds: set) -> bool:
    """Whether caller `ins` carries the token (a computation it calls holds calls)."""
    return ins.opcode in ("while", "conditional", "call") and \
        any(id(c) in holds for c in ins.called_computations())


def roles(module: Module, holds: set, where: str = "over MPI") -> dict[int, str]:
    """{id(computation): its role} for every computation whose parameters and root change
    (`where`: how the errors name the run, "over MPI" or "on many devices")."""
    out: dict[int, str] = {}
    for comp in module.computations:
        for ins in comp.instructions:
            carried = threaded(ins, holds)
            for role, callee in _roles_of(ins):
                if not carried:
                    if id(callee) in holds or id(callee) in out:
                        raise EngineError(
                            f"{ins.opcode} '{ins.name}' calls '{callee.name}', which holds "
                            f"{_WHAT[where]}: --engine xla {where} serves them in the entry, "
                            "while loops, conditionals and calls only", line=ins.line,
                            column=ins.column)
                    continue
                if out.setdefault(id(callee), role) != role:
                    raise EngineError(f"computation '{callee.name}' is both a {role} and a "
                                      f"{out[id(callee)]}: --engine xla {where} threads "
                                      f"the order of its {_WHAT[where]} through one kind "
                                      "of caller")
    return out


def enter(comp, role: str | None, uniq) -> tuple[Instruction, list[Instruction]]:
    """(the token the computation's first call takes, the instructions that make it)."""
    if role is None:  # the entry
        import numpy as np
        start = Instruction(uniq("mpi.order"), "constant", ORDER, literal=np.array(0, np.uint32))
        return start, [start]
    if role == "call":
        n = len(comp.parameters)
        token = Instruction(uniq("mpi.order"), "parameter", ORDER, parameter_number=n)
        return token, [token]
    old = comp.parameters[0]  # becomes element 0 of the new parameter, in place
    param = Instruction(uniq(f"{old.name}.mpi"), "parameter", Shape.tuple_of([old.shape, ORDER]),
                        parameter_number=0)
    old.opcode, old.operands, old.attrs = "get-tuple-element", [param], {"index": 0}
    old.parameter_number = None
    token = Instruction(uniq("mpi.order"), "get-tuple-element", ORDER, [param], {"index": 1})
    return token, [param, token]


def leave(comp, role: str | None, token, uniq, new: list) -> None:
    """The computation's root returns the token too (not the entry's, nor a condition's)."""
    if role in (None, "condition"):
        return
    root = comp.root
    comp.root = Instruction(uniq(f"{root.name}.mpi"), "tuple",
                            Shape.tuple_of([root.shape, ORDER]), [root, token])
    new.append(comp.root)


def thread(ins, comp, token, uniq, new: list) -> Instruction:
    """Caller `ins` takes `token` and returns the next one; its users get its old value."""
    old_shape = ins.shape
    if ins.opcode == "while":
        init = Instruction(uniq(f"{ins.name}.init"), "tuple",
                           Shape.tuple_of([ins.operands[0].shape, ORDER]),
                           [ins.operands[0], token])
        ins.operands = [init]
        new.append(init)
    elif ins.opcode == "conditional":
        wrapped = []
        for k, b in enumerate(ins.operands[1:]):
            t = Instruction(uniq(f"{ins.name}.arg{k}"), "tuple",
                            Shape.tuple_of([b.shape, ORDER]), [b, token])
            wrapped.append(t)
        ins.operands = [ins.operands[0], *wrapped]
        new.extend(wrapped)
    else:  # call
        ins.operands = [*ins.operands, token]
    ins.shape = Shape.tuple_of([old_shape, ORDER])
    value = Instruction(uniq(f"{ins.name}.value"), "get-tuple-element", old_shape, [ins],
                        {"index": 0})
    replace_all_uses(comp, ins, value)
    after = Instruction(uniq(f"{ins.name}.order"), "get-tuple-element", ORDER, [ins],
                        {"index": 1})
    new.extend([ins, value, after])
    return after


def ordered_call(ins, uniq, target: str, suffix: str, operands: list, leaves: list,
                 run: int, index: int, sites: int = 0) -> tuple[list, Instruction, Instruction]:
    """`ins` as a typed-FFI call of `target` on `operands` (the order token last), its
    results `leaves` and the next token: (the new instructions, the value that replaces
    `ins`, the token out).  The call's attributes name its binding (`run`, `index`) and
    its op (mpi_rewrite.py's and devices_rewrite.py's handlers read them); `sites`, where
    nonzero, the compiled MPI handler's registry (ffi/mpi_native.py)."""
    from ..hlo.attr_types import Raw, Word
    from ..plugin.attrs import op_name
    from .engine import TYPED_FFI
    cfg = (f"{{run = {run} : i64, index = {index} : i64, op = "
           f"\"{op_name(ins) or ins.opcode}\"" + (f", sites = {sites} : i64" if sites else "") +
           "}")
    call = Instruction(uniq(f"{ins.name}.{suffix}"), "custom-call",
                       Shape.tuple_of(leaves + [ORDER]), operands,
                       {"custom_call_target": target, "custom_call_has_side_effect": True,
                        "api_version": Word(TYPED_FFI), "backend_config": Raw(cfg)},
                       line=ins.line, column=ins.column)
    gtes = [Instruction(uniq(f"{ins.name}.{k}"), "get-tuple-element", s, [call], {"index": k})
            for k, s in enumerate(leaves + [ORDER])]
    *values, token = gtes
    if not ins.shape.is_tuple:
        return [call, *gtes], values[0], token
    value = Instruction(uniq(f"{ins.name}.tuple"), "tuple", Shape.tuple_of(leaves), values)
    return [call, *gtes, value], value, token
