"""Which attributes an opcode takes, as XLA's parser knows per opcode (hlo_parser.cc parses
each opcode's own attribute set and rejects any other: `abs(p), dimensions={0}` is an error
there, not a silently kept attribute).

Checked for the opcodes whose attribute set is small and fixed (elementwise ops, shape and
data movement, control flow, reduce/sort/map, dot): a known attribute name (one in
attributes.PARSERS) on such an opcode that does not take it is an error.  Opcodes with large
or configuration-dependent sets (custom-call, fusion, collectives, convolution, gather and
scatter, async ops, ...) and names we do not know (kept as Raw text) are not checked here.
"""
from __future__ import annotations

from functools import lru_cache

from ..opcodes import BINARY_ELEMENTWISE, UNARY_ELEMENTWISE

# Taken by every instruction (XLA parses these for any opcode).
COMMON = frozenset({
    "sharding", "metadata", "backend_config", "frontend_attributes", "control-predecessors",
    "parameter_replication", "statistics", "origin", "operation_queue_id",
    "wait_on_operation_queues", "original_value", "statistics_viz",
})

_UNARY = {op: frozenset({"result_accuracy"}) for op in UNARY_ELEMENTWISE}
_BINARY = {op: frozenset() for op in BINARY_ELEMENTWISE}

ALLOWED: dict[str, frozenset[str]] = {
    **_UNARY, **_BINARY,
    "compare": frozenset({"direction", "type"}),
    "select": frozenset(), "clamp": frozenset(), "convert": frozenset(),
    "bitcast-convert": frozenset(), "stochastic-convert": frozenset(),
    "reduce-precision": frozenset({"exponent_bits", "mantissa_bits"}),
    "tuple": frozenset(), "get-tuple-element": frozenset({"index"}),
    "parameter": frozenset(), "constant": frozenset(),
    "reshape": frozenset({"inferred_dimension"}), "transpose": frozenset({"dimensions"}),
    "broadcast": frozenset({"dimensions"}), "concatenate": frozenset({"dimensions"}),
    "reverse": frozenset({"dimensions"}), "slice": frozenset({"slice"}),
    "dynamic-slice": frozenset({"dynamic_slice_sizes"}), "dynamic-update-slice": frozenset(),
    "pad": frozenset({"padding"}), "iota": frozenset({"iota_dimension"}),
    "get-dimension-size": frozenset({"dimensions"}),
    "set-dimension-size": frozenset({"dimensions"}),
    "while": frozenset({"condition", "body"}),
    "conditional": frozenset({"true_computation", "false_computation",
                              "branch_computations"}),
    "call": frozenset({"to_apply", "is_composite"}),
    "reduce": frozenset({"dimensions", "to_apply"}),
    "map": frozenset({"dimensions", "to_apply"}),
    "sort": frozenset({"dimensions", "is_stable", "to_apply"}),
    "dot": frozenset({"lhs_batch_dims", "rhs_batch_dims", "lhs_contracting_dims",
                      "rhs_contracting_dims", "operand_precision", "algorithm"}),
    "after-all": frozenset(), "add-dependency": frozenset(), "opt-barrier": frozenset(),
    "replica-id": frozenset(), "partition-id": frozenset(),
    "rng": frozenset({"distribution"}), "rng-bit-generator": frozenset({"algorithm"}),
}


def misplaced_attribute(opcode: str, name: str) -> str | None:
    """Why `name` does not belong on `opcode`, or None when it may be there."""
    allowed = ALLOWED.get(opcode)
    if allowed is None or name in COMMON or name in allowed:
        return None
    from .attributes import PARSERS
    if name not in PARSERS:  # unknown names are kept verbatim (attributes.py)
        return None
    takes = ", ".join(sorted(allowed)) if allowed else "no attributes of its own"
    return f"'{opcode}' does not take attribute '{name}' (it takes {takes})"


@lru_cache(maxsize=None)
def misplaced_names(opcode: str) -> frozenset[str]:
    """Every name misplaced_attribute refuses on `opcode`, as one set: the parser's common
    path checks an instruction's attribute names against it in one call (a call per name,
    30,000 at 22,500 instructions of a jax module, took twice as long: 2% of its parse)."""
    allowed = ALLOWED.get(opcode)
    if allowed is None:
        return frozenset()
    from .attributes import PARSERS
    return frozenset(n for n in PARSERS if n not in COMMON and n not in allowed)
