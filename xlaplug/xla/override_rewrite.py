"""Core opcodes a plugin overrides, on `--engine xla` (issue 22 item 3: what XLA itself
would call registering an HLO thunk of one's own).

Each instruction of an overridden opcode that XLA runs as code -- in the entry, and in the
computations of its whiles, conditionals and calls, recursively -- becomes a typed-FFI
custom call `xlaplug.override` with the instruction's operands and shape, served by
ffi/override_handler.py, which runs the interpreter's override kernel for the original
instruction (`backend_config={run = R : i64, index = I : i64, op = "negate"}`: the
program's binding and the instruction's place in it).  XLA neither fuses nor rewrites it
then, so the kernel runs once for every instruction, as in the interpreter (whose fusion
passes leave overridden opcodes out).

Scalar computations keep XLA's own op: a reducer, a map's or scatter's to_apply, a sort's
comparator, a select-and-scatter's select are not run as code by XLA:CPU (it emits them
into the loops of their caller, where a custom call cannot be), nor by the interpreter,
which compiles them as scalar functions (backends/cpu/scalar_jit.py) without asking the
plugins: the override is used in neither, so both engines agree.

Not served, with a one-line error naming the instruction, the opcode and the plugin: an
override of an opcode that is control flow or structure XLA must see (while, conditional,
call, fusion, custom-call, the async -start/-update/-done forms), and one on an
instruction with a token or tuple operand, or a token or nested-tuple result (an FFI
handler gets array buffers).  `parameter` and `constant` are never overridden, in the
interpreter either (it reads them without a kernel).
"""
from __future__ import annotations

from ..hlo.attr_types import Raw, Word
from dataclasses import replace

from ..hlo.ir import Instruction, Module, Shape
from ..hlo.opcodes import ALL_OPCODES
from .engine import TYPED_FFI, EngineError

TARGET = "xlaplug.override"
_NESTED = {"while": ("condition", "body"), "call": ("to_apply",),
           "conditional": ("true_computation", "false_computation", "branch_computations")}
_NEVER = frozenset({"parameter", "constant"})
_REFUSED = frozenset({"while", "conditional", "call", "fusion", "custom-call", "async-start",
                      "async-update", "async-done"})


def override_handler():
    """This process's override handler (ffi/override_handler.py), registered with jax the
    first time, the same object after (XLA's targets have no unregister)."""
    from .ffi.override_handler import OverrideHandler
    from .ffi.register import serve_own
    return serve_own([TARGET], OverrideHandler)


def code_computations(module: Module) -> list:
    """The entry and every computation its whiles, conditionals and calls run, recursively:
    those XLA:CPU runs as code (not scalar computations)."""
    out, todo, seen = [], [module.entry], {id(module.entry)}
    while todo:
        comp = todo.pop()
        out.append(comp)
        for ins in comp.instructions:
            for key in _NESTED.get(ins.opcode, ()):
                value = ins.attrs.get(key)
                for callee in value if isinstance(value, list) else [value]:
                    if hasattr(callee, "instructions") and id(callee) not in seen:
                        seen.add(id(callee))
                        todo.append(callee)
    return out


def override_of(ins, registry):
    """The CPU override kernel (an OpEntry) of `ins`, or None."""
    if ins.opcode in _NEVER or ins.opcode not in ALL_OPCODES:
        return None
    if ins.opcode == "call" and ins.attrs.get("is_composite"):
        return None  # a composite: a plugin op (engine.lowered), not the core call
    return registry.kernel_for(ins.opcode, "cpu")


def overridden(module: Module, registry) -> list[tuple]:
    """(computation, instruction, override OpEntry) of each overridden instruction XLA runs
    as code, in the module's order.  One in a computation that is also a scalar computation
    (a call's and a reducer's at once) is a one-line error: XLA cannot have a custom call
    there, and the interpreter would run the override in one place and not the other."""
    found = [(comp, ins, entry) for comp in code_computations(module)
             for ins in comp.instructions if (entry := override_of(ins, registry)) is not None]
    if found:
        scalar = {id(c) for comp in module.computations for ins in comp.instructions
                  if ins.opcode not in _NESTED for c in ins.called_computations()}
        for comp, ins, entry in found:
            if id(comp) in scalar:
                raise EngineError(f"{ins.opcode} '{ins.name}': plugin '{entry.plugin.name}' "
                                  f"overrides core opcode '{ins.opcode}', and computation "
                                  f"'{comp.name}' is both run as code and a scalar "
                                  "computation (a reducer, comparator or map): --engine xla "
                                  "cannot serve it in one and not the other", line=ins.line,
                                  column=ins.column)
    return found


def _refuse(ins, entry) -> None:
    why = None
    if ins.opcode in _REFUSED or ins.opcode.endswith(("-start", "-update", "-done")):
        why = "it is control flow or structure XLA must run itself"
    elif any(o.shape.is_tuple or o.shape.is_token for o in ins.operands):
        why = "an operand is a tuple or a token (an FFI handler gets array buffers)"
    elif ins.shape.is_token or (ins.shape.is_tuple and any(
            s.is_tuple or s.is_token for s in ins.shape.tuple_shapes)):
        why = f"its result {ins.shape} is not an array or a flat tuple of arrays"
    elif any(any(s.dynamic) for s in [*ins.shape.leaves(),
                                       *(o.shape for o in ins.operands)]):
        why = "a dynamic dimension (an FFI handler gets static shapes)"
    if why:
        raise EngineError(f"{ins.opcode} '{ins.name}': plugin '{entry.plugin.name}' overrides "
                          f"core opcode '{ins.opcode}', which --engine xla cannot serve as a "
                          f"custom call: {why}", line=ins.line, column=ins.column)


def _row_major(shape: Shape) -> Shape:
    """The shape with XLA's default layout: the handler views buffers as C-contiguous (XLA
    puts its own copies around the call where the module asked for another layout)."""
    if shape.is_tuple:
        return Shape.tuple_of(_row_major(s) for s in shape.tuple_shapes)
    return replace(shape, layout=None)


def rewrite_overrides(module: Module, registry, run: int, found=None) -> list[Instruction]:
    """Rewrite `module` in place: each overridden instruction XLA runs as code (`found`:
    overridden()'s list, else worked out) becomes an `xlaplug.override` call bound to handler
    run `run`; returns the replaced instructions, in index order (intact: their operands
    and attributes as read, for the kernel).  One pass over each computation touched."""
    served: list[Instruction] = []
    calls: dict[int, dict[int, Instruction]] = {}  # id(comp) -> id(replaced) -> its call
    comps = {}
    for comp, ins, entry in overridden(module, registry) if found is None else found:
        _refuse(ins, entry)
        cfg = f'{{run = {run} : i64, index = {len(served)} : i64, op = "{ins.opcode}"}}'
        attrs = {"custom_call_target": TARGET, "api_version": Word(TYPED_FFI),
                 "backend_config": Raw(cfg)}
        if ins.has_side_effect:  # (rng: XLA may neither drop nor merge it)
            attrs["custom_call_has_side_effect"] = True
        calls.setdefault(id(comp), {})[id(ins)] = Instruction(
            ins.name, "custom-call", _row_major(ins.shape), list(ins.operands), attrs,
            control_predecessors=list(ins.control_predecessors), line=ins.line,
            column=ins.column)
        comps[id(comp)] = comp
        served.append(ins)
    for key, new in calls.items():
        comp = comps[key]
        comp.instructions = [new.get(id(i), i) for i in comp.instructions]
        for i in comp.instructions:  # every use of a replaced instruction: its call
            i.operands = [new.get(id(o), o) for o in i.operands]
            i.control_predecessors = [new.get(id(p), p) for p in i.control_predecessors]
        comp.root = new.get(id(comp.root), comp.root)
    return served


def bind_overrides(module: Module, registry, ctx, original=lambda ins: ins):
    """The module's overridden instructions made `xlaplug.override` calls, bound to the
    override handler with the interpreter context `ctx` their kernels run in: (handler,
    binding key), or None when nothing is overridden.  `original`: the instruction the
    kernel runs for, given the one replaced (the MPI engine rewrites a copy), or None for
    an instruction the interpreter does not run (one that copy's rewrite made)."""
    found = [f for f in overridden(module, registry) if original(f[1]) is not None]
    if not found:
        return None
    for _comp, ins, entry in found:  # (refused before anything is registered)
        _refuse(ins, entry)
    handler = override_handler()
    key, binding = handler.bind(ctx, [])
    try:
        binding.instructions = [original(i) for i in rewrite_overrides(module, registry, key,
                                                                       found)]
    except BaseException:
        handler.unbind(key)
        raise
    return handler, key
