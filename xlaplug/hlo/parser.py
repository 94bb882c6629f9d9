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

from . import attributes as A
from .attr_config import RESULT_ACCURACY_OPS
from .errors import HloSyntaxError, position_of
from .ir import Computation, Instruction, Module, Shape
from .literals import LiteralError, parse_literal
from .opcodes import ALL_OPCODES
from .parser_diagnostics import _Ctx, _describe, _err, _syntax_error  # noqa: F401
from .parser_grammar import _ATTR, _NAME_RX, BRACE_DEPTH, grammar_text  # noqa: F401
from .parser_deep import MAX_DEPTH
from .parser_inline import INLINE, inline_value, is_inline
from .parser_operands import Nested, scan_operands, split_top_level
from .parser_resolve import DONE, _resolve_computation, _resolve_module, unique_name
from .shape_parser import ShapeError, parse_array_shape, parse_shape


@lru_cache(maxsize=None)
def _lark(strict: bool = False, with_transformer: bool = True) -> Lark:
    from .parser_deep import install, make_on_deep_attrs, on_deep_call
    from .parser_diagnostics import _diagnose_attrs
    parser = Lark(grammar_text(), parser="lalr", lexer="contextual", strict=strict,
                  transformer=_Builder() if with_transformer else None,
                  maybe_placeholders=False,
                  lexer_callbacks={"DEEP_CALL": on_deep_call,
                                   "DEEP_ATTRS": make_on_deep_attrs(_diagnose_attrs)})
    install(parser)
    return parser


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


def _attrs(tok, owner: str) -> dict:
    """The ATTRS token (all `, name=value` of one instruction) -> {name: typed value}."""
    out: dict = {}
    if tok is None:
        return out
    base = tok.start_pos
    text = tok  # a str (Token subclasses it): no copy
    pos = 0
    parse = A.parse_attr
    for m in _ATTR.finditer(text):
        if m.start() != pos:  # a value nested past the regular expression (parser_deep)
            return _attrs_from(_deep_items(text, base), owner)
        pos = m.end()
        name, value = m.group(1), m.group(2)
        if name in out or name in _CALLED:  # the uncommon cases, in full
            _attr(out, name, value, base + m.start(1), base + m.start(2), owner)
            continue
        try:
            v = parse(name, value)
        except (A.AttrError, ShapeError) as e:
            raise _err(f"attribute '{name}': {e}",
                       base + m.start(2) + getattr(e, "offset", 0)) from None
        if type(v) is list:  # instruction references: positions are per use
            for r in v:
                r.offset += base + m.start(2)
        out[name] = v
    if pos != len(text):
        return _attrs_from(_deep_items(text, base), owner)
    return out


def _deep_items(text: str, base: int):
    from .parser_deep import attr_run
    return [(name, text[v:e], base + n, base + v) for name, n, v, e in attr_run(text, 0)]


def _attrs_from(items, owner: str) -> dict:
    out: dict = {}
    for name, value, npos, vpos in items:
        _attr(out, name, value, npos, vpos, owner)
    return out


_CALLED = frozenset(A.COMPS) | frozenset(A.COMP_LISTS)


def _attr(out: dict, name: str, value: str, npos: int, vpos: int, owner: str) -> None:
    """One `name=value` into `out`, typed by its kind."""
    if name in out:
        raise _err(f"attribute '{name}' given twice on '{owner}'", npos)
    if name in _CALLED and is_inline(value):
        out[name] = inline_value(name in A.COMP_LISTS, value, vpos)
        return
    try:
        v = A.parse_attr(name, value)
    except (A.AttrError, ShapeError) as e:
        raise _err(f"attribute '{name}': {e}", vpos + getattr(e, "offset", 0)) from None
    if isinstance(v, A.CompRef):  # fresh objects (not cached): positions are per use
        v.offset += vpos
    elif isinstance(v, list):
        for r in v:
            r.offset += vpos
    out[name] = v


_ATTR_TOKENS = frozenset({"ATTRS", "DEEP_ATTRS"})


def _attr_tokens(children) -> list:
    """The trailing ATTRS / DEEP_ATTRS tokens of a rule's children (none, one or both)."""
    out = []
    for c in reversed(children[-2:]):
        if isinstance(c, Token) and c.type in _ATTR_TOKENS:
            out.insert(0, c)
        else:
            break
    return out


def _attrs_of(tokens: list, owner: str) -> dict:
    if len(tokens) < 2:
        return _attrs(tokens[0] if tokens else None, owner)
    out = _attrs(tokens[0], owner)
    for k, v in _attrs(tokens[1], owner).items():
        if k in out:
            raise _err(f"attribute '{k}' given twice on '{owner}'",
                       tokens[1].start_pos + tokens[1].index(k))
        out[k] = v
    return out


def _opt_attrs(children, owner: str) -> dict:
    return _attrs_of(_attr_tokens(children), owner)


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


def module_name_of(filename: str) -> str:
    """The name of a module without an `HloModule` header: its file's stem, made a name XLA's
    parser reads back (as XLA's name sanitizer does: other characters become `_`, and a
    leading digit gets a `_` before it)."""
    name = re.sub(r"[^\w.\-]", "_", Path(filename).stem) or "_"
    return name if re.match(r"[A-Za-z_]", name) else "_" + name


def parse_module(text: str, filename: str = "<string>") -> Module:
    """Parse HLO text.  Raises HloSyntaxError with a position on malformed input."""
    # Nested instructions and tuple literals are read recursively, up to XLA's 8,192 levels.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 8 * MAX_DEPTH))
    try:
        _check_text(text)
        _Ctx.text = text
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
        raise e.located(filename, text) from None
    finally:
        _Ctx.text = ""
        DONE.clear()
        INLINE.clear()
        sys.setrecursionlimit(limit)


def parse_file(path: str) -> Module:
    """Parse an HLO file (`-`: standard input), read as the CLI reads it."""
    from .reader import read_hlo
    text, name = read_hlo(path)
    return parse_module(text, name)
