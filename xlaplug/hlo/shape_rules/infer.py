"""Operand-count checks (`check_operand_count`) and the entry point `infer_shape`."""
from __future__ import annotations

from ..ir import Instruction, Shape
from ..opcodes import BINARY_ELEMENTWISE, TERNARY_ELEMENTWISE, UNARY_ELEMENTWISE
from .common import RULES, ShapeInferenceError, _err


# ---- operand counts ----------------------------------------------------------------------

# Exact operand counts (XLA's HloOpcodeArity, plus the fixed-arity ops it leaves variadic).
EXACT_OPERANDS: dict[str, int] = {
    **{op: 1 for op in UNARY_ELEMENTWISE}, **{op: 2 for op in BINARY_ELEMENTWISE},
    **{op: 3 for op in TERNARY_ELEMENTWISE}, "convert": 1, "bitcast-convert": 1,
    "reduce-precision": 1, "stochastic-convert": 2, "bitcast": 1, "broadcast": 1, "reshape": 1,
    "transpose": 1, "reverse": 1, "slice": 1, "pad": 2, "iota": 0, "parameter": 0,
    "constant": 0, "replica-id": 0, "partition-id": 0, "rng-get-and-update-state": 0,
    "get-tuple-element": 1, "get-dimension-size": 1, "set-dimension-size": 2, "convolution": 2,
    "fft": 1, "cholesky": 1, "triangular-solve": 2, "rng": 2, "rng-bit-generator": 1,
    "add-dependency": 2, "opt-barrier": 1, "while": 1, "copy-start": 1, "copy-done": 1,
    "send": 2, "send-done": 1, "recv": 1, "recv-done": 1, "infeed": 1, "outfeed": 2,
    "select-and-scatter": 3, "gather": 2, "async-done": 1,
    "all-reduce-done": 1, "all-gather-done": 1, "collective-permute-done": 1, "domain": 1,
    "batch-norm-training": 3, "batch-norm-inference": 5, "batch-norm-grad": 5, "topk": 1,
    "ragged-dot": 3, "ragged-all-to-all": 6, "scaled-dot": 4,
}
# Minimum operand counts of the variadic ones (their exact count is checked by the rule).
MIN_OPERANDS: dict[str, int] = {
    "dynamic-slice": 1, "dynamic-update-slice": 2, "reduce": 2, "reduce-window": 2,
    "scatter": 3, "sort": 1, "map": 1, "concatenate": 1, "conditional": 2, "all-reduce": 1,
    "all-gather": 1, "reduce-scatter": 1, "all-to-all": 1, "all-reduce-start": 1,
    "all-gather-start": 1, "collective-broadcast": 1, "dynamic-reshape": 1,
    "async-update": 1,  # more when it binds operands of a late-bound async-start
}


def check_operand_count(ins: Instruction) -> None:
    """Raise if `ins` has the wrong number of operands for its opcode."""
    n = len(ins.operands)
    op = ins.opcode
    if op == "dot":
        expected = 2 + (2 if "sparsity" in ins.attrs else 0)
        if "sparsity" in ins.attrs and n in (3, 4):
            return
        if n != expected:
            raise _err(f"{op} expects {expected} operands, but has {n}")
        return
    if op in ("collective-permute", "collective-permute-start"):
        # 1, several (combined), or 4 in place (with slice_sizes)
        if n < 1:
            raise _err(f"{op} expects at least 1 operand, but has {n}")
        return
    if op in EXACT_OPERANDS:
        exp = EXACT_OPERANDS[op]
        if n != exp:
            raise _err(f"{op} expects {exp} operand{'s' if exp != 1 else ''}, but has {n}")
        return
    if op in MIN_OPERANDS:
        lo = MIN_OPERANDS[op]
        if n < lo:
            raise _err(f"{op} expects at least {lo} operand{'s' if lo != 1 else ''}, but has {n}")
        if op in ("reduce", "reduce-window") and n % 2:
            raise _err(f"{op} expects an even number of operands (inputs then init values), "
                       f"but has {n}")
        if op == "scatter" and n % 2 == 0:
            raise _err(f"{op} expects an odd number of operands (operands, indices, updates), "
                       f"but has {n}")


# ---- the entry point ---------------------------------------------------------------------

def infer_shape(ins: Instruction) -> Shape:
    """The shape `ins` must have; raises ShapeInferenceError when its operands are invalid.
    An opcode without a rule (none today) falls back to the declared shape.  Unbounded (`?`)
    dimensions are wildcards in every size check and stay `?` in the result, as in XLA."""
    check_operand_count(ins)
    fn = RULES.get(ins.opcode)
    if fn is None:
        return ins.shape
    try:
        return fn(ins)
    except ShapeInferenceError:
        raise
    except (IndexError, KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError) as e:
        raise _err(f"malformed {ins.opcode} ({type(e).__name__}: {e})") from None
