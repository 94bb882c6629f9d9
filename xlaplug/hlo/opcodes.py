"""Every HLO opcode XLA knows (xla/hlo/ir/hlo_opcode.h), and its families.

This is the one home of opcode families: shape rules, the verifier, the thunk builder, the
backends and the passes derive the sets they need from these (`xlaplug list-opcodes` shows
what each opcode gets from them)."""
from __future__ import annotations

from enum import Enum


class Op(str, Enum):
    # Spelled exactly as HLO text spells them.
    ABS = "abs"; ADD = "add"; ADD_DEPENDENCY = "add-dependency"; AFTER_ALL = "after-all"
    ALL_GATHER = "all-gather"; ALL_GATHER_START = "all-gather-start"; ALL_GATHER_DONE = "all-gather-done"
    ALL_REDUCE = "all-reduce"; ALL_REDUCE_START = "all-reduce-start"; ALL_REDUCE_DONE = "all-reduce-done"
    ALL_TO_ALL = "all-to-all"; AND = "and"; ASYNC_START = "async-start"; ASYNC_UPDATE = "async-update"
    ASYNC_DONE = "async-done"; ATAN2 = "atan2"; BATCH_NORM_GRAD = "batch-norm-grad"
    BATCH_NORM_INFERENCE = "batch-norm-inference"; BATCH_NORM_TRAINING = "batch-norm-training"
    BITCAST = "bitcast"; BITCAST_CONVERT = "bitcast-convert"; BROADCAST = "broadcast"; CALL = "call"
    CBRT = "cbrt"; CEIL = "ceil"; CHOLESKY = "cholesky"; CLAMP = "clamp"; CLZ = "count-leading-zeros"
    COLLECTIVE_BROADCAST = "collective-broadcast"; COLLECTIVE_PERMUTE = "collective-permute"
    COLLECTIVE_PERMUTE_START = "collective-permute-start"
    COLLECTIVE_PERMUTE_DONE = "collective-permute-done"; COMPARE = "compare"; COMPLEX = "complex"
    CONCATENATE = "concatenate"; CONDITIONAL = "conditional"; CONSTANT = "constant"
    CONVERT = "convert"; CONVOLUTION = "convolution"; COPY = "copy"; COPY_DONE = "copy-done"
    COPY_START = "copy-start"; COS = "cosine"; CUSTOM_CALL = "custom-call"; DIVIDE = "divide"
    DOMAIN = "domain"; DOT = "dot"; DYNAMIC_RESHAPE = "dynamic-reshape"; DYNAMIC_SLICE = "dynamic-slice"
    DYNAMIC_UPDATE_SLICE = "dynamic-update-slice"; ERF = "erf"; EXP = "exponential"
    EXPM1 = "exponential-minus-one"; FFT = "fft"; FLOOR = "floor"; FUSION = "fusion"
    GATHER = "gather"; GET_DIMENSION_SIZE = "get-dimension-size"
    SET_DIMENSION_SIZE = "set-dimension-size"; GET_TUPLE_ELEMENT = "get-tuple-element"
    IMAG = "imag"; INFEED = "infeed"; IOTA = "iota"; IS_FINITE = "is-finite"; LOG = "log"
    LOG1P = "log-plus-one"; LOGISTIC = "logistic"; MAP = "map"; MAXIMUM = "maximum"
    MINIMUM = "minimum"; MULTIPLY = "multiply"; NEGATE = "negate"; NOT = "not"
    OPTIMIZATION_BARRIER = "opt-barrier"; OR = "or"; OUTFEED = "outfeed"; PAD = "pad"
    PARAMETER = "parameter"; PARTITION_ID = "partition-id"; POPCNT = "popcnt"; POWER = "power"
    REAL = "real"; RECV = "recv"; RECV_DONE = "recv-done"; REDUCE = "reduce"
    REDUCE_PRECISION = "reduce-precision"; REDUCE_SCATTER = "reduce-scatter"
    REDUCE_WINDOW = "reduce-window"; REMAINDER = "remainder"; REPLICA_ID = "replica-id"
    RESHAPE = "reshape"; REVERSE = "reverse"; RNG = "rng"; RNG_BIT_GENERATOR = "rng-bit-generator"
    RNG_GET_AND_UPDATE_STATE = "rng-get-and-update-state"; ROUND_AFZ = "round-nearest-afz"
    ROUND_EVEN = "round-nearest-even"; RSQRT = "rsqrt"; SCATTER = "scatter"; SELECT = "select"
    SELECT_AND_SCATTER = "select-and-scatter"; SEND = "send"; SEND_DONE = "send-done"
    SHIFT_LEFT = "shift-left"; SHIFT_RIGHT_ARITHMETIC = "shift-right-arithmetic"
    SHIFT_RIGHT_LOGICAL = "shift-right-logical"; SIGN = "sign"; SIN = "sine"; SLICE = "slice"
    SORT = "sort"; SQRT = "sqrt"; STOCHASTIC_CONVERT = "stochastic-convert"; SUBTRACT = "subtract"
    TAN = "tan"; TANH = "tanh"; TOPK = "topk"; TRANSPOSE = "transpose"
    TRIANGULAR_SOLVE = "triangular-solve"; TUPLE = "tuple"; WHILE = "while"; XOR = "xor"
    RAGGED_ALL_TO_ALL = "ragged-all-to-all"; RAGGED_DOT = "ragged-dot"; SCAN = "scan"
    ERF_INV = "erf-inv"
    ACOS = "acos"; ACOSH = "acosh"; ASIN = "asin"; ASINH = "asinh"; ATANH = "atanh"
    COSH = "cosh"; SINH = "sinh"; SCALED_DOT = "scaled-dot"


ALL_OPCODES = frozenset(o.value for o in Op)

# Unary ops XLA:CPU computes only through their expansion into other ops (jax's chlo
# decompositions): their kernels run that expansion, and they have no scalar form.
EXPANDED_UNARY = frozenset({"acos", "acosh", "asin", "asinh", "atanh", "cosh", "sinh"})
UNARY_ELEMENTWISE = frozenset({
    "abs", "cbrt", "ceil", "count-leading-zeros", "cosine", "erf", "exponential",
    "exponential-minus-one", "floor", "imag", "is-finite", "log", "log-plus-one", "logistic",
    "negate", "not", "popcnt", "real", "round-nearest-afz", "round-nearest-even", "rsqrt",
    "sign", "sine", "sqrt", "tan", "tanh", "erf-inv", "copy",
}) | EXPANDED_UNARY
BINARY_ELEMENTWISE = frozenset({
    "add", "atan2", "complex", "divide", "maximum", "minimum", "multiply", "power",
    "remainder", "subtract", "and", "or", "xor", "shift-left", "shift-right-arithmetic",
    "shift-right-logical", "compare",
})
TERNARY_ELEMENTWISE = frozenset({"select", "clamp"})
ELEMENTWISE = UNARY_ELEMENTWISE | BINARY_ELEMENTWISE | TERNARY_ELEMENTWISE | {
    "convert", "bitcast-convert", "reduce-precision", "stochastic-convert", "map"}

COLLECTIVES = frozenset({
    "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
    "collective-broadcast", "ragged-all-to-all", "all-reduce-start", "all-gather-start",
    "collective-permute-start",
})
ASYNC_DONE = frozenset({"all-reduce-done", "all-gather-done", "collective-permute-done",
                        "async-done", "copy-done", "send-done", "recv-done"})
# Instructions that run a called computation (their thunks nest that computation's).
CONTROL_FLOW = frozenset({"while", "conditional", "call", "fusion", "async-start"})

# Instructions that create no new storage: they alias their operand(s) or the caller's.
ALIASING = frozenset({"parameter", "tuple", "get-tuple-element", "opt-barrier",
                      "add-dependency", "after-all"})

# Instructions whose result elements are operand elements, moved but never computed.
MOVES_ELEMENTS = frozenset({
    "copy", "copy-start", "copy-done", "reshape", "transpose", "broadcast", "slice",
    "dynamic-slice", "dynamic-update-slice", "concatenate", "pad", "reverse", "gather",
    "bitcast",
})

# Opcodes XLA exempts from the mixed-precision operand check (CheckMixedPrecisionOperands).
MIXED_PRECISION_OK = frozenset({
    "call", "conditional", "constant", "convolution", "dot", "scaled-dot", "all-reduce",
    "all-reduce-start",
    "all-reduce-done", "all-gather", "all-gather-start", "all-gather-done", "async-done",
    "async-update", "async-start", "copy-done", "copy-start", "custom-call", "domain", "fusion",
    "get-tuple-element", "opt-barrier", "infeed", "outfeed", "parameter", "recv", "recv-done",
    "reduce-precision", "reduce-window", "send", "send-done", "sort", "tuple", "while",
    "ragged-dot", "scan",
})

# Instructions whose effects matter even when nothing uses their value.
_ALWAYS_SIDE_EFFECTING = frozenset({
    "send", "send-done", "recv", "recv-done", "infeed", "outfeed", "after-all",
    "rng", "rng-get-and-update-state", "add-dependency",
})


def has_side_effect(instr) -> bool:
    op = instr.opcode
    if op in _ALWAYS_SIDE_EFFECTING:
        return True
    if op == "custom-call":
        return bool(instr.attrs.get("custom_call_has_side_effect", False))
    if op in ("all-reduce", "all-reduce-start") and "channel_id" in instr.attrs:
        return False
    return False


def is_known(opcode: str) -> bool:
    return opcode in ALL_OPCODES

# A shard_map region of a program before partitioning (passes/sdy_shard_map.py makes it):
# a custom call the executor itself runs, on every device of the region's mesh.
SHARD_MAP_TARGET = "xlaplug.shard_map"
# The computation jax calls for a shard_map region's body (its name starts so).
SHARD_MAP_BODY = "xla.sdy.manual_computation_body"
RUNTIME_CUSTOM_CALLS = frozenset({SHARD_MAP_TARGET})
