"""HLO text -> Module.

The lark LALR parser (hlo.lark) runs with the transformer applied inside the parser, so no
parse tree is ever built: each rule callback builds IR directly.  Names (operands, called
computations, control predecessors) are resolved once a computation, then the module, is
complete, so forward references work as they do in XLA's parser.

Name resolution lives in parser_resolve, syntax-error diagnosis in parser_diagnostics, the
state of a parse in parser_state, and the grammar text with its regular expressions in
parser_grammar.
"""
from __future__ import annotations

import re
import sys
from functools import lru_cache
from pathlib import Path

from .attr_config import RESULT_ACCURACY_OPS
from .attr_placement import misplaced_attribute
from ..errors import HloSyntaxError, position_of
from ..ir import Computation, Module, Shape
from .parser_diagnostics import _syntax_error
from .parser_grammar import (_ATTR, _NAME_RX, BRACE_DEPTH, grammar_text,  # noqa: F401
                             head_pattern, line_pattern)
from .parser_attrs import _attr_tokens, _attrs, _attrs_of, _opt_attrs
from .parser_limits import RECURSION_ROOM, check_limits
from .parser_fast import fast_items
from .parser_inline import INLINE
from .parser_instr import _make_instruction, _shape_at, _shape_of, _with_nested  # noqa: F401
from .parser_resolve import DONE, _resolve_computation, _resolve_module
from .parser_state import _err, at_offset, parse_state


@lru_cache(maxsize=None)
def _lark(strict: bool = False, with_transformer: bool = True):
    """The lark parser (lark imported here: the common path, parser_fast, reads without it)."""
    from lark import Lark
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
    """The grammar's terminal expressions by name, compiled (for parser_fast): read from the
    stored tables, so the common path never imports lark; from lark's own grammar when they
    are stale."""
    from .parser_tables import stored_terminals
    patterns = stored_terminals(grammar_text())
    if patterns is None:
        patterns = {t.name: t.pattern.to_regexp() for t in _lark().terminals}
    out = {name: re.compile(rx) for name, rx in patterns.items()}
    out["_LINE"] = line_pattern(out)
    out["_HEAD"] = head_pattern(out)
    return out


class _Builder:
    """Rule callbacks, run by the LALR parser as it reduces (lark takes any object with a
    method per rule as its transformer), and by parser_fast.  A token is a `str` with
    `type`, `start_pos`, `line` and `column`: lark's Token, or parser_fast's."""

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
        has_shape = not (isinstance(children[i + 1], str) and children[i + 1].type == "OPCALL")
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

    def computation(self, children):
        i = 0
        is_entry = False
        if isinstance(children[0], str) and children[0].type == "ENTRY":
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
# The ASCII characters _CONTROL does not match: deleted from an ASCII text's bytes, they
# leave its control characters -- found at C speed (1 ms for 2.4 MB where the expression's
# search takes 5); the expression then says where the first one is.
_NOT_CONTROL = bytes(c for c in range(128) if not _CONTROL.match(chr(c)))


def _check_text(text: str) -> None:
    if not text.strip():
        raise HloSyntaxError("empty module: no HloModule header and no computations", line=1,
                             column=1)
    m = (_CONTROL.search(text)
         if not text.isascii() or text.encode("ascii").translate(None, _NOT_CONTROL) else None)
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
            from lark.exceptions import UnexpectedInput
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
