"""The common path of HLO text read without lark: the grammar's structure (hlo.lark) walked
by hand with the grammar's own terminal expressions, feeding the same rule callbacks.

Why: lark's lexer and LALR loop cost about half of a parse (three or four tokens an
instruction, each a Token, a lexer state lookup and a parser step in Python), and the text
jax and XLA print takes one path through the grammar: header, stack tables, computations of
`name = shape opcode(operands), attributes` lines.  This walk reads that path and nothing
else; wherever the text leaves it (a construct nested past the terminals' expressions, a
keyword used as a name, anything unexpected) or a callback raises, `fast_items` returns
None and the caller parses the whole text with lark, so every diagnostic, and every
module that is not on the path, is exactly lark's.  On the path, the callbacks receive the
tokens lark would have given them (type, text, offset, line, column), so the module built
is the same: tests/test_parser_fast.py compares both on every corpus we have.  The usual
instruction line (`common_line`: an operand list of plain names, attributes on the same
line) skips the tokens: parser_instr.line_instruction builds it from the match, as the
`instruction` callback would.  lark itself is not imported on this path (its terminals come
from the stored tables, parser_tables.stored_terminals).
"""
from __future__ import annotations

import re

from .parser_grammar import _ATTR
from .parser_instr import line_instruction

_SKIP = re.compile(r"(?:\s+|//[^\n]*|/\*(?:.|\n)*?\*/)*")  # %ignore: whitespace, comments
_WORD_END = re.compile(r"[^\w.\-]")
_BLANKS = re.compile(r"[ \t]*")


class Token(str):
    """A token as lark gives it to the callbacks: its text, with its terminal's name, its
    offset, line and column (lark is not imported on this path)."""

    def __new__(cls, kind: str, value: str, start_pos: int, line: int, column: int):
        tok = super().__new__(cls, value)
        tok.type, tok.start_pos, tok.line, tok.column = kind, start_pos, line, column
        return tok


class _OffPath(Exception):
    """The text leaves the common path here: lark reads it."""


class _Walk:
    def __init__(self, text: str, terminals: dict, builder):
        self.text, self.t, self.b = text, terminals, builder
        self.line_rx = terminals["_LINE"]
        self.head_rx = terminals["_HEAD"]
        self.pos, self.line, self.line_start = 0, 1, 0
        self.skip()

    # ---- position ---------------------------------------------------------------------
    def advance(self, end: int) -> None:
        text, pos = self.text, self.pos
        n = text.count("\n", pos, end)
        if n:
            self.line += n
            self.line_start = text.rfind("\n", pos, end) + 1
        self.pos = end

    def skip(self) -> None:
        end = _SKIP.match(self.text, self.pos).end()
        if end != self.pos:
            self.advance(end)

    def token(self, kind: str) -> Token | None:
        """The terminal `kind` at the position (then past it and what lark ignores)."""
        m = self.t[kind].match(self.text, self.pos)
        if m is None:
            return None
        pos = self.pos
        tok = Token(kind, m.group(0), pos, self.line, pos - self.line_start + 1)
        self.advance(m.end())
        self.skip()
        return tok

    def literal(self, s: str) -> bool:
        if self.text.startswith(s, self.pos):
            self.advance(self.pos + len(s))
            self.skip()
            return True
        return False

    def keyword(self, word: str) -> Token | None:
        """`word` as lark's keyword terminal: the whole name at the position is `word`."""
        text, pos = self.text, self.pos
        if not text.startswith(word, pos):
            return None
        end = pos + len(word)
        if end < len(text) and not _WORD_END.match(text, end):
            return None
        tok = Token(word, word, pos, self.line, pos - self.line_start + 1)
        self.advance(end)
        self.skip()
        return tok

    def peek(self, s: str) -> bool:
        return self.text.startswith(s, self.pos)

    # ---- the grammar's rules ----------------------------------------------------------
    def attrs(self) -> list:
        """(ATTRS)?: a run the ATTRS expression stops short in is DEEP_ATTRS: lark's."""
        if not self.peek(","):
            return []
        tok = self.token("ATTRS")
        if tok is None or self.peek(","):
            raise _OffPath
        return [tok]

    def module(self) -> list:
        items: list = []
        if self.keyword("HloModule"):
            name = self.token("NAME")
            if name is None:
                raise _OffPath
            self.literal(":")
            items.append(self.b.header([name] + self.attrs()))
        found = []
        while self.pos < len(self.text):
            found.append(self.item())
        if found:
            items.append(found)
        return self.b.start(items)

    def item(self):
        table = self.token("TABLE_NAME")
        if table is not None:
            if not self.text[table.start_pos + len(table):table.start_pos + len(table) + 1].isspace():
                raise _OffPath  # `FileNamesX`: lark's lexer decides
            rows = []
            while True:
                num = self.token("INT")
                if num is None:
                    break
                value = self.token("STRING") if self.peek('"') else self.token("BRACED")
                if value is None:
                    raise _OffPath
                rows.append(self.b.table_row([num, value]))
            return self.b.stack_table([table] + ([rows] if rows else []))
        return self.computation()

    def computation(self):
        children: list = []
        entry = self.keyword("ENTRY")
        if entry is not None:
            children.append(entry)
        name = self.token("NAME")
        if name is None or name in ("ENTRY", "HloModule", "ROOT"):
            raise _OffPath
        children.append(name)
        if self.literal("("):
            children.append(self.signature())
        if not self.literal("{"):
            raise _OffPath
        instrs = []
        while not self.literal("}"):
            if self.pos >= len(self.text):
                raise _OffPath
            ins = self.common_line()
            instrs.append(ins if ins is not None else self.instruction())
        if instrs:
            children.append(instrs)
        return self.b.computation(children + self.attrs())

    def signature(self):
        params = []
        while not self.literal(")"):
            if params and not self.literal(","):
                raise _OffPath
            tok = self.token("PARAM_NAME")
            if tok is None:
                raise _OffPath
            params.append(self.b.param([tok, self.shape()]))
        if not self.literal("->"):
            raise _OffPath
        return self.b.signature(([params] if params else []) + [self.shape()])

    def shape(self):
        shape = self.optional_shape()
        if shape is None:
            raise _OffPath
        return shape

    def optional_shape(self):
        tok = self.token("BUFFER_SHAPE") or self.token("SHAPE")
        if tok is not None:
            return tok
        if not self.literal("("):
            return None
        shapes = []
        while not self.literal(")"):
            if shapes and not self.literal(","):
                raise _OffPath
            shapes.append(self.shape())
        return self.b.tuple_shape([shapes] if shapes else [])

    def common_line(self):
        """The instruction at the position when it is one line of head_pattern and
        attributes (most of what jax and XLA print), else None (`instruction` reads it)."""
        text, pos = self.text, self.pos
        m = self.head_rx.match(text, pos)
        if m is None:
            return None
        end = text.find("\n", pos)
        if end < 0:
            end = len(text)
        q = m.end()
        attrs = []
        if q < end and text[q] == ",":
            match = _ATTR.match
            while q < end and text[q] == ",":  # each `_ATTR` starts with its comma
                a = match(text, q)
                if a is None:
                    break
                attrs.append(a)
                q = a.end()
            if q > end:
                return None
            if q < end:
                q = _BLANKS.match(text, q).end()
            start = attrs[0].start() if attrs else q
            if text.find("device_ids", start, q) >= 0 and text.find("mesh", start, q) >= 0:
                return None  # a mesh's device_ids: parser_attrs._attrs joins them
        if q != end:
            return None
        ins = line_instruction(m, attrs, self.line, self.line_start)
        after = _SKIP.match(text, end).end()  # self.skip(), from the line's end
        newlines = text.count("\n", end, after)
        if newlines:
            self.line += newlines
            self.line_start = text.rfind("\n", end, after) + 1
        self.pos = after
        return ins

    def instruction(self):
        m = self.line_rx.match(self.text, self.pos)
        if m is not None and "\n" not in m.group(0):  # the usual form, in one match
            return self.one_line(m)
        children: list = []
        name = self.token("INSTR_NAME")
        if name is None:
            root = self.keyword("ROOT")
            name = self.token("INSTR_NAME") if root is not None else None
            if name is None:
                raise _OffPath
            children.append(root)
        children.append(name)
        shape = self.optional_shape()
        if shape is not None:
            children.append(shape)
        call = self.token("OPCALL")
        if call is None:
            raise _OffPath  # nested past OPCALL's expression (DEEP_CALL), or not a call
        children.append(call)
        return self.b.instruction(children + self.attrs())


    def one_line(self, m: re.Match):
        """The instruction `line_rx` matched on one line: the tokens `instruction` would
        read one by one."""
        line, start = self.line, self.line_start
        children = []
        for kind, group in (("ROOT", "root"), ("INSTR_NAME", "name"), ("BUFFER_SHAPE", "buffer"),
                            ("SHAPE", "shape"), ("OPCALL", "call"), ("ATTRS", "attrs")):
            value = m.group(group)
            if value is None:
                continue
            at = m.start(group)
            if kind == "ROOT":
                value = "ROOT"
            children.append(Token(kind, value, at, line, at - start + 1))
        self.advance(m.end())
        self.skip()
        return self.b.instruction(children)


def fast_items(text: str, terminals: dict, builder) -> list | None:
    """What lark's `start` rule would return for `text`, or None when the text is off the
    common path or a callback raised (the caller then parses it with lark, which gives the
    diagnostics).  `terminals`: the grammar's terminal expressions by name, compiled."""
    try:
        return _Walk(text, terminals, builder).module()
    except Exception:  # noqa: BLE001 - off the path, or an error lark will report itself
        return None
