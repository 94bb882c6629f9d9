"""Value parsers for collectives and buffer aliasing: replica groups (listed or iota),
source-target pairs, output_to_operand_aliasing, and the module's input_output_alias and
buffer_donor."""
from __future__ import annotations

import re

from .attr_cursor import _Cursor
from .attr_text import AttrError, _braced_body, _short, split_top_at
from ..attr_types import (BufferDonor, InputOutputAlias, OutputOperandAliasing,  # noqa: F401
                          ReplicaGroups, expand_iota_groups)
from .attr_values import p_int_list


_IOTA_GROUPS = re.compile(r"\[([\d,\s]*)\]<=\[([\d,\s]*)\](?:T\(([\d,\s]*)\))?")


def _check_iota(dims: tuple[int, ...], reshape: tuple[int, ...], perm) -> None:
    import math
    if not dims or not reshape:
        raise AttrError("iota dimensions must not be empty")
    if math.prod(dims) != math.prod(reshape):
        raise AttrError(f"iota [{','.join(map(str, dims))}] has {math.prod(dims)} devices but "
                        f"<=[{','.join(map(str, reshape))}] has {math.prod(reshape)}")
    if perm is not None and sorted(perm) != list(range(len(reshape))):
        raise AttrError(f"T({','.join(map(str, perm))}) is not a permutation of the "
                        f"{len(reshape)} reshape dimensions")


def p_replica_groups(t: str) -> ReplicaGroups:
    t = t.strip()
    if t.startswith("mesh"):
        from .mesh_groups import MeshError, parse_mesh_groups
        try:
            return ReplicaGroups(mesh=parse_mesh_groups(t))
        except MeshError as e:
            raise AttrError(str(e), e.offset) from None
    if t.startswith("["):
        m = _IOTA_GROUPS.fullmatch(t)
        if not m:
            raise AttrError(f"malformed iota replica groups '{_short(t)}' (expected "
                            f"[groups,size]<=[dims] or [groups,size]<=[dims]T(perm))")
        dims = tuple(int(x) for x in m[1].split(",") if x.strip())
        if len(dims) != 2:
            raise AttrError(f"iota replica groups need [groups,size], got [{m[1]}]")
        reshape = tuple(int(x) for x in m[2].split(",") if x.strip())
        perm = tuple(int(x) for x in m[3].split(",") if x.strip()) if m[3] is not None else None
        _check_iota(dims, reshape, perm)
        return ReplicaGroups(iota=t)
    t = t.strip()
    _braced_body(t, "replica groups like {{0,1},{2,3}}")
    groups = []
    for g, off in split_top_at(t[1:-1]):
        try:
            groups.append(p_int_list(g))
        except AttrError as e:
            raise AttrError(f"replica group: {e}", 1 + off + e.offset) from None
    return ReplicaGroups(groups=tuple(groups))


def p_pairs(t: str) -> tuple[tuple[int, int], ...]:
    t = t.strip()
    _braced_body(t, "source-target pairs like {{0,1},{1,0}}")
    out = []
    for g, off in split_top_at(t[1:-1]):
        pair = p_int_list(g)
        if len(pair) != 2:
            raise AttrError(f"expected a {{source,target}} pair, got '{_short(g)}'", 1 + off)
        out.append(pair)
    return tuple(out)


# ---- aliasing ----------------------------------------------------------------------------

def p_output_operand_aliasing(t: str) -> OutputOperandAliasing:
    c = _Cursor(t, "output_to_operand_aliasing")
    c.expect("{")
    entries = []
    while not c.eat("}"):
        out = c.shape_index()
        c.expect(":", " after the output shape index ({out}: (operand, {index}))")
        c.expect("(")
        n = c.int("an operand number")
        c.expect(",")
        idx = c.shape_index()
        c.expect(")")
        entries.append((out, n, idx))
        if not c.eat(","):
            c.expect("}", " or ',' between aliasing entries")
            break
    c.done()
    return OutputOperandAliasing(tuple(entries))


def p_io_alias(t: str) -> InputOutputAlias:
    c = _Cursor(t, "input_output_alias")
    c.expect("{")
    entries = []
    while not c.eat("}"):
        out = c.shape_index()
        c.expect(":", " after the output shape index ({out}: (param, {index}, kind))")
        c.expect("(")
        p = c.int("a parameter number")
        c.expect(",")
        idx = c.shape_index()
        kind = "may-alias"
        if c.eat(","):
            at = c.pos()
            kind = c.word("may-alias or must-alias")
            if kind not in ("may-alias", "must-alias"):
                c.i = at
                raise c.err(f"expected may-alias or must-alias, found '{kind}'")
        c.expect(")")
        entries.append((out, p, idx, kind))
        if not c.eat(","):
            c.expect("}", " or ',' between aliases")
            break
    c.done()
    return InputOutputAlias(tuple(entries))


def p_buffer_donor(t: str) -> BufferDonor:
    c = _Cursor(t, "buffer_donor")
    c.expect("{")
    entries = []
    while not c.eat("}"):
        c.expect("(", " to start a (param, {index}) entry")
        p = c.int("a parameter number")
        c.expect(",")
        idx = c.shape_index()
        c.expect(")")
        entries.append((p, idx))
        if not c.eat(","):
            c.expect("}", " or ',' between buffer donors")
            break
    c.done()
    return BufferDonor(tuple(entries))
