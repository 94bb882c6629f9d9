"""Deep nesting of brackets past what the lexer's regular expressions take.

The grammar's coarse tokens are regular expressions, which nest a fixed number of levels:
`opcode(operands)` five parentheses, an attribute value eight braces.  That covers what XLA
and jax print and keeps the lexer fast.  Deeper text lexes as the start of a token only --
DEEP_CALL (`opcode(`) or DEEP_ATTRS (the `,` of an attribute run) -- and the wrapper here
completes it by scanning brackets in Python, then hands the parser the full OPCALL or ATTRS
token, so the rest of the parser never sees the difference.  Parentheses (shapes, operand
lists) are bounded before parsing at XLA's 500 levels (parser_limits.py); braces (JSON
configs, which XLA's lexer reads without recursing) here, at 8,192 levels: past it, an
error at the bracket that goes too deep.
"""
from __future__ import annotations

import re

from lark import Token

from ..errors import HloSyntaxError, position_of
from .parser_state import StateView

MAX_DEPTH = 8192
_STR = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_GAP = re.compile(r"(?:\s|/\*(?:[^*]|\*(?!/))*\*/)*")
_NAME = re.compile(r"[A-Za-z_][\w.\-]*")
_PLAIN = re.compile(r'[^\s,{}"\[\]()]+')
# A space continues a value only before a group or a number (custom-call's `literal=`).
_SPACE_THEN = re.compile(r"[ \t]+(?=[{(\d]|-[\d.i]|(?:true|false|inf|nan)\b)")
_OPEN = {"(": ")", "[": "]", "{": "}"}


def _too_deep(text: str, pos: int) -> HloSyntaxError:
    line, col = position_of(text, pos)
    return HloSyntaxError(f"nesting deeper than {MAX_DEPTH} levels",
                          line=line, column=col)


def group_end(text: str, i: int, pairs: str = "()", limit: int = MAX_DEPTH) -> int:
    """Index just past the group opening at text[i] (counting only the `pairs` brackets,
    skipping strings); -1 if it is never closed.  Raises past `limit` levels."""
    opener, closer = pairs
    depth, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            m = _STR.match(text, i)
            if m is None:
                return -1
            i = m.end()
            continue
        if c == opener:
            depth += 1
            if depth > limit:
                raise _too_deep(text, i)
        elif c == closer:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return -1


def attr_run(text: str, i: int) -> list[tuple[str, int, int, int]]:
    """The `, name=value` run starting at the ',' at text[i]: (name, name start, value start,
    value end) per attribute, in absolute offsets; [] when text[i:] is not one."""
    out = []
    n = len(text)
    while i < n and text[i] == ",":
        j = _GAP.match(text, i + 1).end()
        m = _NAME.match(text, j)
        if m is None:
            break
        k = _GAP.match(text, m.end()).end()
        if k >= n or text[k] != "=":
            break
        v = _GAP.match(text, k + 1).end()
        end = _value_end(text, v)
        if end <= v:
            break
        out.append((m.group(0), m.start(), v, end))
        i = end
    return out


def _value_end(text: str, i: int) -> int:
    n = len(text)
    while i < n:
        c = text[i]
        if c in "{(":
            e = group_end(text, i, "{}" if c == "{" else "()")
            if e < 0:
                return i
            i = e
        elif c == "[":
            e = text.find("]", i)
            if e < 0:
                return i
            i = e + 1
        elif c == '"':
            m = _STR.match(text, i)
            if m is None:
                return i
            i = m.end()
        else:
            m = _PLAIN.match(text, i) or _SPACE_THEN.match(text, i)
            if m is None:
                return i
            i = m.end()
    return i


# The lexer state of the parse under way (the callbacks below extend tokens through it); an
# inline computation's nested parse saves and restores it (parser_inline).
CURRENT = StateView("deep")  # the current parse's (parser_state.ParseState)


def install(lark_parser) -> None:
    """Record each parse's lexer state for the token callbacks (no per-token cost)."""
    lexer = lark_parser.parser.lexer
    base = lexer.lex

    def lex(lexer_state, parser_state):
        CURRENT[0] = lexer_state
        return base(lexer_state, parser_state)

    lexer.lex = lex


def _text(lexer_state) -> str:
    t = lexer_state.text
    return t.text if hasattr(t, "text") else t


def on_deep_call(tok: Token) -> Token:
    """DEEP_CALL `opcode(`: the whole balanced `opcode(...)` as an OPCALL token."""
    state = CURRENT[0]
    text = _text(state)
    # The operand list's own parentheses are not a level: XLA counts the operand lists,
    # tuples and shapes inside it.
    end = group_end(text, tok.end_pos - 1, limit=MAX_DEPTH + 1)
    if end < 0:
        line, col = position_of(text, tok.end_pos - 1)
        word = tok.value[:-1].rstrip()
        raise HloSyntaxError(f"unbalanced '(': the operand list of '{word}' is never closed",
                             line=line, column=col)
    return _grown(tok, "OPCALL", text, end, state)


def make_on_deep_attrs(diagnose_attrs):
    """The callback for DEEP_ATTRS, the ',' of an attribute run the ATTRS regex could not
    take (a value nested past it): the run is completed here; `diagnose_attrs(text, pos)`
    explains one that is malformed.  (The parser accepts ATTRS DEEP_ATTRS, so a run the
    regex stops short in needs no check on every ATTRS token.)"""
    def on_deep_attrs(tok: Token) -> Token:
        state = CURRENT[0]
        text = _text(state)
        run = attr_run(text, tok.start_pos)
        if not run:
            err = diagnose_attrs(text, tok.start_pos)
            if err is None:
                m = re.compile(r",\s*([A-Za-z_][\w.\-]*)\s*=").match(text, tok.start_pos)
                what = f"attribute '{m.group(1)}'" if m else "an attribute"
                line, col = position_of(text, tok.start_pos)
                err = HloSyntaxError(f"cannot read the value of {what} (a string that does not "
                                     f"end on its line, or unbalanced brackets)", line=line,
                                     column=col)
            raise err
        return _grown(tok, "DEEP_ATTRS", text, run[-1][3], state)
    return on_deep_attrs


def _grown(tok: Token, kind: str, text: str, end: int, lexer_state) -> Token:
    """`tok` extended to text[tok.start_pos:end], the lexer moved past it."""
    lexer_state.line_ctr.feed(text[tok.end_pos:end])
    new = Token(kind, text[tok.start_pos:end], tok.start_pos, tok.line, tok.column)
    lc = lexer_state.line_ctr
    new.end_line, new.end_column, new.end_pos = lc.line, lc.column, lc.char_pos
    return new
