"""The operand flushes a row loop's code (row_loop.py) can leave out.

A row loop flushes every float operand (denormals-are-zero) and every result (flush-to-zero)
in software, the SCALAR_OPS templates' `_xftz32(x)` / `_xftz64(x)`, as XLA:CPU runs its
fusions under the MXCSR's FTZ and DAZ bits.  A flush is the identity on a value that holds
no subnormal (a NaN is returned as it is), so the operand flush of a value known to hold
none is left out: the same bits, fewer instructions.  LLVM does not see it: the flush is a
test of the exponent bits and a select, and flushing a flushed value is not folded away --
the transformer block's layer norm loop (f32[1024,256]) ran 0.19 -> 0.15 ms and its causal
softmax (f32[4096,128]) 0.56 -> 0.51 ms on one core without them (CPU time, load 4).

A row loop's value is clean (holds no subnormal) when it is

  * a row-level or element-level value whose expression is one flush call (its op's own
    result flush: scalar_codegen._flushes, as the compiled loops' rule, loop_daz.py), or a
    select between clean values, or the negation or absolute value of one (XLA does not
    flush those: the sign bit alone) -- the causal mask's select of the scaled scores;
  * a constant with no subnormal and no NaN among its elements (loop_daz.constant_clean);
  * an element of a reduce's row buffer (`t1[k]`) that holds a clean value.

Names of one loop are unique (each value gets its own), so cleanliness is kept by name.
Parameters and a reduce's result are never clean: a parameter comes from outside, and the
row folds add in IEEE arithmetic.  (loop_daz.py is the same rule for the compiled loops'
names; this is its form for the row loop's.)
"""
from __future__ import annotations

import re

from ..common.scalar_codegen import _flushes
from .loop_daz import constant_clean

# An operand flush of a name (e12, r3, RK0) or of a row buffer's element at k (t1[k]).
_OPERAND_FLUSH = re.compile(r"_xftzd?(?:32|64)\(([A-Za-z_]\w*(?:\[k\])?)\)")


def strip(expr: str, clean: set[str]) -> str:
    """`expr` without the operand flushes of clean values."""
    return _OPERAND_FLUSH.sub(lambda m: m[1] if m[1] in clean else m[0], expr)


# Ops whose result is one of their float operands' values, or its sign changed.
_KEEPS = frozenset({"select", "negate", "abs"})


def note(name: str, expr: str, clean: set[str], ins, names: dict) -> None:
    """Add `name`, the value of `ins` (its operands' names in `names`), to `clean` when its
    expression `expr` is one flush call, or it keeps a clean operand's value."""
    values = ins.operands[1:] if ins.opcode == "select" else ins.operands
    if _flushes(expr) or (ins.opcode in _KEEPS and
                          all(names.get(id(o)) in clean for o in values)):
        clean.add(name)


def note_constant(name: str, values, clean: set[str]) -> None:
    """Add the constant `name` to `clean` when its values hold no subnormal and no NaN."""
    if constant_clean(values):
        clean.add(name)
