"""HLO text -> Module.

The lark LALR parser (hlo.lark) runs with the transformer applied inside the parser, so no
parse tree is ever built: each rule callback builds IR directly.  Names (operands, called
computations, control predecessors) are resolved once a computation, then the module, is
complete, so forward references work as they do in XLA's parser.

Name resolution lives in parser_resolve, syntax-error diagnosis in parser_diagnostics, and
the grammar text with its regular expressions in parser_grammar.
"""
from __future__ import annotations

import re
import sys
from functools import lru_cache
from pathlib import Path

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedInput

from .attr_config import RESULT_ACCURACY_OPS
from .attr_placement import misplaced_attribute
from ..errors import HloSyntaxError, position_of
from ..ir import Computation, Instruction, Module, Shape
from .literals import LiteralError, parse_literal
from ..opcodes import ALL_OPCODES
from .parser_diagnostics import _Ctx, _describe, _err, _syntax_error, at_offset, parse_state  # noqa: F401
from .parser_grammar import _ATTR, _NAME_RX, BRACE_DEPTH, grammar_text  # noqa: F401
from .parser_attrs import _attr_tokens, _attrs, _attrs_of, _opt_attrs
from .parser_limits import RECURSION_ROOM, check_limits
from .parser_fast import fast_items
from .parser_inline import INLINE
from .parser_operands import Nested, scan_operands, split_top_level
from .parser_resolve import DONE, _resolve_computation, _resolve_module, unique_name
from .shape_parser import ShapeError, parse_array_shape, parse_shape


@lru_cache(maxsize=None)
def _lark(strict: bool = False, with_transformer: bool = True) -> Lark:
    from .parser_deep import install, make_on_deep_attrs, on_deep_call
    from .parser_diagnostics import _diagnose_attrs
    from .parser_tables import load_parser
    options = dict(transformer=_Builder() if with_transformer else None,
                   lexer_callbacks={"DEEP_CALL": on_deep_call,
                                    "DEEP_ATTRS": make_on_deep_attrs(_diagnose_attrs)})
    # The stored tables (parser_tables.py) unless strict (a check of the grammar itself).
    parser = None if strict else load_parser(grammar_text(), **options)
    if parser is None:
        parser = Lark(grammar_text(), parser="lalr", lexer="contextual", strict=strict,
                      maybe_placeholders=False, **options)
    install(parser)
    return parser


@lru_cache(maxsize=None)
def _terminals() -> dict:
    """The grammar's terminal expressions by name, compiled (for parser_fast)."""
    from .parser_fast import line_pattern
    out = {t.name: re.compile(t.pattern.to_regexp()) for t in _lark().terminals}
    out["_LINE"] = line_pattern(out)
    return out


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
        _Builder._constant(instr, body, body_pos)
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


class _Builder(Transformer):
    """Rule callbacks, run by the LALR parser as it reduces."""

    # List rules (`x: y | x y`, `x: y | x "," y`): one Python list, appended to in place.
    @staticmethod
    def _append(children):
        if len(children) == 1:
            return [children[0]]
        children[0].append(children[-1])
        return children[0]

    items = instructions = params = shapes = table_rows = _append

    def tuple_shape(self, children):
        return Shape.tuple_of(_shape_of(c) for c in (children[0] if children else ()))

    def param(self, children):
        tok, shape = children
        return (tok[:-1].strip().lstrip("%"), _shape_of(shape), tok)

    def signature(self, children):
        params = children[0] if len(children) == 2 else []
        return ("signature", params, _shape_of(children[-1]))

    def instruction(self, children):
        i = 0
        root_tok = None
        if children[0].type == "ROOT":
            root_tok, i = children[0], 1
        name_tok = children[i]
        # The result shape may be left out (XLA infers it): `ROOT v = abs(a)`.
        has_shape = not (isinstance(children[i + 1], Token) and children[i + 1].type == "OPCALL")
        shape = _shape_of(children[i + 1]) if has_shape else None
        call_tok = children[i + 1 + has_shape]
        rest = children[i + 2 + has_shape:]
        name = name_tok[:-1].rstrip().lstrip("%")
        paren = call_tok.index("(")
        instr = _make_instruction(name, call_tok[:paren].rstrip(), shape, call_tok[paren + 1:-1],
                                  call_tok.start_pos, call_tok.start_pos + paren + 1,
                                  name_tok.line, name_tok.column)
        instr.attrs = _attrs(rest[0], name) if len(rest) == 1 else _attrs_of(rest, name)
        if "result_accuracy" in instr.attrs and instr.opcode not in RESULT_ACCURACY_OPS:
            tok = next(t for t in rest if "result_accuracy" in t)
            at = tok.start_pos + tok.index("result_accuracy")
            raise _err(f"unexpected attribute 'result_accuracy' on {instr.opcode} '{name}': XLA "
                       f"takes it only on transcendental unary ops (exponential, log, tanh, "
                       f"...)", at)
        if any(misplaced_attribute(instr.opcode, k) for k in instr.attrs):
            for tok in rest:  # the first misplaced name, at its position
                _check_attribute_placement(instr.opcode, tok)
        instr._is_root = root_tok is not None
        if root_tok is not None:
            instr._root_at = (root_tok.line, root_tok.column)
        return instr

    @staticmethod
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
        try:
            instr.literal = parse_literal(body, instr.shape)
        except LiteralError as e:
            raise _err(f"constant '{instr.name}': {e}", pos + e.offset) from None

    def computation(self, children):
        i = 0
        is_entry = False
        if isinstance(children[0], Token) and children[0].type == "ENTRY":
            is_entry, i = True, 1
        name_tok = children[i]
        comp = Computation(name_tok.lstrip("%"), is_entry=is_entry, line=name_tok.line,
                           column=name_tok.column)
        sig = None
        rest = children[i + 1:]
        if rest and isinstance(rest[0], tuple) and rest[0][0] == "signature":
            sig, rest = rest[0], rest[1:]
        instrs = rest[0] if rest and isinstance(rest[0], list) else []
        trailing = _attr_tokens(rest)
        for key, value in _attrs_of(trailing, comp.name).items():
            if key != "execution_thread":
                tok = next(t for t in trailing if re.search(rf"\b{re.escape(key)}\s*=", t))
                at = tok.start_pos + re.search(rf"\b{re.escape(key)}\s*=", tok).start()
                raise _err(f"unknown computation attribute '{key}' (only execution_thread is "
                           f"allowed)", at)
            comp.execution_thread = value
        comp.instructions = _with_nested(instrs)
        comp.has_signature = sig is not None
        _resolve_computation(comp, sig)
        return comp

    def table_row(self, children):
        return (int(children[0]), str(children[1]))

    def stack_table(self, children):
        return ("table", str(children[0]), children[1] if len(children) > 1 else [])

    def header(self, children):
        return ("header", children[0], _opt_attrs(children[1:], "HloModule"))

    def start(self, children):
        items = children[-1] if children and isinstance(children[-1], list) else []
        return ([children[0]] if children and isinstance(children[0], tuple) else []) + items


_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")


def _check_text(text: str) -> None:
    if not text.strip():
        raise HloSyntaxError("empty module: no HloModule header and no computations", line=1,
                             column=1)
    m = _CONTROL.search(text)
    if m:
        line, col = position_of(text, m.start())
        raise HloSyntaxError(f"binary data in HLO text (control character 0x{ord(m.group(0)):02x})",
                             line=line, column=col)
    check_limits(text)  # XLA's nesting limit; only ASCII digits are numbers


def module_name_of(filename: str) -> str:
    """The name of a module without an `HloModule` header: its file's stem, made a name XLA's
    parser reads back (as XLA's name sanitizer does: other characters become `_`, and a
    leading digit gets a `_` before it)."""
    name = re.sub(r"[^\w.\-]", "_", Path(filename).stem) or "_"
    return name if re.match(r"[A-Za-z_]", name) else "_" + name


def _check_attribute_placement(opcode: str, tok) -> None:
    """An attribute the opcode does not take is an error at its name, as in XLA's parser
    (attr_placement.py has the table)."""
    if tok is None or not isinstance(tok, str):
        return
    for m in _ATTR.finditer(tok):
        why = misplaced_attribute(opcode, m.group(1))
        if why is not None:
            raise _err(why, tok.start_pos + m.start(1))


def parse_module(text: str, filename: str = "<string>") -> Module:
    """Parse HLO text.  Raises HloSyntaxError with a position on malformed input."""
    # Nested instructions and tuple shapes and literals are read recursively, up to XLA's
    # 500 levels (parser_limits.py checks the text first): room for them, and no more.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, RECURSION_ROOM))
    state = parse_state(text)  # this parse's own text and tables (a context variable)
    try:
        _check_text(text)
        items = fast_items(text, _terminals(), _Builder())  # the common path (parser_fast)
        if items is None:  # off it: lark reads the whole text, from a fresh state
            state.close()
            state = parse_state(text)
            try:
                items = _lark().parse(text)
            except UnexpectedInput as e:
                raise _syntax_error(e, text) from None
        header = next((x for x in items if isinstance(x, tuple) and x[0] == "header"), None)
        comps = [x for x in items if isinstance(x, Computation)]
        if not comps:
            raise HloSyntaxError("module has no computations", line=1, column=1)
        name = str(header[1]).lstrip("%") if header else module_name_of(filename)
        module = Module(name, attrs=header[2] if header else {}, source=filename)
        for x in items:
            if isinstance(x, tuple) and x[0] == "table":
                module.stack_tables[x[1]] = x[2]
        _resolve_module(module, comps, INLINE)
        return module
    except HloSyntaxError as e:
        raise at_offset(e, text).located(filename, text) from None
    finally:
        state.close()
        sys.setrecursionlimit(limit)


def parse_file(path: str) -> Module:
    """Parse an HLO file (`-`: standard input), read as the CLI reads it."""
    from .reader import read_hlo
    text, name = read_hlo(path)
    return parse_module(text, name)
