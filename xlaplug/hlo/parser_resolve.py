"""Name resolution, once a computation (then the module) is read: operands and control
predecessors to instructions, called computations to computations, and the checks that
go with it (duplicate names, ROOT, parameter numbers, the signature, ENTRY)."""
from __future__ import annotations

from . import attributes as A
from .errors import HloSyntaxError
from .ir import Computation, Instruction, Module
from .parser_diagnostics import _err


def _resolve_computation(comp: Computation, sig) -> None:
    by_name: dict[str, Instruction] = {}
    root = None
    for ins in comp.instructions:
        first = by_name.get(ins.name)
        if first is not None:
            raise HloSyntaxError(f"duplicate instruction name '{ins.name}' in computation "
                                 f"'{comp.name}' (first defined at line {first.line})",
                                 line=ins.line, column=ins.column)
        by_name[ins.name] = ins
        if ins._is_root:
            if root is not None:
                line, col = ins._root_at
                raise HloSyntaxError(f"computation '{comp.name}' has a second ROOT "
                                     f"instruction '{ins.name}' (the first is '{root.name}' at "
                                     f"line {root.line})", line=line, column=col)
            root = ins
    if not comp.instructions:
        raise HloSyntaxError(f"computation '{comp.name}' has no instructions", line=comp.line,
                             column=comp.column)
    comp.root = root or comp.instructions[-1]
    seen_params: dict[int, Instruction] = {}
    for ins in comp.instructions:
        ops = []
        for name, pos in ins._operand_refs:
            target = by_name.get(name)
            if target is None:
                raise _err(f"instruction '{ins.name}' uses undefined operand '{name}'", pos)
            ops.append(target)
        ins.operands = ops
        preds = ins.attrs.pop("control-predecessors", None)
        if preds is not None:
            for r in preds:
                if r.name not in by_name:
                    raise _err(f"instruction '{ins.name}' names undefined control predecessor "
                               f"'{r.name}'", r.offset)
            ins.control_predecessors = [by_name[r.name] for r in preds]
        del ins._operand_refs, ins._is_root
        if hasattr(ins, "_root_at"):
            del ins._root_at
        if ins.opcode == "parameter":
            n = ins.parameter_number
            if n in seen_params:
                raise HloSyntaxError(f"parameter number {n} used twice in computation "
                                     f"'{comp.name}'", line=ins.line, column=ins.column)
            seen_params[n] = ins
    if sorted(seen_params) != list(range(len(seen_params))):
        missing = min(set(range(len(seen_params) + 1)) - set(seen_params))
        after = max(seen_params)
        p = seen_params[after]
        raise HloSyntaxError(f"computation '{comp.name}' has parameter({after}) but no "
                             f"parameter({missing}): parameter numbers must be 0 to "
                             f"{len(seen_params) - 1}", line=p.line, column=p.column)
    if sig is not None:
        params, result = sig[1], sig[2]
        if len(params) != len(seen_params):
            raise HloSyntaxError(f"computation '{comp.name}' signature lists {len(params)} "
                                 f"parameters but the body has {len(seen_params)}",
                                 line=comp.line, column=comp.column)
        for num, (pname, pshape, tok) in enumerate(params):
            p = seen_params[num]
            if not pshape.compatible(p.shape):
                raise _err(f"signature parameter '{pname}' has shape {pshape}, but parameter "
                           f"{num} '{p.name}' is {p.shape}", tok.start_pos)
        if not result.compatible(comp.root.shape):
            raise HloSyntaxError(f"computation '{comp.name}' signature returns "
                                 f"{result.without_layout()}, but its root '{comp.root.name}' "
                                 f"is {comp.root.shape.without_layout()}", line=comp.line,
                                 column=comp.column)


def _resolve_module(module: Module, comps: list[Computation]) -> None:
    by_name: dict[str, Computation] = {}
    for c in comps:
        first = by_name.get(c.name)
        if first is not None:
            raise HloSyntaxError(f"duplicate computation name '{c.name}' (first defined at line "
                                 f"{first.line})", line=c.line, column=c.column)
        by_name[c.name] = c

    def look(ref: A.CompRef, owner: Instruction) -> Computation:
        c = by_name.get(ref.name)
        if c is None:
            raise _err(f"instruction '{owner.name}' calls undefined computation '{ref.name}'",
                       ref.offset)
        return c

    for c in comps:
        for ins in c.instructions:
            for k, v in ins.attrs.items():
                if isinstance(v, A.CompRef):
                    ins.attrs[k] = look(v, ins)
                elif isinstance(v, list) and v and isinstance(v[0], A.CompRef):
                    ins.attrs[k] = [look(r, ins) for r in v]
    entries = [c for c in comps if c.is_entry]
    if len(entries) > 1:
        raise HloSyntaxError(f"more than one ENTRY computation ('{entries[0].name}' and "
                             f"'{entries[1].name}')", line=entries[1].line, column=entries[1].column)
    module.computations = comps
    # Without ENTRY, XLA takes the last computation as the entry.
    module.entry = entries[0] if entries else comps[-1]
