"""Instructions from their text pieces: the opcode checked, the operand list read
(parser_operands), a constant's literal and a parameter's number; shapes written in operand
lists; nested-instruction operands placed before their users.  Shared by the lark callbacks
(parser._Builder) and the common path read without lark (parser_fast)."""
from __future__ import annotations

import re

import numpy as np

from ..errors import position_of
from ..ir import Instruction, Shape
from ..opcodes import ALL_OPCODES
from .attr_config import RESULT_ACCURACY_OPS
from .attr_placement import misplaced_names
from .literals import LiteralError, parse_literal
from .parser_attrs import typed_attrs
from .parser_state import _Ctx, _err, current_parse
from .parser_operands import Nested, scan_operands, split_top_level
from .parser_resolve import unique_name
from .shape_parser import ShapeError, parse_array_shape, parse_shape


_COMMENTS = re.compile(r"/\*.*?\*/", re.S)


def _shape_of(tok) -> Shape:
    if isinstance(tok, Shape):
        return tok
    try:
        if tok.type == "BUFFER_SHAPE":
            return parse_shape(str(tok))
        return parse_array_shape(str(tok))
    except ShapeError as e:
        raise _err(str(e), tok.start_pos) from None


_DIGITS = re.compile(r"[0-9]+")


def _parameter_number(name: str, body: str, pos: int) -> int:
    text = body.strip()
    at = pos + len(body) - len(body.lstrip())
    if _DIGITS.fullmatch(text):
        return int(text)
    if not text:
        raise _err(f"parameter '{name}' is missing its parameter number: expected "
                   f"parameter(N)", pos)
    if re.fullmatch(r"-\d+", text):
        raise _err(f"parameter number must be >= 0, got {text}", at)
    raise _err(f"parameter '{name}' needs an integer parameter number, like parameter(0), "
               f"got '{text[:30]}'", at)


def _is_async_sugar(opcode: str) -> bool:
    """XLA prints an async op wrapping a single instruction as `<op>-start`, `<op>-update`,
    `<op>-done` (e.g. `fusion-start`) with the wrapped op's attributes."""
    base, dash, phase = opcode.rpartition("-")
    return (bool(dash) and phase in ("start", "update", "done") and base in ALL_OPCODES
            and base not in _NO_ASYNC_SUGAR)


# Ops with their own start/done opcodes, which XLA does not wrap: `copy-update`,
# `send-start`, `recv-update`, ... are unknown opcodes to XLA's parser.
_NO_ASYNC_SUGAR = frozenset({"all-gather", "all-reduce", "collective-permute", "copy", "recv",
                             "send"})


def _opcode_hint(opcode: str) -> str:
    import difflib
    close = difflib.get_close_matches(opcode.lower(), sorted(ALL_OPCODES), n=1, cutoff=0.75)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _make_instruction(name: str, opcode: str, shape, body: str, opcode_pos: int,
                      body_pos: int, line: int, column: int) -> Instruction:
    """An instruction from its pieces; operands written as nested instructions are built
    too and listed, innermost first, in `_nested` (the computation adds them before it)."""
    if opcode not in ALL_OPCODES and not _is_async_sugar(opcode):
        raise _err(f"unknown opcode '{opcode}'{_opcode_hint(opcode)}", opcode_pos)
    instr = Instruction(name, opcode, shape, line=line, column=column)
    instr._nested = ()  # a list once a nested-instruction operand appears
    instr._is_root = False
    if "/*" in body:  # blank comments out, keeping offsets for error positions
        body = _COMMENTS.sub(lambda m: " " * len(m.group(0)), body)
    if opcode in ("constant", "parameter") and shape is None:
        what = "constant(...)" if opcode == "constant" else "parameter(N)"
        raise _err(f"missing shape before '{opcode}(...)': a {opcode} is never inferred, "
                   f"write 'name = shape {what}'", opcode_pos)
    if opcode == "constant":
        _constant(instr, body, body_pos)
        instr._operand_refs = []
    elif opcode == "parameter":
        instr.parameter_number = _parameter_number(name, body, body_pos)
        instr._operand_refs = []
    else:
        refs = []
        for op in scan_operands(body, body_pos):
            if isinstance(op, Nested):
                nested = _make_instruction(
                    op.opcode + ".anon", op.opcode,
                    _shape_at(op.shape_text, op.shape_pos) if op.shape_text else None,
                    op.body, op.opcode_pos, op.body_pos, *position_of(_Ctx.text, op.shape_pos))
                nested.attrs = {}
                if not instr._nested:
                    instr._nested = []
                instr._nested += nested._nested
                instr._nested.append(nested)
                nested._nested = ()
                refs.append(nested)
            else:
                refs.append(op)
        instr._operand_refs = refs
    return instr


def _shape_at(text: str, pos: int) -> Shape:
    """A shape written inside an operand list (`(f32[2], s32[])` or `f32[2]{0}`)."""
    if text.startswith("("):
        inner = text[1:-1]
        parts = split_top_level(inner) if inner.strip() else []
        return Shape.tuple_of(_shape_at(p.strip(), pos + 1 + off + p.index(p.strip()[:1]))
                              for p, off in parts)
    try:
        return parse_shape(text) if text.startswith("b(") else parse_array_shape(text)
    except ShapeError as e:
        raise _err(str(e), pos) from None


def _with_nested(instrs: list[Instruction]) -> list[Instruction]:
    """The instruction list with nested-instruction operands added before their users, named
    `<opcode>.anon`, `.anon.1`, ... apart from every other name (XLA's uniquer)."""
    if not any(ins._nested for ins in instrs):
        return instrs
    used = {ins.name for ins in instrs}
    counters: dict[str, int] = {}
    out = []
    for ins in instrs:
        for nested in ins._nested:
            nested.name = unique_name(nested.name, used, counters)
            out.append(nested)
        out.append(ins)
    return out


def _constant(instr: Instruction, body: str, pos: int) -> None:
    if "/*" in body:  # blank comments out, keeping offsets for error positions
        body = _COMMENTS.sub(lambda m: " " * len(m.group(0)), body)
    if body.strip() == "{...}":
        instr.literal_elided = True
        return
    if not body.strip():
        raise _err(f"constant '{instr.name}' has no literal: expected constant(value)", pos)
    if instr.shape.is_token or instr.shape.element_type == "opaque":
        raise _err(f"constant '{instr.name}' has shape {instr.shape}, which has no literal",
                   pos)
    # Short literals repeat (`constant(0)`, `constant(0.5)`): each read once per parse, and
    # every constant gets its own copy of the array.
    key = (body, instr.shape) if len(body) <= 40 else None
    known = current_parse().literals.get(key) if key is not None else None
    if known is not None:
        instr.literal = known.copy()
        return
    try:
        instr.literal = parse_literal(body, instr.shape)
    except LiteralError as e:
        raise _err(f"constant '{instr.name}': {e}", pos + e.offset) from None
    if key is not None and type(instr.literal) is np.ndarray:
        current_parse().literals[key] = instr.literal.copy()


def line_instruction(m, attr_matches: list, line: int, line_start: int) -> Instruction:
    """The instruction of one line parser_fast's head expression matched (`m`: groups root,
    name, buffer, shape, op, body) with its attribute run's `_ATTR` matches: what
    parser._Builder.instruction builds from the same tokens.  Anything wrong raises (the
    caller then has lark read the text, which reports it)."""
    root, name, buffer, shape, opcode, body = m.group("root", "name", "buffer", "shape", "op",
                                                     "body")
    name = name[:-1].rstrip().lstrip("%")
    if shape is not None:
        shape = parse_array_shape(shape)
    elif buffer is not None:
        shape = parse_shape(buffer)
    instr = _make_instruction(name, opcode, shape, body, m.start("op"), m.start("body"), line,
                              m.start("name") - line_start + 1)
    attrs = instr.attrs = typed_attrs(attr_matches, name) if attr_matches else {}
    if attrs:
        if "result_accuracy" in attrs and opcode not in RESULT_ACCURACY_OPS:
            raise ValueError("result_accuracy")  # lark's path says where
        if not misplaced_names(opcode).isdisjoint(attrs):
            raise ValueError("misplaced attribute")  # lark's path says which, and where
    if root is not None:
        instr._is_root = True
        instr._root_at = (line, m.start("root") - line_start + 1)
    return instr
