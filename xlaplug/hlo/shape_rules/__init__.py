"""XLA's shape rules, one module per family of opcodes; `xlaplug.hlo.shape_inference` is the
public face (and holds the overview of how the rules work).

* `common`: the registry (`RULES`, `@rule`, `TRUST_DECLARED`), `ShapeInferenceError`, helpers;
* `infer`: operand counts (`check_operand_count`) and the entry point `infer_shape`;
* `elementwise`, `conversion`, `data_movement`, `slicing`, `dot_conv`, `reduction`,
  `gather_scatter`, `control_flow`, `async_io`, `collectives`, `linalg_fft_rng`, `misc`: the
  rules, registered into `RULES` when imported.

Importing this package imports every family, so every opcode has its rule.
"""
from __future__ import annotations

from ..opcodes import ALL_OPCODES
from . import (async_io, collectives, common, control_flow, conversion, data_movement,
               dot_conv, elementwise, gather_scatter, infer, linalg_fft_rng, misc, reduction,
               slicing)
from .common import RULES

__all__ = ["async_io", "collectives", "common", "control_flow", "conversion", "data_movement",
           "dot_conv", "elementwise", "gather_scatter", "infer", "linalg_fft_rng", "misc",
           "reduction", "slicing", "RULES", "MISSING_RULES"]

MISSING_RULES = sorted(ALL_OPCODES - set(RULES))
assert not MISSING_RULES, MISSING_RULES
