"""Shape text -> Shape.  Shapes repeat constantly in a module, so results are cached."""
from __future__ import annotations

import re
from dataclasses import replace
from functools import lru_cache

from ..dtypes import ELEMENT_TYPES, OPAQUE_TYPES
from ..ir import UNBOUNDED, Layout, Shape

_ARRAY = re.compile(r"\s*([a-z][a-z0-9]*)\[([^\]]*)\](\{[^}]*\})?\s*")
_KNOWN_TYPES = ELEMENT_TYPES | OPAQUE_TYPES
# After the colon: dim level types D(D,C,S,H with optional + and ~, as XLA's parser takes them),
# tiles, element size, memory space, ...
_LAYOUT_EXTRA = re.compile(
    r"(?:D\((?:[DCSH]\+?~?(?:,[DCSH]\+?~?)*)?\))?(?:T(?:\([\d,*\s]*\))+)?(?:L\(\d+\))?(?:#\(u\d+\))?(?:\*\(u\d+\))?"
    r"(?:E\(\d+\))?(?:S\(\d+\))?(?:SC(?:\(\d+:[\d,\s]*\))+)?(?:M\(\d+\))?")


class ShapeError(ValueError):
    def __init__(self, message: str, offset: int = 0):
        super().__init__(message)
        self.offset = offset


def _layout_numbers(m2m: str, layout_text: str, text: str) -> tuple[int, ...]:
    """The minor-to-major list of a layout: plain dimension numbers, as XLA's parser reads
    them (no sign: `{-0}` and `{+1}` are not layouts, though int() would take them)."""
    if not m2m:
        return ()
    parts = [x.strip() for x in m2m.split(",")]
    if not all(x.isascii() and x.isdigit() for x in parts):
        raise ShapeError(f"malformed layout '{layout_text}' in shape '{text.strip()}' "
                         f"(expected minor-to-major dimension numbers like {{1,0}})")
    return tuple(int(x) for x in parts)


def _ascii_number(d: str) -> bool:
    return d.isascii() and d.isdigit()


@lru_cache(maxsize=4096)
def parse_array_shape(text: str) -> Shape:
    m = _ARRAY.fullmatch(text)
    if not m:
        raise ShapeError(f"malformed shape '{text.strip()}' (expected a shape like f32[2,3] "
                         f"or f32[2,3]{{1,0}})")
    etype, dims_text, layout_text = m.groups()
    if etype not in _KNOWN_TYPES:
        raise ShapeError(f"unknown element type '{etype}' in shape '{text.strip()}'")
    dims, dyn = [], []
    if dims_text.strip():
        for d in dims_text.split(","):
            d = d.strip()
            if d == "?":
                dims.append(UNBOUNDED)
                dyn.append(True)
            elif d.startswith("<="):
                if not _ascii_number(d[2:].strip()):
                    raise ShapeError(f"malformed dimension '{d}' in shape '{text.strip()}'")
                dims.append(int(d[2:]))
                dyn.append(True)
            elif _ascii_number(d):  # XLA's lexer: ASCII 0-9 only (int() takes any script's)
                dims.append(int(d))
                dyn.append(False)
            else:
                raise ShapeError(f"malformed dimension '{d}' in shape '{text.strip()}'")
    if etype in OPAQUE_TYPES and dims:
        raise ShapeError(f"{etype} shape takes no dimensions")
    layout = None
    if layout_text is not None:
        body = layout_text[1:-1]
        m2m_text, colon, extra = body.partition(":")
        m2m = m2m_text.strip()
        minor = _layout_numbers(m2m, layout_text, text)
        if sorted(minor) != list(range(len(dims))) and not (etype in OPAQUE_TYPES and not minor):
            raise ShapeError(f"layout {layout_text} is not a permutation of the "
                             f"{len(dims)} dimensions of shape '{text.strip()}'")
        if colon and not _LAYOUT_EXTRA.fullmatch(extra.strip()):
            what = ("dim level types D(..) of D, C, S or H" if extra.strip().startswith("D(")
                    else "tiles T(..), memory space S(n), ...")
            raise ShapeError(f"malformed layout attributes ':{extra.strip()}' in shape "
                             f"'{text.strip()}' (expected {what})")
        layout = Layout(minor, extra.strip() if colon else "")
    return Shape(etype, tuple(dims), tuple(dyn), layout)


def parse_shape(text: str) -> Shape:
    """Any shape, tuples included: `(f32[2]{0}, (s32[], pred[]))`."""
    shape, end = _parse_at(text, 0)
    if text[end:].strip():
        rest = text[end:]
        raise ShapeError(f"unexpected text after shape: '{rest.strip()[:30]}'",
                         end + len(rest) - len(rest.lstrip()))
    return shape


def parse_shape_prefix(text: str) -> tuple[Shape, int]:
    """A shape at the start of `text`, and where it ends."""
    return _parse_at(text, 0)


_COMMENT = re.compile(r"/\*.*?\*/", re.S)


def _parse_at(text: str, i: int) -> tuple[Shape, int]:
    n = len(text)
    while i < n and text[i].isspace():
        i += 1
    if text.startswith("/*", i):
        end = text.find("*/", i)
        if end < 0:
            raise ShapeError("unterminated /* comment", i)
        return _parse_at(text, end + 2)
    if i < n and text[i] == "(":
        i += 1
        elems = []
        while True:
            while i < n and (text[i].isspace() or text.startswith("/*", i)):
                if text.startswith("/*", i):
                    end = text.find("*/", i)
                    if end < 0:
                        raise ShapeError("unterminated /* comment", i)
                    i = end + 2
                else:
                    i += 1
            if i < n and text[i] == ")":
                return Shape.tuple_of(elems), i + 1
            s, i = _parse_at(text, i)
            elems.append(s)
            while i < n and text[i].isspace():
                i += 1
            if i < n and text[i] == ",":
                i += 1
            elif i < n and text[i] == ")":
                continue
            else:
                raise ShapeError("expected ',' or ')' in tuple shape", i)
    if text.startswith("b(", i):  # a buffer shape: b(f32[16]{0})
        inner, j = _parse_at(text, i + 2)
        while j < n and text[j].isspace():
            j += 1
        if inner.is_tuple or inner.is_token or j >= n or text[j] != ")":
            raise ShapeError("a buffer shape holds one array shape: b(f32[16])", i)
        return replace(inner, buffer=True), j + 1
    m = _ARRAY.match(text, i)
    if not m:
        raise ShapeError(f"expected a shape, found '{text[i:i + 20].strip()}'" if i < n
                         else "expected a shape, found the end of the text", i)
    try:
        return parse_array_shape(m.group(0)), m.end()
    except ShapeError as e:
        raise ShapeError(str(e), i + len(m.group(0)) - len(m.group(0).lstrip())) from None
