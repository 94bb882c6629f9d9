"""Module -> canonical HLO text that XLA's parser reads back.

The style is the one JAX prints (`as_text(dialect="hlo")`): no `%` sigils, layouts on
instruction shapes, and a computation signature wherever the input had one.
"""
from __future__ import annotations

from .attributes import format_value, name_ref
from ..ir import Computation, Instruction, Module
from .literal_format import format_literal
from .parser_limits import recursion_room


class _Memo:
    """Text already made during one module's printing: names, shapes (by identity: the parser
    gives every instruction with the same shape text one Shape) and metadata (by its fields,
    when they are plain strings and integers).  A module repeats all three thousands of
    times."""
    __slots__ = ("names", "shapes", "metadata")

    def __init__(self):
        self.names: dict[str, str] = {}
        self.shapes: dict[int, str] = {}
        self.metadata: dict[tuple, str] = {}

    def name(self, name: str) -> str:
        text = self.names.get(name)
        if text is None:
            text = self.names[name] = name_ref(name)
        return text

    def shape(self, shape) -> str:
        text = self.shapes.get(id(shape))
        if text is None:
            text = self.shapes[id(shape)] = str(shape)
        return text

    def value(self, k: str, v) -> str:
        if (k == "metadata" and type(v) is dict
                and all(type(x) is str or type(x) is int for x in v.values())):
            key = tuple(v.items())
            text = self.metadata.get(key)
            if text is None:
                text = self.metadata[key] = format_value(k, v)
            return text
        return format_value(k, v)


def instruction_to_text(ins: Instruction, is_root: bool = False, memo: _Memo | None = None) -> str:
    if memo is None:
        memo = _Memo()
    if ins.opcode == "constant":
        args = "{...}" if ins.literal_elided else format_literal(ins.literal, ins.shape)
    elif ins.opcode == "parameter":
        args = str(ins.parameter_number)
    else:
        name = memo.name
        args = ", ".join([name(o.name) for o in ins.operands])
    text = (f"{'ROOT ' if is_root else ''}{memo.name(ins.name)} = {memo.shape(ins.shape)} "
            f"{ins.opcode}({args})")
    if ins.attrs:
        value = memo.value
        text += "".join([f", {k}={value(k, v)}" for k, v in ins.attrs.items()])
    if ins.control_predecessors:
        text += (", control-predecessors={"
                 + ", ".join(name_ref(p.name) for p in ins.control_predecessors) + "}")
    return text


def _signature(comp: Computation) -> str:
    params = ", ".join(f"{name_ref(p.name)}: {p.shape.without_layout()}" for p in comp.parameters)
    return f" ({params}) -> {comp.root.shape.without_layout()}"


def computation_to_text(comp: Computation, memo: _Memo | None = None) -> str:
    if memo is None:
        memo = _Memo()
    head = ("ENTRY " if comp.is_entry else "") + name_ref(comp.name)
    if comp.has_signature:
        head += _signature(comp)
    lines = [head + " {"]
    for ins in comp.instructions:
        lines.append("  " + instruction_to_text(ins, ins is comp.root, memo))
    tail = "}"
    if comp.execution_thread is not None:
        tail += f", execution_thread={format_value('execution_thread', comp.execution_thread)}"
    lines.append(tail)
    return "\n".join(lines)


def module_to_text(module: Module) -> str:
    # Tuple literals print recursively, up to XLA's 500 levels (parser_limits.py).
    with recursion_room():
        return _module_to_text(module)


def module_header(module: Module) -> str:
    """The `HloModule name, attr=value, ...` line."""
    head = "HloModule " + name_ref(module.name)
    for k, v in module.attrs.items():
        head += f", {k}={format_value(k, v)}"
    return head


def _module_to_text(module: Module) -> str:
    chunks = [module_header(module)]
    memo = _Memo()
    for table, rows in module.stack_tables.items():
        chunks.append(table + "\n" + "\n".join(f"{n} {v}" for n, v in rows))
    for comp in module.computations:
        # The entry is marked ENTRY wherever it sits (it may have been chosen implicitly).
        was = comp.is_entry
        comp.is_entry = comp is module.entry
        chunks.append(computation_to_text(comp, memo))
        comp.is_entry = was
    return "\n\n".join(chunks) + "\n"
