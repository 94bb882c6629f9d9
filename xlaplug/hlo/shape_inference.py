"""XLA's shape rules: infer an instruction's result shape from its operands and attributes.

One rule per opcode, registered in `RULES` with the `@rule(...)` decorator.  A rule is
`fn(ins) -> Shape`: it reads the operand shapes, the attributes and (where XLA does too) the
called computations' signatures, checks them the way XLA's ShapeInference / ShapeVerifier do
(xla/service/shape_inference.cc, xla/service/hlo_verifier.cc), and returns the shape the
instruction must have, ignoring layouts.  Invalid operands or attributes raise
`ShapeInferenceError`.

Some results cannot be computed from the operands alone; for those XLA (and we) take part of
the declared shape as given and check the rest:

* the element type of `convert`, `bitcast-convert`, `stochastic-convert`, `dot`,
  `convolution`, `ragged-dot` (mixed precision: "preferred element type");
* the result dimensions of `broadcast`, `reshape`, `dynamic-reshape`, `iota`, `rng` that are
  not mapped from an operand (`broadcast`) or are given only by the result (`reshape`: element
  count checked; `iota`: dimension and element type checked; `rng`: operand types checked);
* the shard count of `all-gather`, `reduce-scatter` (XLA derives it from the result shape too);
* the extra "context" elements of async tuples (`async-*`, `collective-permute-start`);
* the data shape of `recv`, `infeed`, the random bits of `rng-bit-generator`.

`TRUST_DECLARED` lists the opcodes whose whole result is taken from the declaration (after the
operand checks that are possible): parameter, constant, custom-call, bitcast (byte size
checked), scan, ragged-dot, and a sparse `dot` (one with a `sparsity` attribute).

Shapes are compared like XLA's `ShapeUtil::Compatible`: element types and dimension bounds,
ignoring layouts and whether a bounded dimension is dynamic (`<=N` vs `N`).  An unbounded `?`
dimension is a wildcard in every size check (`dim_eq`) and stays `?` through arithmetic, as in
XLA's unbounded-dynamism rules.

Operand counts are checked first (`check_operand_count`: exact for fixed-arity opcodes, a
minimum and parity for the variadic ones); the error names the opcode and both counts.

The rules live in the package `xlaplug.hlo.shape_rules`, one module per family of opcodes
(see its docstring); this module re-exports the names the rest of the code uses.
"""
from __future__ import annotations

from .dtypes import is_signed_or_float
from .shape_rules import MISSING_RULES
from .shape_rules.common import (RULES, TOKEN, TRUST_DECLARED, RuleFn, ShapeInferenceError,
                                 bit_width, compatible, dim_eq, expect_params, has_unbounded,
                                 higher_precision, is_complex, is_floating, is_integral,
                                 program_shape, rule, s, same_dims,
                                 same_type_ignoring_fp)
from .shape_rules.control_flow import branch_computations
from .shape_rules.dot_conv import window_output_dims
from .shape_rules.elementwise import binary_shape
from .shape_rules.infer import EXACT_OPERANDS, MIN_OPERANDS, check_operand_count, infer_shape
from .shape_rules.reduction import verify_reducer

__all__ = [
    "EXACT_OPERANDS", "MIN_OPERANDS", "MISSING_RULES", "RULES", "TOKEN", "TRUST_DECLARED",
    "RuleFn", "ShapeInferenceError", "binary_shape", "bit_width", "branch_computations",
    "check_operand_count", "compatible", "dim_eq", "expect_params", "has_unbounded",
    "higher_precision", "infer_shape", "is_complex", "is_floating", "is_integral",
    "is_signed_or_float",
    "program_shape", "rule", "s", "same_dims", "same_type_ignoring_fp", "verify_reducer",
    "window_output_dims",
]
