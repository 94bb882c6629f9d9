"""Module -> canonical HLO text that XLA's parser reads back.

The style is the one JAX prints (`as_text(dialect="hlo")`): no `%` sigils, layouts on
instruction shapes, and a computation signature wherever the input had one.
"""
from __future__ import annotations

from .attributes import format_value, name_ref
from ..ir import Computation, Instruction, Module
from .literals import format_literal
from .parser_limits import recursion_room


def instruction_to_text(ins: Instruction, is_root: bool = False) -> str:
    if ins.opcode == "constant":
        args = "{...}" if ins.literal_elided else format_literal(ins.literal, ins.shape)
    elif ins.opcode == "parameter":
        args = str(ins.parameter_number)
    else:
        args = ", ".join(name_ref(o.name) for o in ins.operands)
    parts = [f"{'ROOT ' if is_root else ''}{name_ref(ins.name)} = {ins.shape} {ins.opcode}({args})"]
    for k, v in ins.attrs.items():
        parts.append(f"{k}={format_value(k, v)}")
    if ins.control_predecessors:
        parts.append("control-predecessors={"
                     + ", ".join(name_ref(p.name) for p in ins.control_predecessors) + "}")
    return ", ".join(parts)


def _signature(comp: Computation) -> str:
    params = ", ".join(f"{name_ref(p.name)}: {p.shape.without_layout()}" for p in comp.parameters)
    return f" ({params}) -> {comp.root.shape.without_layout()}"


def computation_to_text(comp: Computation) -> str:
    head = ("ENTRY " if comp.is_entry else "") + name_ref(comp.name)
    if comp.has_signature:
        head += _signature(comp)
    lines = [head + " {"]
    for ins in comp.instructions:
        lines.append("  " + instruction_to_text(ins, ins is comp.root))
    tail = "}"
    if comp.execution_thread is not None:
        tail += f", execution_thread={format_value('execution_thread', comp.execution_thread)}"
    lines.append(tail)
    return "\n".join(lines)


def module_to_text(module: Module) -> str:
    # Tuple literals print recursively, up to XLA's 500 levels (parser_limits.py).
    with recursion_room():
        return _module_to_text(module)


def _module_to_text(module: Module) -> str:
    head = "HloModule " + name_ref(module.name)
    for k, v in module.attrs.items():
        head += f", {k}={format_value(k, v)}"
    chunks = [head]
    for table, rows in module.stack_tables.items():
        chunks.append(table + "\n" + "\n".join(f"{n} {v}" for n, v in rows))
    for comp in module.computations:
        # The entry is marked ENTRY wherever it sits (it may have been chosen implicitly).
        was = comp.is_entry
        comp.is_entry = comp is module.entry
        chunks.append(computation_to_text(comp))
        comp.is_entry = was
    return "\n\n".join(chunks) + "\n"
