"""The slow path of literal parsing: a token-by-token walk, as XLA's parser reads a dense
literal, that says exactly what is wrong and where (literals.py's fast path only finds that
something is)."""
from __future__ import annotations

import re

from .. import dtypes
from ..ir import Shape
from .literals import _FLOAT_TOKEN, _INT_TOKEN, LiteralError


_LIT_TOKEN = re.compile(r"\s+|\{|\}|,|\((?:[^()]|\(0x[0-9a-fA-F]*\))*\)?|[^\s{},()]+|.")


def element_offset(text: str, index: int, complex_: bool) -> int:
    k = 0
    for m in _LIT_TOKEN.finditer(text):
        tok = m.group(0)
        if tok.isspace() or tok in "{},":
            continue
        if k == index:
            return m.start()
        k += 1
    return 0


def diagnose_dense(text: str, shape: Shape) -> None:
    """Walk the literal as XLA's parser does and raise a LiteralError at the first problem."""
    dims = shape.dims
    rank = len(dims)
    etype = shape.element_type
    is_complex = dtypes.is_complex(etype)
    nest = 0
    seen = [0] * rank
    opened: list[int] = []
    count = 0
    done = False

    def where(level: int) -> str:
        if not level:
            return ""
        return " of sub-array [" + ",".join(str(x - 1) for x in seen[:level]) + "]"

    for m in _LIT_TOKEN.finditer(text):
        tok, pos = m.group(0), m.start()
        if tok.isspace() or tok == ",":
            continue
        if done:
            raise LiteralError(f"unexpected '{tok[:20]}' after the end of the literal", pos)
        if tok == "{":
            if rank == 0:
                raise LiteralError(f"a scalar {etype} literal is written without braces", pos)
            nest += 1
            opened.append(pos)
            if nest > rank:
                raise LiteralError(f"too many nested '{{': shape {shape} has rank {rank}", pos)
            if nest > 1:
                seen[nest - 2] += 1
                if seen[nest - 2] > dims[nest - 2]:
                    raise LiteralError(f"too many elements in dimension {nest - 2}"
                                       f"{where(nest - 2)}: shape {shape} has {dims[nest - 2]}",
                                       pos)
            continue
        if tok == "}":
            if nest == 0:
                raise LiteralError("unbalanced '}' in literal", pos)
            nest -= 1
            opened.pop()
            if seen[nest] != dims[nest]:
                raise LiteralError(f"expected {dims[nest]} elements in dimension {nest}"
                                   f"{where(nest)}, found {seen[nest]} (shape {shape})", pos)
            seen[nest] = 0
            if nest == 0:
                done = True
            continue
        # An element.
        if rank > 0 and nest != rank:
            raise LiteralError(f"element '{tok[:20]}' at nesting depth {nest}, but shape {shape} "
                               f"needs depth {rank}" if nest else
                               f"array literal of shape {shape} must start with '{{'", pos)
        if is_complex:
            if not (tok.startswith("(") and tok.endswith(")")):
                raise LiteralError(f"complex elements are written (real, imag), found "
                                   f"'{tok[:20]}'", pos)
            parts = tok[1:-1].split(",")
            if len(parts) != 2 or not all(_FLOAT_TOKEN.fullmatch(x.strip()) for x in parts):
                raise LiteralError(f"malformed complex element '{tok[:30]}'", pos)
        elif tok.startswith("("):
            raise LiteralError(f"unexpected '(' in a {etype} literal (parentheses are only for "
                               f"complex elements)", pos)
        elif dtypes.is_float(etype):
            if not _FLOAT_TOKEN.fullmatch(tok):
                raise LiteralError(f"invalid floating-point literal '{tok[:30]}'", pos)
        elif etype == "pred":
            if tok not in ("true", "false") and not _INT_TOKEN.fullmatch(tok):
                raise LiteralError(f"invalid pred literal '{tok[:30]}' (expected true or "
                                   f"false)", pos)
        elif not _INT_TOKEN.fullmatch(tok):
            raise LiteralError(f"invalid {etype} literal '{tok[:30]}'", pos)
        count += 1
        if rank == 0:
            if count > 1:
                raise LiteralError("a scalar literal has one element", pos)
            continue
        seen[rank - 1] += 1
        if seen[rank - 1] > dims[rank - 1]:
            raise LiteralError(f"too many elements in dimension {rank - 1}"
                               f"{where(rank - 1)}: shape {shape} has {dims[rank - 1]}", pos)
    if opened:
        raise LiteralError("unterminated '{' in literal", opened[0])
    if count == 0 and rank == 0:
        raise LiteralError(f"missing literal for shape {shape}")
