"""Value parsers for values that hold shapes: operand_layout_constraints, outfeed_shape,
the module's entry_computation_layout, and custom-call's `literal=` (a shape and a
literal)."""
from __future__ import annotations

from .attr_text import AttrError, _braced_body, split_top_at
from ..attr_types import ComputationLayout, LiteralTuple, LiteralValue


def p_shapes(t: str):
    from .shape_parser import ShapeError, parse_shape
    t = t.strip()
    body = _braced_body(t, "a list of shapes")
    out = []
    for s, off in split_top_at(t[1:-1]) if body else []:
        try:
            out.append(parse_shape(s))
        except ShapeError as e:
            raise AttrError(str(e), 1 + off + e.offset) from None
    return tuple(out)


def p_shape(t: str):
    from .shape_parser import ShapeError, parse_shape
    try:
        return parse_shape(t)
    except ShapeError as e:
        raise AttrError(str(e), e.offset) from None


def p_computation_layout(t: str) -> ComputationLayout:
    from .shape_parser import ShapeError, parse_shape
    t = t.strip()
    body = _braced_body(t, "a computation layout like {(f32[2]{0})->f32[2]{0}}")
    start = t.index(body)
    depth = 0
    for i, ch in enumerate(body):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0 and body.startswith("->", i):
            break
    else:
        raise AttrError("computation layout needs '(parameters)->result'", start)
    try:
        params = parse_shape(body[:i])
    except ShapeError as e:
        raise AttrError(f"computation layout parameters: {e}", start + e.offset) from None
    if not params.is_tuple or not body[:i].strip().startswith("("):
        raise AttrError("computation layout parameters must be in parentheses", start)
    try:
        result = parse_shape(body[i + 2:])
    except ShapeError as e:
        raise AttrError(f"computation layout result: {e}", start + i + 2 + e.offset) from None
    return ComputationLayout(params.tuple_shapes, result)


def p_literal(t: str):
    """custom-call `literal=s32[2]{0} {1, 2}`: a shape, then the literal; or a tuple of such,
    `( s32[2]{0} {1, 2}, pred[] true )`."""
    from .literals import LiteralError, parse_literal
    from .parser_operands import _matching, split_top_level
    from .shape_parser import ShapeError, parse_shape_prefix
    body = t.strip()
    # `(shape, shape) (value, value)` is one tuple-shaped literal; `( shape value, ... )`,
    # one group, a tuple of literals.
    if body.startswith("(") and _matching(body, 0) == len(body):
        lead = len(t) - len(t.lstrip()) + 1
        items = []
        for part, off in split_top_level(body[1:-1]):
            if not part.strip():
                raise AttrError("literal: empty element in literal tuple", lead + off)
            try:
                items.append(p_literal(part))
            except AttrError as e:
                raise AttrError(str(e), lead + off + e.offset) from None
        return LiteralTuple(tuple(items))
    try:
        shape, end = parse_shape_prefix(t)
    except ShapeError as e:
        raise AttrError(f"literal: {e}", e.offset) from None
    try:
        return LiteralValue(shape, parse_literal(t[end:], shape))
    except LiteralError as e:
        raise AttrError(f"literal: {e}", end + e.offset) from None
