"""The attribute run of an instruction, a computation or the module header (`, name=value`
...): each value typed by its attribute's kind (attributes.py), computations written inline
read as computations (parser_inline), and a run nested past the ATTRS regex read through
parser_deep."""
from __future__ import annotations

from . import attributes as A
from .parser_state import _err, current_parse
from .parser_grammar import _ATTR
from .parser_inline import inline_value, is_inline
from .shape_parser import ShapeError


def _attrs(tok, owner: str) -> dict:
    """The ATTRS token (all `, name=value` of one instruction) -> {name: typed value}."""
    out: dict = {}
    if tok is None:
        return out
    base = tok.start_pos
    text = tok  # a str (Token subclasses it): no copy
    if "device_ids" in text and "mesh" in text:
        return _attrs_from(_mesh_joined(text, base), owner)
    pos = 0
    parse = A.parse_attr
    metadata = current_parse().metadata
    for m in _ATTR.finditer(text):
        if m.start() != pos:  # a value nested past the regular expression (parser_deep)
            return _attrs_from(_deep_items(text, base), owner)
        pos = m.end()
        name, value = m.group(1), m.group(2)
        if name in out or name in _CALLED:  # the uncommon cases, in full
            _attr(out, name, value, base + m.start(1), base + m.start(2), owner)
            continue
        if name == "metadata":  # on most instructions jax prints, and repeated: read once
            v = metadata.get(value)
            if v is not None:
                out[name] = dict(v)  # each instruction its own dict
                continue
        try:
            v = parse(name, value)
        except (A.AttrError, ShapeError) as e:
            raise _err(f"attribute '{name}': {e}",
                       base + m.start(2) + getattr(e, "offset", 0)) from None
        if type(v) is list:  # instruction references: positions are per use
            for r in v:
                r.offset += base + m.start(2)
        elif name == "metadata":
            metadata[value] = dict(v)
        out[name] = v
    if pos != len(text):
        return _attrs_from(_deep_items(text, base), owner)
    return out


def typed_attrs(matches: list, owner: str) -> dict:
    """`_attrs` of a run already cut into its `_ATTR` matches, one after another with no gap
    and no mesh `device_ids` (parser_fast's common path), their positions in the text."""
    out: dict = {}
    parse = A.parse_attr
    metadata = current_parse().metadata
    for m in matches:
        name, value = m.group(1, 2)
        if name in out or name in _CALLED:
            _attr(out, name, value, m.start(1), m.start(2), owner)
            continue
        if name == "metadata":
            v = metadata.get(value)
            if v is not None:
                out[name] = dict(v)
                continue
        try:
            v = parse(name, value)
        except (A.AttrError, ShapeError) as e:
            raise _err(f"attribute '{name}': {e}", m.start(2) + getattr(e, "offset", 0)) from None
        if type(v) is list:
            for r in v:
                r.offset += m.start(2)
        elif name == "metadata":
            metadata[value] = dict(v)
        out[name] = v
    return out


def _mesh_joined(text: str, base: int):
    """The items of a run where a mesh's `device_ids=(...)` follows `replica_groups=mesh[...]`:
    it continues that value (XLA prints `replica_groups=mesh['x'=2,'y'=2],
    device_ids=(0,2,1,3) {'x'}`)."""
    items: list = []
    for m in _ATTR.finditer(text):
        name, value = m.group(1), m.group(2)
        if name == "device_ids" and items and items[-1][0] == "replica_groups" \
                and items[-1][1].startswith("mesh") and "{" not in items[-1][1]:
            prev = items.pop()
            items.append((prev[0], f"{prev[1]}, device_ids={value}", prev[2], prev[3]))
            continue
        items.append((name, value, base + m.start(1), base + m.start(2)))
    return items


def _deep_items(text: str, base: int):
    from .parser_deep import attr_run
    return [(name, text[v:e], base + n, base + v) for name, n, v, e in attr_run(text, 0)]


def _attrs_from(items, owner: str) -> dict:
    out: dict = {}
    for name, value, npos, vpos in items:
        _attr(out, name, value, npos, vpos, owner)
    return out


_CALLED = frozenset(A.COMPS) | frozenset(A.COMP_LISTS)


def _attr(out: dict, name: str, value: str, npos: int, vpos: int, owner: str) -> None:
    """One `name=value` into `out`, typed by its kind."""
    if name in out:
        raise _err(f"attribute '{name}' given twice on '{owner}'", npos)
    if name in _CALLED and is_inline(value):
        out[name] = inline_value(name in A.COMP_LISTS, value, vpos)
        return
    try:
        v = A.parse_attr(name, value)
    except (A.AttrError, ShapeError) as e:
        raise _err(f"attribute '{name}': {e}", vpos + getattr(e, "offset", 0)) from None
    if isinstance(v, A.CompRef):  # fresh objects (not cached): positions are per use
        v.offset += vpos
    elif isinstance(v, list):
        for r in v:
            r.offset += vpos
    out[name] = v


_ATTR_TOKENS = frozenset({"ATTRS", "DEEP_ATTRS"})


def _attr_tokens(children) -> list:
    """The trailing ATTRS / DEEP_ATTRS tokens of a rule's children (none, one or both)."""
    out = []
    for c in reversed(children[-2:]):
        if isinstance(c, str) and c.type in _ATTR_TOKENS:  # a token
            out.insert(0, c)
        else:
            break
    return out


def _attrs_of(tokens: list, owner: str) -> dict:
    if len(tokens) < 2:
        return _attrs(tokens[0] if tokens else None, owner)
    out = _attrs(tokens[0], owner)
    for k, v in _attrs(tokens[1], owner).items():
        if k in out:
            raise _err(f"attribute '{k}' given twice on '{owner}'",
                       tokens[1].start_pos + tokens[1].index(k))
        out[k] = v
    return out


def _opt_attrs(children, owner: str) -> dict:
    return _attrs_of(_attr_tokens(children), owner)
