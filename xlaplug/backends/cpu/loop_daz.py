"""The operand flushes a loop computation's code (loop_codegen.py) can leave out.

Element loops flush every float operand (denormals-are-zero) and result (flush-to-zero) in
software, the SCALAR_OPS templates' `_xftz32(x)` / `_xftz64(x)`, as XLA:CPU runs under the
MXCSR's FTZ and DAZ bits.  A flush is the identity on a value that holds no subnormal (a NaN
included: it is returned as it is), so an operand flush of a value known to hold none is
left out -- the same bits, fewer instructions (a layer norm's small region: 19 -> 13 us of
CPU time, most of its flushes were of values flushed already).  A value holds no subnormal
(`ArrayCodegen.clean`, by name) when it is

  * an element-loop value whose expression is one flush call (the op's own result flush),
    a copy of a clean value (a broadcast scalar), a select between clean values, or the
    negation, absolute value or tanh of one (which XLA does not flush: the sign bit alone;
    tanh x is x or far from subnormal);
  * a constant with no subnormal and no NaN among its elements;
  * a data-movement op's result (broadcast, slice, transpose, concatenate, dynamic-slice,
    dynamic-update-slice; reshape and copy share their operand's name) whose float
    operands are clean;
  * a small region's reduce folded as numpy folds it under the kernel's FTZ (region_sums:
    every partial sum flushed, so the result is).

Parameters (the region's inputs, a loop's state) are never clean: they come from outside.
The folds of a reduce load their row without the flush when the row is clean
(row_folds.fast_fold's `flush_loads`): each loaded element goes into an add, a product or
a comparison, which give the same value for it either way.
"""
from __future__ import annotations

import re

import numpy as np

from ..common.scalar_codegen import _flushes

# Data-movement ops: every element of the result is an element of a float operand.
MOVES = frozenset({"broadcast", "slice", "transpose", "concatenate", "dynamic-slice",
                   "dynamic-update-slice"})

# An operand flush of an element-loop value (s_v12), a buffer read at the loop index or a
# one-element value (v12[o], v12[0], rK3[0]).
_OPERAND_FLUSH = re.compile(r"_xftzd?(?:32|64)\((s_(\w+)|(\w+)\[[o0]\])\)")
_REF = re.compile(r"s_(\w+)|(\w+)\[[o0]\]")


def strip(expr: str, clean: set[str]) -> str:
    """`expr` without the operand flushes of clean values."""
    return _OPERAND_FLUSH.sub(lambda m: m[1] if (m[2] or m[3]) in clean else m[0], expr)


# Element ops whose result is one of their float operands' values, or its sign changed;
# and tanh: XLA's returns x itself below |x| = 0.0004 and at least 0.0003 in magnitude
# above (common/scalar_float_approx32._xtanh32), so no subnormal from a clean operand (an
# RNN cell's tanh feeds its sum: the fold then loads it unflushed, 18 of a scan step's
# 170 ns, 2026-12-06).
_KEEPS = frozenset({"select", "negate", "abs", "tanh"})


def flushed(expr: str, clean: set[str]) -> bool:
    """Whether an element-loop value of expression `expr` holds no subnormal: one flush
    call, or a reference to a clean value."""
    if _flushes(expr):
        return True
    m = _REF.fullmatch(expr)
    return m is not None and (m[1] or m[2]) in clean


def element_clean(cg, ins, expr: str) -> bool:
    """Whether the element-loop value of `ins`, of expression `expr`, holds no subnormal."""
    if ins.opcode == "tanh" and ins.shape.element_type not in ("f16", "bf16", "f32", "f64"):
        return False  # (a complex tanh's parts can be subnormal)
    return flushed(expr, cg.clean) or (ins.opcode in _KEEPS and operands_clean(cg, ins))


def constant_clean(values) -> bool:
    """A constant's elements (numba's array of them) hold no subnormal and no NaN."""
    a = np.asarray(values)
    if a.dtype.kind != "f":
        return False
    with np.errstate(invalid="ignore"):
        sub = (a != 0) & (np.abs(a) < np.finfo(a.dtype).tiny)
        return not np.isnan(a).any() and not sub.any()


def operands_clean(cg, ins) -> bool:
    """Every operand of `ins` but the integer and pred ones (indices) is a clean value."""
    return all(cg.names.get(id(o)) in cg.clean for o in ins.operands
               if o.shape.element_type[0] not in "sup")
