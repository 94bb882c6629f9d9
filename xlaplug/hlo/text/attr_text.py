"""Attribute value text: the error type, quoting and unquoting HLO strings (C escapes),
and splitting a value at top-level separators."""
from __future__ import annotations

import json
import re


class AttrError(ValueError):
    """A malformed attribute value; `offset` is relative to the start of the value text."""

    def __init__(self, message: str, offset: int = 0):
        super().__init__(message)
        self.offset = offset


_INT = re.compile(r"-?\d+")
_STRING = r'"(?:[^"\\\n]|\\.)*"'
_NAME = re.compile(r"%?[A-Za-z_][\w.\-]*")
_C_ESCAPES = {"n": 10, "t": 9, "r": 13, "a": 7, "b": 8, "f": 12, "v": 11, "\\": 92, "'": 39,
              '"': 34, "?": 63}


def _c_unescape(body: str) -> str:
    """C escapes (absl::CUnescape: \\n, \\", octal \\303, \\xNN, \\uNNNN) -> text.  Octal and
    hex escapes are bytes (CEscape writes UTF-8 that way), so they are decoded as UTF-8."""
    out = bytearray()
    i, n = 0, len(body)
    while i < n:
        c = body[i]
        if c != "\\" or i + 1 == n:
            out += c.encode("utf-8")
            i += 1
            continue
        e = body[i + 1]
        if e in _C_ESCAPES:
            out.append(_C_ESCAPES[e])
            i += 2
        elif e in "01234567":
            m = re.match(r"[0-7]{1,3}", body[i + 1:i + 4])
            out.append(int(m.group(0), 8) & 0xFF)
            i += 1 + len(m.group(0))
        elif e == "x" and re.match(r"[0-9a-fA-F]{1,2}", body[i + 2:i + 4]):
            m = re.match(r"[0-9a-fA-F]{1,2}", body[i + 2:i + 4])
            out.append(int(m.group(0), 16))
            i += 2 + len(m.group(0))
        elif e in "uU" and re.fullmatch(r"[0-9a-fA-F]{4}", body[i + 2:i + 6]):
            out += chr(int(body[i + 2:i + 6], 16)).encode("utf-8", "surrogatepass")
            i += 6
        else:  # unknown escape: keep it as written
            out += ("\\" + e).encode("utf-8")
            i += 2
    return out.decode("utf-8", "replace")


def unquote(s: str) -> str:
    """A quoted HLO string -> its text.  HLO strings use C escapes (absl::CEscape)."""
    body = s[1:-1]
    if "\\" not in body:
        return body
    try:
        return json.loads(s)
    except ValueError:
        return _c_unescape(body)


_QUOTE_RX = re.compile(r'[\\"\x00-\x1f\x7f]')
_QUOTE_MAP = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def quote(s: str) -> str:
    """Text -> a quoted HLO string that XLA's lexer reads back (one line, C escapes)."""
    if not _QUOTE_RX.search(s):
        return '"' + s + '"'
    return '"' + _QUOTE_RX.sub(lambda m: _QUOTE_MAP.get(m.group(0), f"\\{ord(m.group(0)):03o}"),
                               s) + '"'


def _braced_body(text: str, what: str) -> str:
    t = text.strip()
    if not (t.startswith("{") and t.endswith("}")):
        raise AttrError(f"expected {what} in braces, got '{_short(t)}'")
    return t[1:-1].strip()


def _short(t: str) -> str:
    return t if len(t) < 40 else t[:37] + "..."


def _int(t: str, what: str = "an integer") -> int:
    t = t.strip()
    if not _INT.fullmatch(t):
        raise AttrError(f"expected {what}, got '{_short(t)}'")
    return int(t)


def split_top(body: str, sep: str = ",") -> list[str]:
    """Split on `sep` outside of braces, brackets, parens and strings."""
    return [p for p, _ in split_top_at(body, sep)]


def split_top_at(body: str, sep: str = ",") -> list[tuple[str, int]]:
    """split_top, with the offset of each (stripped) part in `body`."""
    out, depth, cur, i, n = [], 0, 0, 0, len(body)

    def add(a, b):
        part = body[a:b]
        stripped = part.strip()
        if stripped:
            out.append((stripped, a + len(part) - len(part.lstrip())))

    while i < n:
        c = body[i]
        if c == '"':
            j = i + 1
            while j < n and body[j] != '"':
                j += 2 if body[j] == "\\" else 1
            i = j + 1
            continue
        if c in "{[(":
            depth += 1
        elif c in "}])":
            depth -= 1
        elif depth == 0 and (c == sep or (sep == " " and c.isspace())):
            add(cur, i)
            cur = i + 1
        i += 1
    add(cur, n)
    return out
