"""Shape text -> Shape.  Shapes repeat constantly in a module, so results are cached."""
from __future__ import annotations

import re
from functools import lru_cache

from .dtypes import ELEMENT_TYPES
from .ir import UNBOUNDED, Layout, Shape

_ARRAY = re.compile(r"\s*([a-z][a-z0-9]*)\[([^\]]*)\](\{[^}]*\})?\s*")


class ShapeError(ValueError):
    def __init__(self, message: str, offset: int = 0):
        super().__init__(message)
        self.offset = offset


@lru_cache(maxsize=4096)
def parse_array_shape(text: str) -> Shape:
    m = _ARRAY.fullmatch(text)
    if not m:
        raise ShapeError(f"malformed shape '{text.strip()}'")
    etype, dims_text, layout_text = m.groups()
    if etype not in ELEMENT_TYPES:
        raise ShapeError(f"unknown element type '{etype}'")
    dims, dyn = [], []
    if dims_text.strip():
        for d in dims_text.split(","):
            d = d.strip()
            if d == "?":
                dims.append(UNBOUNDED)
                dyn.append(True)
            elif d.startswith("<="):
                if not d[2:].strip().isdigit():
                    raise ShapeError(f"malformed dimension '{d}' in shape '{text.strip()}'")
                dims.append(int(d[2:]))
                dyn.append(True)
            elif d.isdigit():
                dims.append(int(d))
                dyn.append(False)
            else:
                raise ShapeError(f"malformed dimension '{d}' in shape '{text.strip()}'")
    if etype == "token" and dims:
        raise ShapeError("token shape takes no dimensions")
    layout = None
    if layout_text is not None:
        body = layout_text[1:-1]
        m2m_text, colon, extra = body.partition(":")
        m2m = m2m_text.strip()
        try:
            minor = tuple(int(x) for x in m2m.split(",")) if m2m else ()
        except ValueError:
            raise ShapeError(f"malformed layout '{layout_text}'") from None
        if sorted(minor) != list(range(len(dims))) and not (etype == "token" and not minor):
            raise ShapeError(f"layout {layout_text} is not a permutation of the "
                             f"{len(dims)} dimensions of shape '{text.strip()}'")
        layout = Layout(minor, extra.strip() if colon else "")
    return Shape(etype, tuple(dims), tuple(dyn), layout)


def parse_shape(text: str) -> Shape:
    """Any shape, tuples included: `(f32[2]{0}, (s32[], pred[]))`."""
    shape, end = _parse_at(text, 0)
    if text[end:].strip():
        raise ShapeError(f"unexpected text after shape: '{text[end:].strip()[:30]}'", end)
    return shape


_COMMENT = re.compile(r"/\*.*?\*/", re.S)


def _parse_at(text: str, i: int) -> tuple[Shape, int]:
    n = len(text)
    while i < n and text[i].isspace():
        i += 1
    if text.startswith("/*", i):
        i = text.index("*/", i) + 2
        return _parse_at(text, i)
    if i < n and text[i] == "(":
        i += 1
        elems = []
        while True:
            while i < n and (text[i].isspace() or text.startswith("/*", i)):
                i = text.index("*/", i) + 2 if text.startswith("/*", i) else i + 1
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
    m = _ARRAY.match(text, i)
    if not m:
        raise ShapeError(f"expected a shape at '{text[i:i + 20]}'", i)
    return parse_array_shape(m.group(0)), m.end()
