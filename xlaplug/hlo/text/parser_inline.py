"""Computations written inline as attribute values: `to_apply={ x = ... ROOT y = ... }`,
`calls={...}`, `branch_computations={{...}, other}`.

XLA names such a computation `_` and its module makes the names unique (`_`, `_.1`, ...); so
do we.  The braces hold an instruction list, read by the same grammar as a named computation:
the value is parsed as `_ { ... }` inside a copy of the file with everything before it
blanked (newlines kept), so lines and columns of errors inside it are the file's own.
"""
from __future__ import annotations

from .attr_values import CompRef
from ..ir import Computation
from .parser_state import StateView, _Ctx, _err
from .parser_operands import split_top_level

# Inline computations read in this parse, in the order they were read (cleared per parse).
INLINE = StateView("inline")  # the current parse's (parser_state.ParseState)


def is_inline(value: str) -> bool:
    """A braced value holding instructions (`=`), not names: `{p = f32[] parameter(0) ...}`."""
    return value.lstrip().startswith("{") and "=" in value


def _parse_inline(value: str, vpos: int) -> Computation:
    from .parser import _lark  # not at the top: the parser imports this module
    from .parser_resolve import DONE, unique_name
    text = _Ctx.text
    prefix = "".join(c if c == "\n" else " " for c in text[:vpos - 2])
    name = unique_name("_", set(DONE) | {c.name for c in INLINE})
    # The blanked prefix ends with `_ ` (two characters: `=` and what precedes it, so nothing
    # moves); a longer unique name `_.1` is set after the parse.
    sub = prefix + "_ " + value
    from .parser_deep import CURRENT
    saved, state = _Ctx.text, CURRENT[0]
    try:
        items = _lark().parse(sub)
    finally:
        _Ctx.text, CURRENT[0] = saved, state
    comps = [x for x in items if isinstance(x, Computation)]
    if len(comps) != 1 or comps[0].is_entry:
        raise _err("an inline computation is one instruction list in braces", vpos)
    comp = comps[0]
    if DONE.get(comp.name) is comp:
        del DONE[comp.name]
    comp.name = name
    DONE[name] = comp
    INLINE.append(comp)
    return comp


def inline_value(kind_is_list: bool, value: str, vpos: int):
    """The attribute value: a Computation, or for list kinds a list of Computation/CompRef."""
    body = value.strip()
    at = vpos + value.index(body[0])
    if not kind_is_list:
        return _parse_inline(body, at)
    inner = body[1:-1]
    parts = [(p, off) for p, off in split_top_level(inner) if p.strip()]
    # `calls={ p = ... }` (one inline list) or `{ {...}, name, {...} }` (a list of them).
    if not all(p.strip().startswith("{") or "=" not in p for p, _ in parts):
        return [_parse_inline(body, at)]
    out = []
    for part, off in parts:
        item = part.strip()
        pos = at + 1 + off + part.index(item[0])
        out.append(_parse_inline(item, pos) if item.startswith("{")
                   else CompRef(item.lstrip("%"), pos))
    return out
