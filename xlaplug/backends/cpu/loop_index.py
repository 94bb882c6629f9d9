"""Index arithmetic of the loop code (loop_codegen.py): flat row-major arrays with static
shapes, so an index is an expression over loop variables with constant strides."""
from __future__ import annotations

from ...hlo.ir import Instruction


class Unsupported(Exception):
    """The computation has an instruction (or shape) the loop code cannot express."""


def _strides(dims) -> list[int]:
    out, acc = [], 1
    for d in reversed(dims):
        out.append(acc)
        acc *= d
    return list(reversed(out))


def _lin(idx: list[str], dims) -> str:
    """Row-major linear index of index expressions `idx` into an array of `dims`."""
    terms = [f"({i}) * {s}" if s != 1 else f"({i})" for i, s in zip(idx, _strides(dims))]
    return " + ".join(terms) if terms else "0"


def _dims(ins: Instruction) -> tuple:
    return tuple(int(d) for d in ins.shape.dims)


__all__ = ["Unsupported"]
