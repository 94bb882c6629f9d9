"""A position in an attribute value, for the structured kinds (sharding, aliasing, result
accuracy) that are read token by token; its errors carry offsets into the value."""
from __future__ import annotations

import re

from .attr_text import _INT, AttrError, _short


class _Cursor:
    """A position in an attribute value, for the structured kinds (errors carry offsets)."""

    _WORD = re.compile(r"[A-Za-z_][\w.\-]*")
    _NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|inf|nan)")

    def __init__(self, text: str, what: str):
        self.s, self.i, self.what = text, 0, what

    def ws(self) -> None:
        s, n = self.s, len(self.s)
        while self.i < n:
            if s[self.i].isspace():
                self.i += 1
            elif s.startswith("/*", self.i):
                j = s.find("*/", self.i + 2)
                if j < 0:
                    raise AttrError("unterminated /* comment", self.i)
                self.i = j + 2
            else:
                break

    def at_end(self) -> bool:
        self.ws()
        return self.i >= len(self.s)

    def pos(self) -> int:
        """Where the next token starts."""
        self.ws()
        return self.i

    def peek(self, tok: str) -> bool:
        self.ws()
        return self.s.startswith(tok, self.i)

    def eat(self, tok: str) -> bool:
        if self.peek(tok):
            self.i += len(tok)
            return True
        return False

    def found(self) -> str:
        self.ws()
        if self.i >= len(self.s):
            return "the end of the value"
        m = self._WORD.match(self.s, self.i) or _INT.match(self.s, self.i)
        return f"'{_short(m.group(0) if m else self.s[self.i])}'"

    def err(self, msg: str) -> AttrError:
        return AttrError(msg, self.i)

    def expect(self, tok: str, context: str = "") -> None:
        if not self.eat(tok):
            raise self.err(f"expected '{tok}'{context}, found {self.found()}")

    def int(self, what: str = "an integer") -> int:
        self.ws()
        m = _INT.match(self.s, self.i)
        if not m:
            raise self.err(f"expected {what}, found {self.found()}")
        self.i = m.end()
        return int(m.group(0))

    def number(self, what: str = "a number") -> float:
        self.ws()
        m = self._NUMBER.match(self.s, self.i)
        if not m:
            raise self.err(f"expected {what}, found {self.found()}")
        self.i = m.end()
        return float(m.group(0))

    def word(self, what: str = "a name") -> str:
        self.ws()
        m = self._WORD.match(self.s, self.i)
        if not m:
            raise self.err(f"expected {what}, found {self.found()}")
        self.i = m.end()
        return m.group(0)

    def ints(self, open_: str, close: str, what: str) -> tuple[int, ...]:
        self.expect(open_, f" to start {what}")
        out = []
        if not self.eat(close):
            while True:
                out.append(self.int(f"an integer in {what}"))
                if self.eat(close):
                    break
                self.expect(",", f" or '{close}' in {what}")
        return tuple(out)

    def shape_index(self) -> tuple[int, ...]:
        return self.ints("{", "}", "a shape index")

    def braced(self) -> str:
        """A balanced `{...}` (strings respected), returned verbatim."""
        self.ws()
        start, depth, s, n = self.i, 0, self.s, len(self.s)
        i = start
        while i < n:
            c = s[i]
            if c == '"':
                j = i + 1
                while j < n and s[j] != '"':
                    j += 2 if s[j] == "\\" else 1
                i = j
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    self.i = i + 1
                    return s[start:i + 1]
            i += 1
        raise self.err("unbalanced '{'")

    def done(self) -> None:
        if not self.at_end():
            raise self.err(f"unexpected {self.found()} after the value")
