"""Name resolution, once a computation (then the module) is read: operands and control
predecessors to instructions, called computations to computations, and the checks that
go with it (duplicate names, ROOT, parameter numbers, the signature, ENTRY)."""
from __future__ import annotations

from . import attributes as A
from ..errors import HloSyntaxError
from ..ir import Computation, Instruction, Module
from .parser_state import StateView, _err


# The computations read so far in this parse, by name: a called computation's signature is
# what infers the shape of a `call`, `while`, `reduce`... written without one.  XLA's parser
# needs a computation defined before the instruction whose shape depends on it, as here.
DONE = StateView("done")  # the current parse's (parser_state.ParseState)


def unique_name(base: str, used: set[str], counters: dict | None = None) -> str:
    """`base`, or `base.1`, `base.2`, ... : the first not in `used` (which it joins).
    `counters` remembers, per base, where the next search starts (names made in a row)."""
    k = counters.get(base, 0) if counters is not None else 0
    name = f"{base}.{k}" if k else base
    while name in used:
        k += 1
        name = f"{base}.{k}"
    used.add(name)
    if counters is not None:
        counters[base] = k + 1
    return name


def _check_operand_shape(user: Instruction, target: Instruction, ref) -> None:
    """`f32[2]{0} %x`: the shape printed with an operand must be the operand's (XLA's parser
    compares them as ShapeUtil::Compatible does: layouts aside)."""
    if target.shape is None:
        return
    from .parser_instr import _shape_at
    from ..shape_rules.common import compatible
    written = _shape_at(ref.shape_text, ref.pos - len(ref.shape_text) - 1)
    if not compatible(written, target.shape):
        raise _err(f"operand '{ref.name}' of '{user.name}' is written with shape {written}, but "
                   f"'{target.name}' has shape {target.shape}", ref.pos)


def _compact_gte(target: Instruction, ref, gtes: dict, used: set, listed: list) -> Instruction:
    """`%p0#1#0`: the get-tuple-elements it stands for, made once per computation and named
    as XLA names them (`p0_1`, `p0_1_0`), placed before their first user."""
    path = ref.name
    for index in ref.gte:
        path += f"#{index}"
        if target.shape is None:
            raise _err(f"compact get-tuple-element '{path}' needs the shape of '{target.name}', "
                       f"which is defined after this use", ref.pos)
        if not target.shape.is_tuple:
            raise _err(f"compact get-tuple-element '{path}': GTE operand must be tuple, but "
                       f"'{target.name}' has shape {target.shape}", ref.pos)
        if not 0 <= index < len(target.shape.tuple_shapes):
            raise _err(f"compact get-tuple-element '{path}': GTE index {index} out of bounds "
                       f"for shape {target.shape}", ref.pos)
        gte = gtes.get((id(target), index))
        if gte is None:
            gte = Instruction(unique_name(path.replace("#", "_"), used), "get-tuple-element",
                              target.shape.tuple_shapes[index], line=target.line,
                              column=target.column)
            gte.operands, gte.attrs = [target], {"index": index}
            gtes[(id(target), index)] = gte
            listed.append(gte)
        target = gte
    return target


# Opcodes whose shape must be written: XLA's parser's list (CanInferShape false: those whose
# result the operands do not determine, and the collectives, async and copy ops XLA always
# writes), and three whose result our rules take from the declaration.
_NEEDS_DECLARED = frozenset({
    "async-start", "async-update", "async-done", "all-gather", "all-gather-start",
    "all-gather-done", "all-reduce", "all-reduce-start", "all-reduce-done", "all-to-all",
    "collective-broadcast", "collective-permute", "collective-permute-start",
    "collective-permute-done", "copy-done", "copy-start", "dynamic-reshape", "dynamic-slice",
    "dynamic-update-slice", "ragged-all-to-all", "recv", "recv-done", "reduce-scatter", "send",
    "send-done", "slice", "bitcast", "bitcast-convert", "constant", "convert", "custom-call",
    "fusion", "infeed", "iota", "outfeed", "parameter", "reduce-precision", "reshape", "rng",
    "rng-bit-generator", "rng-get-and-update-state", "stochastic-convert",
    # XLA infers these three; our rules take their result from the declaration.
    "broadcast", "scan", "ragged-dot"})


_FILLED_IN = frozenset({"broadcast", "reduce-window", "select-and-scatter"})


def _fill_in(ins: Instruction) -> None:
    """Attributes XLA's parser supplies when a scalar operand makes them empty: a scalar
    broadcast's `dimensions={}`, a scalar reduce-window's or select-and-scatter's window."""
    op = ins.operands[0] if ins.operands else None
    if op is None or op.shape is None or not op.shape.is_array or op.shape.rank:
        return
    if ins.opcode == "broadcast":
        ins.attrs.setdefault("dimensions", ())
    else:
        ins.attrs.setdefault("window", A.Window(()))


# XLA's parser builds these with the shape they must have, whatever shape is written.
_SHAPE_IGNORED = frozenset({"send", "send-done", "outfeed"})


def _inferred_shape(ins: Instruction, written: bool = False):
    """The shape of an instruction written without one (or, `written`, one whose written
    shape XLA replaces), by XLA's shape rules."""
    from ..shape_rules.common import ShapeInferenceError
    from ..shape_rules.infer import infer_shape
    where = dict(line=ins.line, column=ins.column)
    if not written and ins.opcode in _NEEDS_DECLARED:
        raise HloSyntaxError(f"instruction '{ins.name}' needs its shape written: XLA does not "
                             f"infer the shape of {ins.opcode}", **where)
    for op in ins.operands:
        if op.shape is None:
            raise HloSyntaxError(f"instruction '{ins.name}' has no shape and its operand "
                                 f"'{op.name}' is defined after it, so none can be inferred",
                                 **where)
    for k, v in ins.attrs.items():
        if isinstance(v, A.CompRef):
            ins.attrs[k] = _done(v, ins)
        elif isinstance(v, list) and v and isinstance(v[0], A.CompRef):
            ins.attrs[k] = [_done(r, ins) for r in v]
    try:
        shape = infer_shape(ins)
    except ShapeInferenceError as e:
        raise HloSyntaxError(f"cannot infer the shape of '{ins.name}': {e}", **where) from None
    if shape is None:  # a rule that takes the declared shape as given
        raise HloSyntaxError(f"instruction '{ins.name}' needs its shape written", **where)
    return shape


def _done(ref, owner: Instruction) -> Computation:
    c = DONE.get(ref.name)
    if c is None:
        raise _err(f"instruction '{owner.name}' has no shape and calls '{ref.name}', which is "
                   f"not defined before it, so none can be inferred", ref.offset)
    return c


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
    gtes: dict[tuple, Instruction] = {}
    used: set[str] = set()  # names taken, filled when a compact get-tuple-element needs it
    listed = []
    for ins in comp.instructions:
        ops = []
        for ref in ins._operand_refs:
            if type(ref) is tuple:  # a plain name: (name, position)
                target = by_name.get(ref[0])
                if target is None:
                    raise _err(f"instruction '{ins.name}' uses undefined operand '{ref[0]}'",
                               ref[1])
                ops.append(target)
                continue
            if isinstance(ref, Instruction):  # a nested instruction, already listed
                ops.append(ref)
                continue
            target = by_name.get(ref.name)
            if target is None:
                raise _err(f"instruction '{ins.name}' uses undefined operand '{ref.name}'",
                           ref.pos)
            if ref.gte:
                if not used:
                    used.update(by_name)
                target = _compact_gte(target, ref, gtes, used, listed)
            if ref.shape_text is not None:
                _check_operand_shape(ins, target, ref)
            ops.append(target)
        ins.operands = ops
        if ins.opcode in _FILLED_IN:
            _fill_in(ins)
        if ins.shape is None:
            ins.shape = _inferred_shape(ins)
        elif ins.opcode in _SHAPE_IGNORED:
            ins.shape = _inferred_shape(ins, written=True)
        listed.append(ins)
        preds = ins.attrs.pop("control-predecessors", None)
        if preds is not None:
            for r in preds:
                if r.name not in by_name:
                    raise _err(f"instruction '{ins.name}' names undefined control predecessor "
                               f"'{r.name}'", r.offset)
            ins.control_predecessors = [by_name[r.name] for r in preds]
        del ins._operand_refs, ins._is_root, ins._nested
        if hasattr(ins, "_root_at"):
            del ins._root_at
        if ins.opcode == "parameter":
            n = ins.parameter_number
            if n in seen_params:
                raise HloSyntaxError(f"parameter number {n} used twice in computation "
                                     f"'{comp.name}'", line=ins.line, column=ins.column)
            seen_params[n] = ins
    comp.instructions = listed
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
    DONE[comp.name] = comp


def _with_inline(comps: list[Computation], inline: list[Computation]) -> list[Computation]:
    """The module's computations with each inline one placed before the first computation
    that calls it (callees first, as XLA prints them), its name made unique among all."""
    if not inline:
        return comps
    used = {c.name for c in comps}
    for c in inline:
        c.name = unique_name("_", used)
    pending = {id(c) for c in inline}
    out: list[Computation] = []

    def add(c: Computation) -> None:
        for ins in c.instructions:
            for v in ins.attrs.values():
                for callee in (v if isinstance(v, list) else [v]):
                    if isinstance(callee, Computation) and id(callee) in pending:
                        pending.discard(id(callee))
                        add(callee)
        out.append(c)

    for c in comps:
        add(c)
    return out


def _resolve_module(module: Module, comps: list[Computation],
                    inline: list[Computation] = ()) -> None:
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
                elif isinstance(v, list) and any(isinstance(r, A.CompRef) for r in v):
                    ins.attrs[k] = [look(r, ins) if isinstance(r, A.CompRef) else r for r in v]
    entries = [c for c in comps if c.is_entry]
    if len(entries) > 1:
        raise HloSyntaxError(f"more than one ENTRY computation ('{entries[0].name}' and "
                             f"'{entries[1].name}')", line=entries[1].line, column=entries[1].column)
    DONE.clear()
    module.computations = _with_inline(comps, inline)
    # Without ENTRY, XLA takes the last computation as the entry.
    module.entry = entries[0] if entries else comps[-1]
