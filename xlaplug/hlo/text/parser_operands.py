"""The operand list of `opcode(...)`, read as XLA's parser reads it.

An operand is, after an optional shape (XLA's default print writes one before every operand:
`f32[2,4]{1,0} %x`, `(f32[], u32[]) %copy-start`):
  - an instruction name, `%x`;
  - a compact get-tuple-element, `%p0#1#0` (element 0 of element 1 of `p0`): the parser adds
    the get-tuple-elements, named `p0_1`, `p0_1_0`, as XLA does;
  - a nested instruction, `f32[10] parameter(0)` or `multiply(a, b)` (the shape may be left
    out and is then inferred): it is added to the computation before its user, named
    `<opcode>.anon`.  Nested instructions take no attributes (XLA: a comma could not tell an
    attribute from the next operand).
Commas split operands only outside brackets, parentheses, braces and strings, so a shape's
own commas (`f32[2,4]{1,0}`) stay in it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .parser_state import _err, current_parse

_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = {")", "]", "}"}
_ARRAY_SHAPE = re.compile(r"[a-z][a-z0-9]*\[[^\]]*\](?:\{[^}]*\})?")
_BUFFER_SHAPE = re.compile(r"b\(\s*[a-z][a-z0-9]*\[[^\]]*\](?:\{[^}]*\})?\s*\)")
_NAME = re.compile(r"%?([A-Za-z_][\w.\-]*)((?:#[^\s#,()]*)*)")
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_OPCODE = re.compile(r"([A-Za-z_][\w\-]*)\s*\(")


@dataclass(slots=True)
class NameRef:
    """A named operand; `gte` lists compact get-tuple-element indices (`%p0#1#0`)."""
    name: str
    pos: int
    gte: tuple[int, ...] = ()
    shape_text: str | None = None


@dataclass
class Nested:
    """A nested instruction operand, before it is built: its text pieces and positions."""
    shape_text: str | None
    shape_pos: int
    opcode: str
    opcode_pos: int
    body: str
    body_pos: int


def split_top_level(body: str) -> list[tuple[str, int]]:
    """`body` cut at commas outside any bracket or string -> (part, offset of part)."""
    parts, depth, start, i, n = [], 0, 0, 0, len(body)
    while i < n:
        c = body[i]
        if c == '"':
            i += 1
            while i < n and body[i] != '"':
                i += 2 if body[i] == "\\" else 1
        elif c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif c == "," and depth == 0:
            parts.append((body[start:i], start))
            start = i + 1
        i += 1
    parts.append((body[start:], start))
    return parts


def _matching(text: str, i: int) -> int:
    """Index just past the bracket group opening at text[i] (strings skipped)."""
    stack, n = [], len(text)
    while i < n:
        c = text[i]
        if c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c in _OPEN:
            stack.append(_OPEN[c])
        elif c in _CLOSE:
            if not stack or stack.pop() != c:
                return -1
            if not stack:
                return i + 1
        i += 1
    return -1


# Operand lists with brackets (shapes, nested instructions) are cut with a map of each
# bracket's partner, made once per instruction in one pass; nested instructions reuse it, so
# an operand nested N deep costs O(N), not O(N^2), however deep (parser_limits.py bounds it at XLA's 500).
_BRACKET = re.compile(r'"(?:[^"\\\n]|\\.)*"|[()\[\]{}]')
_SPECIAL = re.compile(r'[,(\[{"]')
def _partners(body: str, pos: int) -> dict:
    """The bracket map of the instruction text around `body` (at absolute `pos`); the last
    one made is kept in the parse's state (ParseState.region), for nested operand lists."""
    state = current_parse()
    start, text, close = state.region
    off = pos - start
    if 0 <= off and off + len(body) <= len(text) and text.startswith(body, off):
        return close  # a nested operand list inside the text mapped last
    close, stack = {}, []
    for m in _BRACKET.finditer(body):
        c = m.group(0)
        if c in _OPEN:
            stack.append(m.start())
        elif c in _CLOSE:
            if stack:
                close[pos + stack.pop()] = pos + m.start()
    state.region = (pos, body, close)
    return close


def _split_operands(body: str, pos: int, close: dict) -> list[tuple[str, int]]:
    """split_top_level through the bracket map: jumps over groups instead of reading them."""
    parts, start, i, n = [], 0, 0, len(body)
    search = _SPECIAL.search
    while True:
        m = search(body, i)
        if m is None:
            break
        j, c = m.start(), m.group(0)
        if c == ",":
            parts.append((body[start:j], start))
            start = i = j + 1
        elif c == '"':
            s = _STRING.match(body, j)
            i = s.end() if s else j + 1
        else:
            k = close.get(pos + j)
            if k is None:  # never closed: the rest is one part
                break
            i = k - pos + 1
    parts.append((body[start:], start))
    return parts


def _group_end(text: str, i: int, pos: int, close: dict) -> int:
    """Index in `text` (at absolute `pos`) just past the group opening at text[i], or -1."""
    k = close.get(pos + i)
    return -1 if k is None else k - pos + 1


def _leading_shape(text: str) -> int:
    """Length of the shape `text` starts with (array or tuple), 0 if none."""
    if text.startswith("("):
        end = _matching(text, 0)
        # A tuple shape is followed by a name or an opcode; `(` alone could not be an operand.
        return end if end > 0 else 0
    m = _ARRAY_SHAPE.match(text) or _BUFFER_SHAPE.match(text)
    return m.end() if m else 0


def parse_operand(part: str, pos: int, close: dict | None = None):
    """One operand's text (stripped) at absolute `pos` -> NameRef or Nested."""
    if close is None:
        close = _partners(part, pos)
    n = _group_end(part, 0, pos, close) if part.startswith("(") else _leading_shape(part)
    n = max(n, 0)
    shape_text = part[:n] if n else None
    rest = part[n:].lstrip()
    rest_pos = pos + len(part) - len(rest)
    if n and rest_pos == pos + n and rest:  # a shape must be followed by a space
        raise _err(f"malformed operand '{part[:30]}': expected an instruction name", pos)
    m = _NAME.fullmatch(rest)
    if m:
        gte = []
        for idx in m.group(2).split("#")[1:]:
            if not re.fullmatch(r"-?\d+", idx):
                raise _err(f"compact get-tuple-element '{rest}' expects integer indices, got "
                           f"'#{idx}'", rest_pos + rest.index("#"))
            gte.append(int(idx))
        return NameRef(m.group(1), rest_pos, tuple(gte), shape_text)
    m = _OPCODE.match(rest)
    if m and _group_end(rest, m.end() - 1, rest_pos, close) == len(rest):
        return Nested(shape_text, pos, m.group(1), rest_pos, rest[m.end():-1], rest_pos + m.end())
    what = "an instruction name or a nested instruction"
    raise _err(f"malformed operand '{part.strip()[:30]}': expected {what}", pos)


_PLAIN_NAME = re.compile(r"\s*(%?)([A-Za-z_][\w.\-]*)\s*")


def scan_operands(body: str, pos: int) -> list:
    """The operands of `opcode(body)`, body starting at absolute `pos`: (name, position) for
    a plain name, NameRef for one with a shape or compact get-tuple-element, Nested for a
    nested instruction."""
    if not body.strip():
        return []
    # Plain names only (what jax prints), the fast path: (name, position) pairs.
    out, start = [], 0
    match = _PLAIN_NAME.fullmatch
    for part in body.split(","):
        m = match(part)
        if m is None:
            break
        out.append((m.group(2), pos + start + m.start(1)))
        start += len(part) + 1
    else:
        return out
    out = []
    close = _partners(body, pos)
    for part, off in _split_operands(body, pos, close):
        stripped = part.strip()
        if not stripped:
            raise _err("empty operand in operand list (a stray ',')", pos + off)
        out.append(parse_operand(stripped, pos + off + part.index(stripped[0]), close))
    return out
