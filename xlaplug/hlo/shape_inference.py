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
"""
from __future__ import annotations

from typing import Callable

from . import dtypes
from .attr_types import ConvDims, Padding, ReplicaGroups, SliceRanges, Window
from .ir import UNBOUNDED, Computation, Instruction, Shape
from .opcodes import ALL_OPCODES


class ShapeInferenceError(ValueError):
    """An instruction's operands or attributes break XLA's shape rules."""


RuleFn = Callable[[Instruction], Shape]
RULES: dict[str, RuleFn] = {}

# Opcodes whose result is the declared shape (after whatever operand checks are possible).
TRUST_DECLARED = frozenset({"parameter", "constant", "custom-call", "bitcast", "scan",
                            "ragged-dot"})


def rule(*opcodes: str):
    """Register `fn` as the shape rule of each of `opcodes`."""
    def deco(fn: RuleFn) -> RuleFn:
        for op in opcodes:
            if op not in ALL_OPCODES:
                raise ValueError(f"rule for unknown opcode '{op}'")
            if op in RULES:
                raise ValueError(f"two rules for opcode '{op}'")
            RULES[op] = fn
        return fn
    return deco


# ---- helpers ----------------------------------------------------------------------------

def s(shape: Shape) -> str:
    """A shape as messages print it (no layout)."""
    return str(shape.without_layout())


def _err(msg: str) -> ShapeInferenceError:
    return ShapeInferenceError(msg)


def _array(shape: Shape, what: str) -> Shape:
    if not shape.is_array:
        raise _err(f"expected an array for {what}, got {s(shape)}")
    return shape


def _shape(etype: str, dims, dynamic=None) -> Shape:
    dims = tuple(int(d) for d in dims)
    dyn = tuple(bool(x) for x in dynamic) if dynamic is not None else (False,) * len(dims)
    return Shape(etype, dims, dyn)


def _with_type(shape: Shape, etype: str) -> Shape:
    return Shape(etype, shape.dims, shape.dynamic)


def _scalar(etype: str) -> Shape:
    return Shape(etype)


TOKEN = Shape("token")


def is_floating(t: str) -> bool:
    return t in dtypes.FLOAT_TYPES


def is_complex(t: str) -> bool:
    return t in dtypes.COMPLEX_TYPES


def is_integral(t: str) -> bool:
    return t in dtypes.INTEGRAL_TYPES


def is_signed(t: str) -> bool:
    """XLA's ElementIsSigned: signed integers and floating point."""
    return t in dtypes.SIGNED_TYPES or t in dtypes.FLOAT_TYPES


def bit_width(t: str) -> int:
    return dtypes.bit_width(t)


def same_type_ignoring_fp(a: str, b: str) -> bool:
    return a == b or (is_floating(a) and is_floating(b))


def higher_precision(a: str, b: str) -> str:
    if a == b:
        return a
    if not is_floating(a):
        return b if is_floating(b) else a
    if not is_floating(b):
        return a
    return b if bit_width(b) > bit_width(a) else a


def dim_eq(a: int, b: int) -> bool:
    """Dimension sizes agree: equal, or either is unbounded (`?`), as in XLA."""
    return a == b or a == UNBOUNDED or b == UNBOUNDED


def same_dims(a: Shape, b: Shape) -> bool:
    """XLA's ShapeUtil::SameDimensions: same rank, sizes agree (`?` matches any size)."""
    return a.rank == b.rank and all(dim_eq(x, y) for x, y in zip(a.dims, b.dims))


def _merge_dim(a: int, b: int) -> int:
    return b if a == UNBOUNDED else a


def compatible(a: Shape, b: Shape, ignore_fp: bool = False) -> bool:
    """XLA's ShapeUtil::Compatible: same element types and dimensions; layouts and the dynamic
    flag of bounded dimensions ignored (`f32[<=4]` ~ `f32[4]`), `?` matches any size."""
    if a.is_tuple or b.is_tuple:
        return (a.is_tuple and b.is_tuple and len(a.tuple_shapes) == len(b.tuple_shapes)
                and all(compatible(x, y, ignore_fp) for x, y in zip(a.tuple_shapes, b.tuple_shapes)))
    if a.element_type != b.element_type:
        if not (ignore_fp and is_floating(a.element_type) and is_floating(b.element_type)):
            return False
    return a.dims == b.dims or same_dims(a, b)


def _is_scalar(shape: Shape) -> bool:
    return shape.is_array and shape.rank == 0


def _attr(ins: Instruction, name: str, default=KeyError):
    if name in ins.attrs:
        return ins.attrs[name]
    if default is KeyError:
        raise _err(f"missing attribute '{name}'")
    return default


def _int_attr(ins, name, default=KeyError) -> int:
    v = _attr(ins, name, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise _err(f"attribute '{name}' must be an integer, got {v}")
    return v


def _ints_attr(ins, name, default=KeyError) -> tuple[int, ...]:
    v = _attr(ins, name, default)
    if not isinstance(v, tuple) or not all(isinstance(x, int) for x in v):
        raise _err(f"attribute '{name}' must be an integer list, got {v}")
    return v


def _one_dim_attr(ins, name="dimensions") -> int:
    dims = _ints_attr(ins, name)
    if len(dims) != 1:
        raise _err(f"attribute '{name}' must name exactly one dimension, got {{{_j(dims)}}}")
    return dims[0]


def _comp(ins, name) -> Computation:
    c = _attr(ins, name)
    if isinstance(c, list):
        if len(c) != 1:
            raise _err(f"attribute '{name}' must name one computation, names {len(c)}")
        c = c[0]
    if not isinstance(c, Computation):
        raise _err(f"attribute '{name}' must name a computation, got {c}")
    return c


def _j(xs) -> str:
    return ",".join(str(x) for x in xs)


def _ops(ins) -> list[Shape]:
    return [o.shape for o in ins.operands]


def program_shape(comp: Computation) -> tuple[list[Shape], Shape]:
    if comp.root is None:
        raise _err(f"computation '{comp.name}' has no ROOT")
    return [p.shape for p in comp.parameters], comp.root.shape


def expect_params(comp: Computation, n: int, role: str) -> list[Shape]:
    params, _ = program_shape(comp)
    if len(params) != n:
        raise _err(f"{role} computation '{comp.name}' must take {n} parameter"
                   f"{'s' if n != 1 else ''}, but takes {len(params)}")
    return params


def _check_range(dims, rank: int, what: str) -> None:
    for d in dims:
        if d < 0 or d >= rank:
            raise _err(f"{what} {d} is out of range for rank {rank}")


def _check_unique(dims, what: str) -> None:
    if len(set(dims)) != len(dims):
        raise _err(f"{what} {{{_j(dims)}}} repeat a dimension")


def _check_sorted_unique(dims, what: str) -> None:
    if list(dims) != sorted(set(dims)):
        raise _err(f"{what} {{{_j(dims)}}} must be sorted and not repeat")


# ---- operand counts ----------------------------------------------------------------------

_UNARY = {"abs", "cbrt", "ceil", "count-leading-zeros", "cosine", "erf", "erf-inv", "exponential",
          "exponential-minus-one", "floor", "imag", "is-finite", "log", "log-plus-one",
          "logistic", "negate", "not", "popcnt", "real", "round-nearest-afz",
          "round-nearest-even", "rsqrt", "sign", "sine", "sqrt", "tan", "tanh"}
_BINARY = {"add", "atan2", "complex", "divide", "maximum", "minimum", "multiply", "power",
           "remainder", "subtract", "and", "or", "xor", "shift-left", "shift-right-arithmetic",
           "shift-right-logical", "compare"}

# Exact operand counts (XLA's HloOpcodeArity, plus the fixed-arity ops it leaves variadic).
EXACT_OPERANDS: dict[str, int] = {
    **{op: 1 for op in _UNARY}, **{op: 2 for op in _BINARY},
    "select": 3, "clamp": 3, "copy": 1, "convert": 1, "bitcast-convert": 1,
    "reduce-precision": 1, "stochastic-convert": 2, "bitcast": 1, "broadcast": 1, "reshape": 1,
    "transpose": 1, "reverse": 1, "slice": 1, "pad": 2, "iota": 0, "parameter": 0,
    "constant": 0, "replica-id": 0, "partition-id": 0, "rng-get-and-update-state": 0,
    "get-tuple-element": 1, "get-dimension-size": 1, "set-dimension-size": 2, "convolution": 2,
    "fft": 1, "cholesky": 1, "triangular-solve": 2, "rng": 2, "rng-bit-generator": 1,
    "add-dependency": 2, "opt-barrier": 1, "while": 1, "copy-start": 1, "copy-done": 1,
    "send": 2, "send-done": 1, "recv": 1, "recv-done": 1, "infeed": 1, "outfeed": 2,
    "select-and-scatter": 3, "gather": 2, "async-update": 1, "async-done": 1,
    "all-reduce-done": 1, "all-gather-done": 1, "collective-permute-done": 1, "domain": 1,
    "batch-norm-training": 3, "batch-norm-inference": 5, "batch-norm-grad": 5, "topk": 1,
    "ragged-dot": 3, "ragged-all-to-all": 6,
}
# Minimum operand counts of the variadic ones (their exact count is checked by the rule).
MIN_OPERANDS: dict[str, int] = {
    "dynamic-slice": 1, "dynamic-update-slice": 2, "reduce": 2, "reduce-window": 2,
    "scatter": 3, "sort": 1, "map": 1, "concatenate": 1, "conditional": 2, "all-reduce": 1,
    "all-gather": 1, "reduce-scatter": 1, "all-to-all": 1, "all-reduce-start": 1,
    "all-gather-start": 1, "collective-broadcast": 1, "dynamic-reshape": 1,
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
        if n not in (1, 4):
            raise _err(f"{op} expects 1 or 4 operands, but has {n}")
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

def has_unbounded(shape: Shape) -> bool:
    return any(d == UNBOUNDED for leaf in shape.leaves() for d in leaf.dims)


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


# ---- trusted -----------------------------------------------------------------------------

@rule("parameter", "constant", "scan", "ragged-dot")
def _declared(ins):
    return ins.shape


@rule("custom-call")
def _custom_call(ins):
    cons = ins.attrs.get("operand_layout_constraints")
    if cons is not None:
        if len(cons) != len(ins.operands):
            raise _err(f"custom-call has {len(ins.operands)} operands but "
                       f"{len(cons)} operand_layout_constraints")
        for i, (c, o) in enumerate(zip(cons, ins.operands)):
            if not compatible(c, o.shape):
                raise _err(f"operand {i} is {s(o.shape)} but its layout constraint is {s(c)}")
    return ins.shape


@rule("bitcast")
def _bitcast(ins):
    op = ins.operands[0].shape
    if not has_unbounded(op) and not has_unbounded(ins.shape) and \
            op.byte_size() != ins.shape.byte_size():
        raise _err(f"bitcast changes the byte size: operand {s(op)} is {op.byte_size()} bytes, "
                   f"declared {s(ins.shape)} is {ins.shape.byte_size()} bytes")
    return ins.shape


# ---- elementwise -------------------------------------------------------------------------

def _unary_check(op: str, t: str) -> str | None:
    """Result element type of unary `op` on `t`, or None when `t` is not allowed."""
    if op in ("floor", "ceil", "round-nearest-afz", "round-nearest-even", "erf", "erf-inv"):
        return t if is_floating(t) else None
    if op in ("cosine", "sine", "exponential", "exponential-minus-one", "log", "log-plus-one",
              "logistic", "rsqrt", "sqrt", "cbrt", "tanh", "tan"):
        return t if is_floating(t) or is_complex(t) else None
    if op in ("real", "imag"):
        return dtypes.complex_component(t) if is_complex(t) else (t if is_floating(t) else None)
    if op == "abs":
        return dtypes.complex_component(t) if is_complex(t) else (t if is_signed(t) else None)
    if op in ("count-leading-zeros", "popcnt"):
        return t if is_integral(t) else None
    if op == "negate":
        return t if is_integral(t) or is_floating(t) or is_complex(t) else None
    if op == "sign":
        return t if is_signed(t) or is_complex(t) else None
    if op == "not":
        return t if t == "pred" or is_integral(t) else None
    if op == "is-finite":
        return "pred" if is_floating(t) else None
    raise _err(f"no unary rule for {op}")


_UNARY_NEEDS = {
    "floor": "floating-point", "ceil": "floating-point", "round-nearest-afz": "floating-point",
    "round-nearest-even": "floating-point", "erf": "floating-point",
    "erf-inv": "floating-point", "is-finite": "floating-point", "real": "floating-point or complex",
    "imag": "floating-point or complex", "abs": "signed, floating-point or complex",
    "count-leading-zeros": "integral", "popcnt": "integral",
    "negate": "integral, floating-point or complex", "sign": "signed, floating-point or complex",
    "not": "pred or integral",
}


@rule(*sorted(_UNARY))
def _unary(ins):
    op = _array(ins.operands[0].shape, f"the operand of {ins.opcode}")
    t = _unary_check(ins.opcode, op.element_type)
    if t is None:
        need = _UNARY_NEEDS.get(ins.opcode, "floating-point or complex")
        raise _err(f"{ins.opcode} needs a {need} operand, got {s(op)}")
    return _with_type(op, t)


@rule("copy", "domain", "opt-barrier")
def _same_as_operand(ins):
    return ins.operands[0].shape


def _degenerate_broadcast(opcode, lhs: Shape, rhs: Shape) -> tuple[tuple[int, ...], tuple[bool, ...]]:
    dims, dyn = [], []
    for a, b, da, db in zip(lhs.dims, rhs.dims, lhs.dynamic, rhs.dynamic):
        if a == b:
            dims.append(a)
        elif a == 1:
            dims.append(b)
        elif b == 1:
            dims.append(a)
        elif a == UNBOUNDED or b == UNBOUNDED:
            dims.append(_merge_dim(a, b))
        else:
            raise _err(f"{opcode} operands have incompatible shapes {s(lhs)} and {s(rhs)}")
        dyn.append(da or db)
    return tuple(dims), tuple(dyn)


def binary_shape(opcode: str, lhs: Shape, rhs: Shape) -> Shape:
    """XLA's InferElementwiseBinaryOpShape with no broadcast_dimensions (as in HLO)."""
    _array(lhs, f"the lhs of {opcode}")
    _array(rhs, f"the rhs of {opcode}")
    if not same_type_ignoring_fp(lhs.element_type, rhs.element_type):
        raise _err(f"{opcode} operands have different element types: {s(lhs)} and {s(rhs)}")
    etype = higher_precision(lhs.element_type, rhs.element_type)
    if lhs.rank == rhs.rank:
        dims, dyn = _degenerate_broadcast(opcode, lhs, rhs)
        return _shape(etype, dims, dyn)
    # Different ranks: only a scalar broadcasts implicitly (XLA rejects the rest without
    # explicit broadcast dimensions, which HLO never has).
    small, large = (lhs, rhs) if lhs.rank < rhs.rank else (rhs, lhs)
    if small.rank != 0:
        raise _err(f"{opcode} operands must have the same rank, got {s(lhs)} and {s(rhs)}")
    return _shape(etype, large.dims, large.dynamic)


_NO_PRED = {"subtract", "atan2", "power", "divide", "remainder", "shift-left",
            "shift-right-arithmetic", "shift-right-logical"}


@rule(*sorted(_BINARY))
def _binary(ins):
    op = ins.opcode
    lhs, rhs = _ops(ins)
    if op in _NO_PRED and (lhs.element_type == "pred" or rhs.element_type == "pred"):
        raise _err(f"{op} needs arithmetic operands, got {s(lhs)} and {s(rhs)}")
    if op in ("and", "or", "xor") and lhs.is_array and not (
            lhs.element_type == "pred" or is_integral(lhs.element_type)):
        raise _err(f"{op} needs pred or integral operands, got {s(lhs)} and {s(rhs)}")
    if op == "complex":
        if lhs.is_array and not is_floating(lhs.element_type):
            raise _err(f"complex needs floating-point operands, got {s(lhs)} and {s(rhs)}")
        shape = binary_shape(op, lhs, rhs)
        pair = (lhs.element_type, rhs.element_type)
        if pair == ("f32", "f32"):
            return _with_type(shape, "c64")
        if pair == ("f64", "f64"):
            return _with_type(shape, "c128")
        raise _err(f"complex needs two f32 or two f64 operands, got {s(lhs)} and {s(rhs)}")
    shape = binary_shape(op, lhs, rhs)
    if op == "compare":
        d = _attr(ins, "direction")
        if str(d) not in ("EQ", "NE", "LT", "LE", "GT", "GE"):
            raise _err(f"compare direction must be EQ, NE, LT, LE, GT or GE, got {d}")
        t = ins.attrs.get("type")
        if t is not None and str(t) not in ("FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED",
                                            "PARTIALORDER"):
            raise _err(f"unknown compare type {t}")
        return _with_type(shape, "pred")
    return shape


@rule("select")
def _select(ins):
    pred, on_true, on_false = _ops(ins)
    for x, what in ((pred, "pred"), (on_true, "on_true"), (on_false, "on_false")):
        _array(x, f"the {what} operand of select")
    if not compatible(on_true, on_false, ignore_fp=True):
        raise _err(f"select branches must have the same shape, got {s(on_true)} and "
                   f"{s(on_false)}")
    if pred.element_type != "pred":
        raise _err(f"select predicate must be pred, got {s(pred)}")
    if pred.rank != 0 and not same_dims(pred, on_true):
        raise _err(f"select predicate {s(pred)} must be a scalar or match the branches "
                   f"{s(on_true)}")
    dyn = tuple(a or b for a, b in zip(on_true.dynamic, on_false.dynamic))
    dims = [_merge_dim(a, b) for a, b in zip(on_true.dims, on_false.dims)]
    return _shape(higher_precision(on_true.element_type, on_false.element_type), dims, dyn)


@rule("clamp")
def _clamp(ins):
    lo, x, hi = _ops(ins)
    for y, what in ((lo, "min"), (x, "operand"), (hi, "max")):
        _array(y, f"the {what} of clamp")
    for b in (lo, hi):
        ok = (compatible(b, x, ignore_fp=True) or
              (b.rank == 0 and same_type_ignoring_fp(b.element_type, x.element_type)))
        if not ok:
            raise _err(f"clamp bounds must be scalars or match the operand, got "
                       f"{s(lo)}, {s(x)}, {s(hi)}")
    return x


@rule("convert")
def _convert(ins):
    op = _array(ins.operands[0].shape, "the operand of convert")
    if not ins.shape.is_array:
        raise _err(f"convert result must be an array, declared {s(ins.shape)}")
    return _with_type(op, ins.shape.element_type)


@rule("bitcast-convert")
def _bitcast_convert(ins):
    op = ins.operands[0].shape
    new = ins.shape.element_type
    if not op.is_array or not ins.shape.is_array:
        raise _err(f"bitcast-convert needs arrays, got {s(op)} to {s(ins.shape)}")
    old = op.element_type
    if is_complex(old) != is_complex(new):
        raise _err(f"bitcast-convert between complex and real types: {s(op)} to {new}")
    a, b = bit_width(old), bit_width(new)
    if max(a, b) % min(a, b):
        raise _err(f"bitcast-convert between types of indivisible bit widths: {old} ({a} bits) "
                   f"to {new} ({b} bits)")
    ratio = max(a, b) // min(a, b)
    if a > b:
        return _shape(new, op.dims + (ratio,), op.dynamic + (False,))
    if a < b:
        if op.rank < 1 or not dim_eq(op.dims[-1], ratio):
            raise _err(f"bitcast-convert from {old} to {new} needs a last dimension of {ratio}, "
                       f"operand is {s(op)}")
        return _shape(new, op.dims[:-1], op.dynamic[:-1])
    return _with_type(op, new)


@rule("stochastic-convert")
def _stochastic_convert(ins):
    op, rnd = _ops(ins)
    _array(op, "the operand of stochastic-convert")
    _array(rnd, "the random operand of stochastic-convert")
    if rnd.element_type not in dtypes.UNSIGNED_TYPES:
        raise _err(f"stochastic-convert random bits must be unsigned integers, got {s(rnd)}")
    if not is_floating(op.element_type):
        raise _err(f"stochastic-convert needs a floating-point operand, got {s(op)}")
    if bit_width(op.element_type) != bit_width(rnd.element_type):
        raise _err(f"stochastic-convert random bits {s(rnd)} must be as wide as the operand {s(op)}")
    if not same_dims(op, rnd):
        raise _err(f"stochastic-convert operand {s(op)} and random bits {s(rnd)} differ in shape")
    return _with_type(op, ins.shape.element_type)


@rule("reduce-precision")
def _reduce_precision(ins):
    op = _array(ins.operands[0].shape, "the operand of reduce-precision")
    if not is_floating(op.element_type):
        raise _err(f"reduce-precision needs a floating-point operand, got {s(op)}")
    e = _int_attr(ins, "exponent_bits")
    m = _int_attr(ins, "mantissa_bits")
    if e < 1:
        raise _err(f"reduce-precision exponent_bits must be >= 1, got {e}")
    if m < 0:
        raise _err(f"reduce-precision mantissa_bits must be >= 0, got {m}")
    return op


@rule("map")
def _map(ins):
    shapes = _ops(ins)
    comp = _comp(ins, "to_apply")
    params, result = program_shape(comp)
    arg = _array(shapes[0], "operand 0 of map")
    for i, x in enumerate(shapes[1:], 1):
        _array(x, f"operand {i} of map")
        if same_dims(x, arg):
            continue
        raise _err(f"map operands must have the same dimensions, got "
                   f"{', '.join(s(y) for y in shapes)}")
    dims = ins.attrs.get("dimensions")
    if dims is not None and tuple(dims) != tuple(range(arg.rank)):
        raise _err(f"map dimensions must be {{{_j(range(arg.rank))}}}, got {{{_j(dims)}}}")
    if len(params) != len(shapes):
        raise _err(f"to_apply computation '{comp.name}' takes {len(params)} parameters but map "
                   f"has {len(shapes)} operands")
    if not _is_scalar(result):
        raise _err(f"map computation '{comp.name}' must return a scalar, returns {s(result)}")
    for i, (p, x) in enumerate(zip(params, shapes)):
        if not _is_scalar(p):
            raise _err(f"map computation '{comp.name}' parameter {i} must be a scalar, is {s(p)}")
        if not same_type_ignoring_fp(p.element_type, x.element_type):
            raise _err(f"map computation '{comp.name}' parameter {i} is {s(p)} but operand {i} "
                       f"is {s(x)}")
    return _shape(result.element_type, arg.dims, arg.dynamic)


# ---- shape manipulation ------------------------------------------------------------------

@rule("broadcast")
def _broadcast(ins):
    op = _array(ins.operands[0].shape, "the operand of broadcast")
    out = ins.shape
    if not out.is_array:
        raise _err(f"broadcast result must be an array, declared {s(out)}")
    bdims = _ints_attr(ins, "dimensions")
    if len(bdims) != op.rank:
        raise _err(f"broadcast dimensions {{{_j(bdims)}}} must name one result dimension per "
                   f"operand dimension of {s(op)}")
    _check_range(bdims, out.rank, "broadcast dimension")
    dims, dyn = list(out.dims), list(out.dynamic)
    for i, d in enumerate(bdims):
        dims[d] = op.dims[i]
        dyn[d] = op.dynamic[i]
    return _shape(op.element_type, dims, dyn)


def _count_differs(a: Shape, b: Shape) -> bool:
    if has_unbounded(a) or has_unbounded(b):
        return False
    return a.num_elements() != b.num_elements()


@rule("reshape")
def _reshape(ins):
    op = _array(ins.operands[0].shape, "the operand of reshape")
    out = ins.shape
    if not out.is_array:
        raise _err(f"reshape result must be an array, declared {s(out)}")
    inferred = Shape(op.element_type, out.dims, out.dynamic)
    if _count_differs(op, out):
        raise _err(f"cannot reshape {s(op)} ({op.num_elements()} elements) to declared "
                   f"{s(out)} ({out.num_elements()} elements)")
    return inferred


@rule("dynamic-reshape")
def _dynamic_reshape(ins):
    op = _array(ins.operands[0].shape, "the operand of dynamic-reshape")
    out = ins.shape
    if not out.is_array:
        raise _err(f"dynamic-reshape result must be an array, declared {s(out)}")
    if len(ins.operands) != out.rank + 1:
        raise _err(f"dynamic-reshape to rank {out.rank} needs {out.rank + 1} operands, has "
                   f"{len(ins.operands)}")
    for i, x in enumerate(_ops(ins)[1:], 1):
        if x.element_type != "s32" or x.rank != 0:
            raise _err(f"dynamic-reshape size operand {i} must be s32[], got {s(x)}")
    if _count_differs(op, out):
        raise _err(f"cannot reshape {s(op)} ({op.num_elements()} elements) to declared "
                   f"{s(out)} ({out.num_elements()} elements)")
    return Shape(op.element_type, out.dims, out.dynamic)


@rule("transpose")
def _transpose(ins):
    op = _array(ins.operands[0].shape, "the operand of transpose")
    perm = _ints_attr(ins, "dimensions")
    if sorted(perm) != list(range(op.rank)):
        raise _err(f"transpose dimensions {{{_j(perm)}}} are not a permutation of the "
                   f"dimensions of {s(op)}")
    return _shape(op.element_type, [op.dims[p] for p in perm], [op.dynamic[p] for p in perm])


@rule("reverse")
def _reverse(ins):
    op = _array(ins.operands[0].shape, "the operand of reverse")
    dims = _ints_attr(ins, "dimensions")
    _check_unique(dims, "reverse dimensions")
    _check_range(dims, op.rank, "reverse dimension")
    return op


@rule("concatenate")
def _concatenate(ins):
    shapes = _ops(ins)
    d = _one_dim_attr(ins)
    first = _array(shapes[0], "operand 0 of concatenate")
    if d < 0 or d >= first.rank:
        raise _err(f"concatenate dimension {d} is out of range for {s(first)}")
    etype = first.element_type
    total = 0
    dyn = list(first.dynamic)
    for i, x in enumerate(shapes):
        _array(x, f"operand {i} of concatenate")
        if x.rank != first.rank:
            raise _err(f"concatenate operands have different ranks: {s(first)} and {s(x)}")
        if not same_type_ignoring_fp(x.element_type, first.element_type):
            raise _err(f"concatenate operands have different element types: {s(first)} and "
                       f"{s(x)}")
        for k in range(first.rank):
            if k != d and not dim_eq(x.dims[k], first.dims[k]):
                raise _err(f"concatenate operands differ in dimension {k}, which is not the "
                           f"concatenated one ({d}): {s(first)} and {s(x)}")
            dyn[k] = dyn[k] or x.dynamic[k]
        total = UNBOUNDED if UNBOUNDED in (total, x.dims[d]) else total + x.dims[d]
        etype = higher_precision(etype, x.element_type)
    dims = list(first.dims)
    dims[d] = total
    return _shape(etype, dims, dyn)


@rule("slice")
def _slice(ins):
    op = _array(ins.operands[0].shape, "the operand of slice")
    sl = _attr(ins, "slice")
    if not isinstance(sl, SliceRanges):
        raise _err(f"attribute 'slice' must be slice ranges, got {sl}")
    if len(sl.dims) != op.rank:
        raise _err(f"slice has {len(sl.dims)} ranges but the operand {s(op)} has rank {op.rank}")
    dims, dyn = [], []
    for i, r in enumerate(sl.dims):
        if r.start < 0:
            raise _err(f"slice start {r.start} in dimension {i} is negative")
        if op.dims[i] != UNBOUNDED and r.limit > op.dims[i]:
            raise _err(f"slice limit {r.limit} in dimension {i} exceeds the operand's size "
                       f"{op.dims[i]} ({s(op)})")
        if r.start > r.limit:
            raise _err(f"slice start {r.start} exceeds limit {r.limit} in dimension {i}")
        if r.stride <= 0:
            raise _err(f"slice stride {r.stride} in dimension {i} must be positive")
        n = (r.limit - r.start + r.stride - 1) // r.stride
        dims.append(n)
        dyn.append(op.dynamic[i] and n != 1)
    return _shape(op.element_type, dims, dyn)


def _index_operands(opcode: str, op: Shape, idx: list[Shape]) -> None:
    if len(idx) == 1 and idx[0].is_array and idx[0].rank == 1:
        ix = idx[0]
        if not is_integral(ix.element_type):
            raise _err(f"{opcode} start indices must be integers, got {s(ix)}")
        if not dim_eq(ix.dims[0], op.rank):
            raise _err(f"{opcode} start indices {s(ix)} must have one index per dimension of "
                       f"{s(op)}")
        return
    if len(idx) != op.rank:
        raise _err(f"{opcode} of {s(op)} needs {op.rank} start indices, has {len(idx)}")
    for i, ix in enumerate(idx):
        if not _is_scalar(ix):
            raise _err(f"{opcode} start index {i} must be a scalar, got {s(ix)}")
        if not is_integral(ix.element_type):
            raise _err(f"{opcode} start index {i} must be an integer, got {s(ix)}")
        if ix.element_type != idx[0].element_type:
            raise _err(f"{opcode} start indices must all have the same type, got {s(idx[0])} "
                       f"and {s(ix)}")


@rule("dynamic-slice")
def _dynamic_slice(ins):
    shapes = _ops(ins)
    op = _array(shapes[0], "the operand of dynamic-slice")
    _index_operands("dynamic-slice", op, shapes[1:])
    sizes = _ints_attr(ins, "dynamic_slice_sizes")
    if len(sizes) != op.rank:
        raise _err(f"dynamic-slice has {len(sizes)} slice sizes but the operand {s(op)} has "
                   f"rank {op.rank}")
    for i, (n, d) in enumerate(zip(sizes, op.dims)):
        if n < 0:
            raise _err(f"dynamic-slice size {n} in dimension {i} is negative")
        if d != UNBOUNDED and n > d:
            raise _err(f"dynamic-slice size {n} in dimension {i} exceeds the operand's size {d} "
                       f"({s(op)})")
    return _shape(op.element_type, sizes)


@rule("dynamic-update-slice")
def _dynamic_update_slice(ins):
    shapes = _ops(ins)
    op = _array(shapes[0], "the operand of dynamic-update-slice")
    upd = _array(shapes[1], "the update of dynamic-update-slice")
    _index_operands("dynamic-update-slice", op, shapes[2:])
    if upd.rank != op.rank:
        raise _err(f"dynamic-update-slice update {s(upd)} must have the rank of the operand "
                   f"{s(op)}")
    if not same_type_ignoring_fp(op.element_type, upd.element_type):
        raise _err(f"dynamic-update-slice update {s(upd)} and operand {s(op)} have different "
                   f"element types")
    for i, (u, d) in enumerate(zip(upd.dims, op.dims)):
        if UNBOUNDED not in (u, d) and u > d:
            raise _err(f"dynamic-update-slice update {s(upd)} is larger than the operand {s(op)} "
                       f"in dimension {i}")
    dyn = tuple(a or (b and u == d) for a, b, u, d in zip(op.dynamic, upd.dynamic, upd.dims,
                                                           op.dims))
    return _shape(op.element_type, op.dims, dyn)


@rule("pad")
def _pad(ins):
    op, val = _ops(ins)
    _array(op, "the operand of pad")
    if not _is_scalar(val):
        raise _err(f"pad value must be a scalar, got {s(val)}")
    cfg = _attr(ins, "padding")
    if not isinstance(cfg, Padding):
        raise _err(f"attribute 'padding' must be a padding config, got {cfg}")
    if len(cfg.dims) != op.rank:
        raise _err(f"padding has {len(cfg.dims)} dimensions but the operand {s(op)} has rank "
                   f"{op.rank}")
    if not same_type_ignoring_fp(op.element_type, val.element_type):
        raise _err(f"pad operand {s(op)} and padding value {s(val)} have different element types")
    dims = []
    for i, (p, d) in enumerate(zip(cfg.dims, op.dims)):
        if p.interior < 0:
            raise _err(f"interior padding {p.interior} in dimension {i} is negative")
        if d == UNBOUNDED:
            dims.append(UNBOUNDED)
            continue
        n = d + p.lo + p.hi + max(d - 1, 0) * p.interior
        if n < 0:
            raise _err(f"padding {p.lo}_{p.hi}_{p.interior} makes dimension {i} of {s(op)} "
                       f"negative ({n})")
        dims.append(n)
    return _shape(higher_precision(op.element_type, val.element_type), dims, op.dynamic)


@rule("iota")
def _iota(ins):
    out = ins.shape
    if not out.is_array:
        raise _err(f"iota result must be an array, declared {s(out)}")
    if out.rank == 0:
        raise _err("iota result must have rank >= 1")
    d = _int_attr(ins, "iota_dimension")
    if d < 0 or d >= out.rank:
        raise _err(f"iota_dimension {d} is out of range for {s(out)}")
    t = out.element_type
    if not (is_integral(t) or is_floating(t) or is_complex(t)):
        raise _err(f"iota of {t} is not supported (integral, floating-point or complex only)")
    return out


@rule("get-tuple-element")
def _gte(ins):
    op = ins.operands[0].shape
    i = _int_attr(ins, "index")
    if not op.is_tuple:
        raise _err(f"get-tuple-element of a non-tuple {s(op)}")
    if i < 0 or i >= len(op.tuple_shapes):
        raise _err(f"get-tuple-element index {i} is out of range for {s(op)} "
                   f"({len(op.tuple_shapes)} elements)")
    return op.tuple_shapes[i]


@rule("tuple")
def _tuple(ins):
    return Shape.tuple_of(_ops(ins))


@rule("get-dimension-size")
def _get_dimension_size(ins):
    op = _array(ins.operands[0].shape, "the operand of get-dimension-size")
    d = _one_dim_attr(ins)
    if d < 0 or d >= op.rank:
        raise _err(f"get-dimension-size dimension {d} is out of range for {s(op)}")
    return _scalar("s32")


@rule("set-dimension-size")
def _set_dimension_size(ins):
    op, val = _ops(ins)
    _array(op, "the operand of set-dimension-size")
    d = _one_dim_attr(ins)
    if d < 0 or d >= op.rank:
        raise _err(f"set-dimension-size dimension {d} is out of range for {s(op)}")
    if val.is_tuple or val.rank != 0 or val.element_type != "s32":
        raise _err(f"set-dimension-size value must be s32[], got {s(val)}")
    dyn = list(op.dynamic)
    dyn[d] = True
    return _shape(op.element_type, op.dims, dyn)


# ---- dot and convolution -----------------------------------------------------------------

def _upcast(from_type: str, preferred: str, opcode: str) -> str:
    if preferred != from_type and not is_floating(from_type) and \
            bit_width(preferred) < bit_width(from_type):
        raise _err(f"{opcode} result type {preferred} must not be narrower than the operand "
                   f"type {from_type}")
    return preferred


@rule("dot")
def _dot(ins):
    if "sparsity" in ins.attrs:
        return ins.shape  # sparse dot: metadata operands, compressed lhs -- trusted
    lhs, rhs = _ops(ins)
    _array(lhs, "the lhs of dot")
    _array(rhs, "the rhs of dot")
    lc = _ints_attr(ins, "lhs_contracting_dims", ())
    rc = _ints_attr(ins, "rhs_contracting_dims", ())
    lb = _ints_attr(ins, "lhs_batch_dims", ())
    rb = _ints_attr(ins, "rhs_batch_dims", ())
    _check_range(lc + lb, lhs.rank, f"dot lhs dimension (lhs is {s(lhs)})")
    _check_range(rc + rb, rhs.rank, f"dot rhs dimension (rhs is {s(rhs)})")
    _check_unique(lc + lb, "dot lhs contracting and batch dimensions")
    _check_unique(rc + rb, "dot rhs contracting and batch dimensions")
    if len(lc) != len(rc):
        raise _err(f"dot has {len(lc)} lhs but {len(rc)} rhs contracting dimensions")
    for a, b in zip(lc, rc):
        if not dim_eq(lhs.dims[a], rhs.dims[b]):
            raise _err(f"dot contracting dimensions differ in size: lhs {s(lhs)} dimension {a} "
                       f"vs rhs {s(rhs)} dimension {b}")
    if len(lb) != len(rb):
        raise _err(f"dot has {len(lb)} lhs but {len(rb)} rhs batch dimensions")
    for a, b in zip(lb, rb):
        if not dim_eq(lhs.dims[a], rhs.dims[b]):
            raise _err(f"dot batch dimensions differ in size: lhs {s(lhs)} dimension {a} vs "
                       f"rhs {s(rhs)} dimension {b}")
    dims = [_merge_dim(lhs.dims[a], rhs.dims[b]) for a, b in zip(lb, rb)]
    dyn = [lhs.dynamic[a] for a in lb]
    for x, skip in ((lhs, set(lc) | set(lb)), (rhs, set(rc) | set(rb))):
        for i in range(x.rank):
            if i not in skip:
                dims.append(x.dims[i])
                dyn.append(x.dynamic[i])
    etype = higher_precision(lhs.element_type, rhs.element_type)
    if ins.shape.is_array:  # the declared type is dot's "preferred element type"
        etype = _upcast(etype, ins.shape.element_type, "dot")
    return _shape(etype, dims, dyn)


def _dilated(bound: int, dilation: int) -> int:
    if bound == UNBOUNDED:
        return UNBOUNDED
    return 0 if bound == 0 else (bound - 1) * dilation + 1


def _strided(bound: int, window: int, stride: int) -> int:
    if window > bound:
        return 0
    return (bound - window) // stride + 1


def window_output_dims(base: Shape, window: Window, what: str) -> list[int]:
    if len(window.dims) != base.rank:
        raise _err(f"{what} window has {len(window.dims)} dimensions but the operand {s(base)} "
                   f"has rank {base.rank}")
    out = []
    for i, w in enumerate(window.dims):
        if w.size <= 0:
            raise _err(f"{what} window size {w.size} in dimension {i} must be positive")
        if w.stride <= 0:
            raise _err(f"{what} window stride {w.stride} in dimension {i} must be positive")
        if w.lhs_dilate < 1 or w.rhs_dilate < 1:
            raise _err(f"{what} window dilation in dimension {i} must be >= 1")
        if base.dims[i] == UNBOUNDED:
            out.append(UNBOUNDED)
            continue
        padded = w.pad_lo + _dilated(base.dims[i], w.lhs_dilate) + w.pad_hi
        out.append(_strided(padded, _dilated(w.size, w.rhs_dilate), w.stride))
    return out


@rule("convolution")
def _convolution(ins):
    lhs, rhs = _ops(ins)
    _array(lhs, "the lhs of convolution")
    _array(rhs, "the rhs of convolution")
    fgc = _int_attr(ins, "feature_group_count", 1)
    bgc = _int_attr(ins, "batch_group_count", 1)
    if fgc <= 0:
        raise _err(f"feature_group_count must be positive, got {fgc}")
    if bgc <= 0:
        raise _err(f"batch_group_count must be positive, got {bgc}")
    if fgc > 1 and bgc > 1:
        raise _err(f"feature_group_count ({fgc}) and batch_group_count ({bgc}) cannot both "
                   f"exceed 1")
    dn = _attr(ins, "dim_labels")
    if not isinstance(dn, ConvDims):
        raise _err(f"attribute 'dim_labels' must be convolution dimension labels, got {dn}")
    window = _attr(ins, "window", Window())
    if not isinstance(window, Window):
        raise _err(f"attribute 'window' must be a window, got {window}")
    nsp = len(dn.input_spatial)
    if len(window.dims) != nsp:
        raise _err(f"convolution window has {len(window.dims)} dimensions but dim_labels "
                   f"'{dn.text}' have {nsp} spatial dimensions")
    nd = nsp + 2
    if lhs.rank != nd:
        raise _err(f"convolution lhs {s(lhs)} must have rank {nd} (dim_labels '{dn.text}')")
    if rhs.rank != nd:
        raise _err(f"convolution rhs {s(rhs)} must have rank {nd} (dim_labels '{dn.text}')")
    in_sp = [lhs.dims[d] for d in dn.input_spatial]
    in_f = lhs.dims[dn.input_feature]
    in_b = lhs.dims[dn.input_batch]
    k_sp = [rhs.dims[d] for d in dn.kernel_spatial]
    k_in = rhs.dims[dn.kernel_input_feature]
    k_out = rhs.dims[dn.kernel_output_feature]
    if k_out != UNBOUNDED and k_out % bgc:
        raise _err(f"convolution output features {k_out} ({s(rhs)}) must be a multiple of "
                   f"batch_group_count {bgc}")
    if in_f != UNBOUNDED and (in_f % fgc or not dim_eq(in_f // fgc, k_in)):
        raise _err(f"convolution input features {in_f} ({s(lhs)}) divided by "
                   f"feature_group_count {fgc} must equal the kernel input features {k_in} "
                   f"({s(rhs)})")
    if k_out != UNBOUNDED and k_out % fgc:
        raise _err(f"convolution output features {k_out} ({s(rhs)}) must be a multiple of "
                   f"feature_group_count {fgc}")
    if in_b != UNBOUNDED and in_b % bgc:
        raise _err(f"convolution batch {in_b} ({s(lhs)}) must be a multiple of "
                   f"batch_group_count {bgc}")
    sizes = [w.size for w in window.dims]
    if len(k_sp) != len(sizes) or not all(dim_eq(a, b) for a, b in zip(k_sp, sizes)):
        raise _err(f"convolution window sizes {'x'.join(map(str, sizes))} do not match the "
                   f"kernel spatial dimensions {'x'.join(map(str, k_sp))} ({s(rhs)})")
    out_sp = window_output_dims(_shape(lhs.element_type, in_sp), window, "convolution")
    dims = [0] * nd
    dyn = [False] * nd
    dims[dn.output_batch] = UNBOUNDED if in_b == UNBOUNDED else in_b // bgc
    dims[dn.output_feature] = k_out
    dyn[dn.output_batch] = lhs.dynamic[dn.input_batch]
    for i, d in enumerate(dn.output_spatial):
        dims[d] = out_sp[i]
        dyn[d] = lhs.dynamic[dn.input_spatial[i]] or rhs.dynamic[dn.kernel_spatial[i]]
    etype = higher_precision(lhs.element_type, rhs.element_type)
    if ins.shape.is_array:
        etype = _upcast(etype, ins.shape.element_type, "convolution")
    return _shape(etype, dims, dyn)


# ---- reductions --------------------------------------------------------------------------

def verify_reducer(comp: Computation, inits: list[Shape], input_types: list[str],
                   what: str) -> list[Shape]:
    """XLA's VerifyReducerShape; returns the accumulator shapes."""
    n = len(inits)
    params, result = program_shape(comp)
    if len(params) != 2 * n:
        raise _err(f"{what} computation '{comp.name}' must take {2 * n} parameters, but takes "
                   f"{len(params)}")
    if result.is_tuple:
        accs = list(result.tuple_shapes)
        if len(accs) != n:
            raise _err(f"{what} computation '{comp.name}' must return a tuple of {n} scalars, "
                       f"returns {s(result)}")
    else:
        if n != 1:
            raise _err(f"{what} computation '{comp.name}' must return a tuple of {n} scalars, "
                       f"returns {s(result)}")
        accs = [result]
    for a in accs:
        if not _is_scalar(a):
            raise _err(f"{what} computation '{comp.name}' must return scalars, returns {s(result)}")
    for i in range(n):
        if not compatible(accs[i], params[i]):
            raise _err(f"{what} computation '{comp.name}' parameter {i} is {s(params[i])} but "
                       f"its result {i} is {s(accs[i])}")
        if not compatible(accs[i], inits[i], ignore_fp=True):
            raise _err(f"{what} computation '{comp.name}' result {i} is {s(accs[i])} but the "
                       f"init value {i} is {s(inits[i])}")
        elem = _scalar(input_types[i])
        if not compatible(elem, params[n + i], ignore_fp=True):
            raise _err(f"{what} computation '{comp.name}' parameter {n + i} is "
                       f"{s(params[n + i])} but input {i} has element type {input_types[i]}")
        if not compatible(accs[i], params[n + i], ignore_fp=True):
            raise _err(f"{what} computation '{comp.name}' parameter {n + i} is "
                       f"{s(params[n + i])} but its result {i} is {s(accs[i])}")
    return accs


@rule("reduce")
def _reduce(ins):
    shapes = _ops(ins)
    n = len(shapes) // 2
    inputs, inits = shapes[:n], shapes[n:]
    first = _array(inputs[0], "input 0 of reduce")
    for i, x in enumerate(inputs[1:], 1):
        _array(x, f"input {i} of reduce")
        if not same_dims(x, first):
            raise _err(f"reduce inputs must have the same dimensions: {s(first)} and {s(x)}")
    dims = _ints_attr(ins, "dimensions")
    _check_range(dims, first.rank, f"reduce dimension (operand {s(first)})")
    _check_unique(dims, "reduce dimensions")
    comp = _comp(ins, "to_apply")
    verify_reducer(comp, inits, [x.element_type for x in inputs], "reduce")
    keep = [i for i in range(first.rank) if i not in set(dims)]
    out_dims = [first.dims[i] for i in keep]
    out_dyn = [first.dynamic[i] for i in keep]
    _, result = program_shape(comp)
    if result.is_tuple:
        return Shape.tuple_of(_shape(r.element_type, out_dims, out_dyn) for r in result.tuple_shapes)
    return _shape(result.element_type, out_dims, out_dyn)


@rule("reduce-window")
def _reduce_window(ins):
    shapes = _ops(ins)
    n = len(shapes) // 2
    inputs, inits = shapes[:n], shapes[n:]
    first = _array(inputs[0], "input 0 of reduce-window")
    for i, x in enumerate(inputs[1:], 1):
        _array(x, f"input {i} of reduce-window")
        if not same_dims(x, first):
            raise _err(f"reduce-window inputs must have the same dimensions: {s(first)} and "
                       f"{s(x)}")
    comp = _comp(ins, "to_apply")
    verify_reducer(comp, inits, [x.element_type for x in inputs], "reduce-window")
    window = _attr(ins, "window")
    if not isinstance(window, Window):
        raise _err(f"attribute 'window' must be a window, got {window}")
    outs = []
    for x, init in zip(inputs, inits):
        dims = window_output_dims(x, window, "reduce-window")
        outs.append(_shape(init.element_type, dims, x.dynamic))
    return outs[0] if n == 1 else Shape.tuple_of(outs)


@rule("select-and-scatter")
def _select_and_scatter(ins):
    op, src, init = _ops(ins)
    _array(op, "the operand of select-and-scatter")
    select = _comp(ins, "select")
    scatter = _comp(ins, "scatter")
    sparams, sresult = program_shape(select)
    if len(sparams) != 2:
        raise _err(f"select computation '{select.name}' must take 2 parameters, but takes "
                   f"{len(sparams)}")
    if not compatible(sresult, _scalar("pred")):
        raise _err(f"select computation '{select.name}' must return pred[], returns "
                   f"{s(sresult)}")
    elem = _scalar(op.element_type)
    for i in range(2):
        if not compatible(elem, sparams[i], ignore_fp=True):
            raise _err(f"select computation '{select.name}' parameter {i} is {s(sparams[i])} "
                       f"but the operand's element type is {op.element_type}")
    verify_reducer(scatter, [init], [src.element_type], "scatter")
    window = _attr(ins, "window")
    if not isinstance(window, Window):
        raise _err(f"attribute 'window' must be a window, got {window}")
    wdims = window_output_dims(op, window, "select-and-scatter")
    expect = _shape(op.element_type, wdims)
    if not compatible(src, expect, ignore_fp=True):
        raise _err(f"select-and-scatter source {s(src)} does not match the windowed operand "
                   f"shape {s(expect)}")
    return op


@rule("sort")
def _sort(ins):
    shapes = _ops(ins)
    first = _array(shapes[0], "operand 0 of sort")
    comp = _comp(ins, "to_apply")
    params, result = program_shape(comp)
    if not compatible(result, _scalar("pred")):
        raise _err(f"sort comparator '{comp.name}' must return pred[], returns {s(result)}")
    if len(params) != 2 * len(shapes):
        raise _err(f"sort comparator '{comp.name}' must take {2 * len(shapes)} parameters, but "
                   f"takes {len(params)}")
    for i, p in enumerate(params):
        want = _scalar(shapes[i // 2].element_type)
        if not compatible(want, p, ignore_fp=True):
            raise _err(f"sort comparator '{comp.name}' parameter {i} is {s(p)}, expected {s(want)}")
    for i, x in enumerate(shapes[1:], 1):
        _array(x, f"operand {i} of sort")
        if not same_dims(x, first):
            raise _err(f"sort operands must have the same dimensions: {s(first)} and {s(x)}")
    d = _one_dim_attr(ins)
    if d < 0 or d >= first.rank:
        raise _err(f"sort dimension {d} is out of range for {s(first)}")
    return shapes[0] if len(shapes) == 1 else Shape.tuple_of(shapes)


@rule("topk")
def _topk(ins):
    op = _array(ins.operands[0].shape, "the operand of topk")
    k = _int_attr(ins, "k")
    if op.rank < 1:
        raise _err(f"topk operand must have rank >= 1, got {s(op)}")
    if k < 0 or (op.dims[-1] != UNBOUNDED and k > op.dims[-1]):
        raise _err(f"topk k={k} is out of range for the last dimension of {s(op)}")
    dims = op.dims[:-1] + (k,)
    dyn = op.dynamic
    return Shape.tuple_of([_shape(op.element_type, dims, dyn), _shape("s32", dims, dyn)])


# ---- gather and scatter ------------------------------------------------------------------

@rule("gather")
def _gather(ins):
    op, idx = _ops(ins)
    _array(op, "the operand of gather")
    _array(idx, "the start indices of gather")
    if not is_integral(idx.element_type):
        raise _err(f"gather start indices must be integers, got {s(idx)}")
    offset_dims = _ints_attr(ins, "offset_dims", ())
    collapsed = _ints_attr(ins, "collapsed_slice_dims", ())
    start_index_map = _ints_attr(ins, "start_index_map", ())
    obatch = _ints_attr(ins, "operand_batching_dims", ())
    ibatch = _ints_attr(ins, "start_indices_batching_dims", ())
    ivd = _int_attr(ins, "index_vector_dim")
    sizes = _ints_attr(ins, "slice_sizes")
    if ivd < 0 or ivd > idx.rank:
        raise _err(f"gather index_vector_dim {ivd} is out of range for start indices {s(idx)}")
    expanded = list(idx.dims) + ([1] if ivd == idx.rank else [])
    exp_dyn = list(idx.dynamic) + ([False] if ivd == idx.rank else [])
    _check_sorted_unique(offset_dims, "gather offset_dims")
    out_rank = len(offset_dims) + len(expanded) - 1
    _check_range(offset_dims, out_rank, "gather offset dimension")
    if len(start_index_map) != expanded[ivd]:
        raise _err(f"gather start_index_map has {len(start_index_map)} entries but start "
                   f"indices {s(idx)} have {expanded[ivd]} in index_vector_dim {ivd}")
    _check_range(start_index_map, op.rank, "gather start_index_map dimension")
    _check_unique(start_index_map, "gather start_index_map")
    _check_range(collapsed, op.rank, "gather collapsed slice dimension")
    _check_sorted_unique(collapsed, "gather collapsed_slice_dims")
    _check_range(obatch, op.rank, "gather operand batching dimension")
    _check_sorted_unique(obatch, "gather operand_batching_dims")
    if set(obatch) & set(collapsed):
        raise _err("gather operand_batching_dims and collapsed_slice_dims overlap")
    if set(obatch) & set(start_index_map):
        raise _err("gather operand_batching_dims and start_index_map overlap")
    _check_range(ibatch, idx.rank, "gather start indices batching dimension")
    _check_unique(ibatch, "gather start_indices_batching_dims")
    if ivd in ibatch:
        raise _err("gather start_indices_batching_dims contain index_vector_dim")
    if len(obatch) != len(ibatch):
        raise _err(f"gather has {len(obatch)} operand batching dimensions but {len(ibatch)} "
                   f"start indices batching dimensions")
    for a, b in zip(obatch, ibatch):
        if not dim_eq(op.dims[a], idx.dims[b]):
            raise _err(f"gather batching dimensions differ in size: operand {s(op)} dimension "
                       f"{a} vs start indices {s(idx)} dimension {b}")
    if len(sizes) != op.rank:
        raise _err(f"gather has {len(sizes)} slice sizes but the operand {s(op)} has rank "
                   f"{op.rank}")
    if len(offset_dims) + len(collapsed) + len(obatch) != op.rank:
        raise _err(f"gather offset_dims ({len(offset_dims)}), collapsed_slice_dims "
                   f"({len(collapsed)}) and operand_batching_dims ({len(obatch)}) must add up "
                   f"to the operand rank {op.rank}")
    for i, (n, d) in enumerate(zip(sizes, op.dims)):
        if n < 0 or (d != UNBOUNDED and n > d):
            raise _err(f"gather slice size {n} in dimension {i} is out of range [0, {d}] "
                       f"({s(op)})")
    for d in collapsed + obatch:
        if sizes[d] > 1:
            raise _err(f"gather can only collapse dimensions of slice size 0 or 1, but "
                       f"dimension {d} has slice size {sizes[d]}")
    window = [d for d in range(op.rank) if d not in set(collapsed) | set(obatch)]
    batch = [d for d in range(len(expanded)) if d != ivd]
    dims, dyn = [], []
    wi = bi = 0
    offset = set(offset_dims)
    for i in range(out_rank):
        if i in offset:
            d = window[wi]
            wi += 1
            dims.append(sizes[d])
            dyn.append(op.dynamic[d] and sizes[d] == op.dims[d])
        else:
            d = batch[bi]
            bi += 1
            dims.append(expanded[d])
            dyn.append(exp_dyn[d])
    return _shape(op.element_type, dims, dyn)


@rule("scatter")
def _scatter(ins):
    shapes = _ops(ins)
    n = (len(shapes) - 1) // 2
    operands, idx, updates = shapes[:n], shapes[n], shapes[n + 1:]
    _array(idx, "the scatter indices of scatter")
    if not is_integral(idx.element_type):
        raise _err(f"scatter indices must be integers, got {s(idx)}")
    uwd = _ints_attr(ins, "update_window_dims", ())
    iwd = _ints_attr(ins, "inserted_window_dims", ())
    sdod = _ints_attr(ins, "scatter_dims_to_operand_dims", ())
    ibatch = _ints_attr(ins, "input_batching_dims", ())
    sbatch = _ints_attr(ins, "scatter_indices_batching_dims", ())
    ivd = _int_attr(ins, "index_vector_dim")
    if ivd < 0 or ivd > idx.rank:
        raise _err(f"scatter index_vector_dim {ivd} is out of range for indices {s(idx)}")
    expanded = list(idx.dims) + ([1] if ivd == idx.rank else [])
    first = _array(operands[0], "operand 0 of scatter")
    for i, (o, u) in enumerate(zip(operands, updates)):
        _array(o, f"operand {i} of scatter")
        _array(u, f"updates {i} of scatter")
        if not same_dims(o, first):
            raise _err(f"scatter operands must have the same dimensions: {s(first)} and {s(o)}")
        if not same_dims(u, updates[0]):
            raise _err(f"scatter updates must have the same dimensions: {s(updates[0])} and "
                       f"{s(u)}")
    upd = updates[0]
    rank = first.rank
    _check_sorted_unique(uwd, "scatter update_window_dims")
    _check_range(uwd, upd.rank, "scatter update window dimension")
    _check_sorted_unique(iwd, "scatter inserted_window_dims")
    _check_range(iwd, rank, "scatter inserted window dimension")
    _check_sorted_unique(ibatch, "scatter input_batching_dims")
    _check_range(ibatch, rank, "scatter input batching dimension")
    if set(ibatch) & set(iwd):
        raise _err("scatter input_batching_dims and inserted_window_dims overlap")
    if len(uwd) + len(iwd) + len(ibatch) != rank:
        raise _err(f"scatter update_window_dims ({len(uwd)}), inserted_window_dims ({len(iwd)}) "
                   f"and input_batching_dims ({len(ibatch)}) must add up to the operand rank "
                   f"{rank} ({s(first)})")
    if len(sdod) != expanded[ivd]:
        raise _err(f"scatter_dims_to_operand_dims has {len(sdod)} entries but the indices "
                   f"{s(idx)} have {expanded[ivd]} in index_vector_dim {ivd}")
    _check_range(sdod, rank, "scatter_dims_to_operand_dims dimension")
    _check_unique(sdod, "scatter_dims_to_operand_dims")
    if set(sdod) & set(ibatch):
        raise _err("scatter_dims_to_operand_dims and input_batching_dims overlap")
    _check_range(sbatch, idx.rank, "scatter indices batching dimension")
    _check_unique(sbatch, "scatter_indices_batching_dims")
    if ivd in sbatch:
        raise _err("scatter_indices_batching_dims contain index_vector_dim")
    if len(ibatch) != len(sbatch):
        raise _err(f"scatter has {len(ibatch)} input batching dimensions but {len(sbatch)} "
                   f"indices batching dimensions")
    for a, b in zip(ibatch, sbatch):
        if not dim_eq(first.dims[a], idx.dims[b]):
            raise _err(f"scatter batching dimensions differ in size: operand {s(first)} "
                       f"dimension {a} vs indices {s(idx)} dimension {b}")
    want_rank = len(expanded) - 1 + len(uwd)
    if upd.rank != want_rank:
        raise _err(f"scatter updates {s(upd)} must have rank {want_rank}")
    window = [first.dims[d] for d in range(rank) if d not in set(iwd) | set(ibatch)]
    for i, d in enumerate(uwd):
        if UNBOUNDED not in (upd.dims[d], window[i]) and upd.dims[d] > window[i]:
            raise _err(f"scatter updates {s(upd)} window dimension {d} ({upd.dims[d]}) exceeds "
                       f"the operand's bound {window[i]} ({s(first)})")
    batch = [d for d in range(len(expanded)) if d != ivd]
    bi = 0
    for i in range(upd.rank):
        if i in set(uwd):
            continue
        if not dim_eq(upd.dims[i], expanded[batch[bi]]):
            raise _err(f"scatter updates {s(upd)} dimension {i} ({upd.dims[i]}) must equal the "
                       f"indices {s(idx)} dimension {batch[bi]} ({expanded[batch[bi]]})")
        bi += 1
    comp = _comp(ins, "to_apply")
    verify_reducer(comp, [_scalar(o.element_type) for o in operands],
                   [u.element_type for u in updates], "scatter")
    return operands[0] if n == 1 else Shape.tuple_of(operands)


# ---- control flow ------------------------------------------------------------------------

@rule("call")
def _call(ins):
    comp = _comp(ins, "to_apply")
    params, result = program_shape(comp)
    shapes = _ops(ins)
    if len(params) != len(shapes):
        raise _err(f"to_apply computation '{comp.name}' takes {len(params)} parameters but the "
                   f"call has {len(shapes)} operands")
    for i, (p, x) in enumerate(zip(params, shapes)):
        if not compatible(p, x):
            raise _err(f"call operand {i} is {s(x)} but computation '{comp.name}' parameter {i} "
                       f"is {s(p)}")
    return result


@rule("while")
def _while(ins):
    body = _comp(ins, "body")
    cond = _comp(ins, "condition")
    (bparam,) = expect_params(body, 1, "body")
    (cparam,) = expect_params(cond, 1, "condition")
    _, bresult = program_shape(body)
    _, cresult = program_shape(cond)
    init = ins.operands[0].shape
    if not compatible(cresult, _scalar("pred")):
        raise _err(f"condition computation '{cond.name}' must return pred[], returns "
                   f"{s(cresult)}")
    if not compatible(init, bparam):
        raise _err(f"while operand is {s(init)} but body computation '{body.name}' takes "
                   f"{s(bparam)}")
    if not compatible(init, cparam):
        raise _err(f"while operand is {s(init)} but condition computation '{cond.name}' takes "
                   f"{s(cparam)}")
    if not compatible(bresult, bparam):
        raise _err(f"body computation '{body.name}' returns {s(bresult)} but takes "
                   f"{s(bparam)}: the loop state must keep its shape")
    return bresult


def branch_computations(ins) -> list[Computation]:
    if "branch_computations" in ins.attrs:
        comps = ins.attrs["branch_computations"]
        if not isinstance(comps, list) or not all(isinstance(c, Computation) for c in comps):
            raise _err(f"attribute 'branch_computations' must name computations, got {comps}")
        return list(comps)
    if "true_computation" in ins.attrs or "false_computation" in ins.attrs:
        return [_comp(ins, "true_computation"), _comp(ins, "false_computation")]
    raise _err("conditional has neither branch_computations nor true/false_computation")


@rule("conditional")
def _conditional(ins):
    shapes = _ops(ins)
    index = shapes[0]
    if not _is_scalar(index):
        raise _err(f"conditional branch index must be a scalar, got {s(index)}")
    comps = branch_computations(ins)
    if index.element_type == "pred":
        if len(comps) != 2:
            raise _err(f"conditional with a pred index needs 2 branches, has {len(comps)}")
    elif index.element_type == "s32":
        if not comps:
            raise _err("conditional needs at least one branch")
    else:
        raise _err(f"conditional branch index must be pred[] or s32[], got {s(index)}")
    if len(shapes) != len(comps) + 1:
        raise _err(f"conditional with {len(comps)} branches expects {len(comps) + 1} operands, "
                   f"but has {len(shapes)}")
    results = []
    for j, c in enumerate(comps):
        (p,) = expect_params(c, 1, f"branch {j}")
        if not compatible(p, shapes[j + 1]):
            raise _err(f"conditional operand {j + 1} is {s(shapes[j + 1])} but branch {j} "
                       f"computation '{c.name}' takes {s(p)}")
        results.append(program_shape(c)[1])
    for j, r in enumerate(results[1:], 1):
        if not compatible(results[0], r):
            raise _err(f"conditional branches return different shapes: branch 0 "
                       f"'{comps[0].name}' returns {s(results[0])} but branch {j} "
                       f"'{comps[j].name}' returns {s(r)}")
    return results[0]


@rule("fusion")
def _fusion(ins):
    comps = ins.called_computations()
    if len(comps) != 1:
        raise _err(f"fusion must call exactly one computation, calls {len(comps)}")
    comp = comps[0]
    params, result = program_shape(comp)
    if len(params) > len(ins.operands):
        raise _err(f"fused computation '{comp.name}' takes {len(params)} parameters but the "
                   f"fusion has {len(ins.operands)} operands")
    for i, p in enumerate(params):
        if not compatible(p, ins.operands[i].shape):
            raise _err(f"fusion operand {i} is {s(ins.operands[i].shape)} but fused computation "
                       f"'{comp.name}' parameter {i} is {s(p)}")
    return result


# ---- async pairs -------------------------------------------------------------------------

def _wrapped(ins) -> Computation | None:
    comps = ins.called_computations()
    return comps[0] if len(comps) == 1 else None


def _async_shape_check(ins, async_shape: Shape, comp: Computation | None) -> None:
    if not async_shape.is_tuple or len(async_shape.tuple_shapes) < 2:
        raise _err(f"{ins.opcode} expects an async tuple of at least 2 elements, got "
                   f"{s(async_shape)}")
    if comp is None:
        return
    params, result = program_shape(comp)
    if not compatible(async_shape.tuple_shapes[0], Shape.tuple_of(params)):
        raise _err(f"{ins.opcode} async tuple element 0 {s(async_shape.tuple_shapes[0])} does "
                   f"not match the parameters of '{comp.name}' {s(Shape.tuple_of(params))}")
    if not compatible(async_shape.tuple_shapes[1], result):
        raise _err(f"{ins.opcode} async tuple element 1 {s(async_shape.tuple_shapes[1])} does "
                   f"not match the result of '{comp.name}' {s(result)}")


@rule("async-start")
def _async_start(ins):
    comp = _wrapped(ins)
    if comp is None:
        raise _err("async-start must call exactly one computation")
    params, result = program_shape(comp)
    shapes = _ops(ins)
    if len(params) != len(shapes):
        raise _err(f"async computation '{comp.name}' takes {len(params)} parameters but "
                   f"async-start has {len(shapes)} operands")
    for i, (p, x) in enumerate(zip(params, shapes)):
        if not compatible(p, x):
            raise _err(f"async-start operand {i} is {s(x)} but '{comp.name}' parameter {i} is "
                       f"{s(p)}")
    extra = ins.shape.tuple_shapes[2:] if ins.shape.is_tuple else ()
    return Shape.tuple_of([Shape.tuple_of(params), result, *extra])


@rule("async-update")
def _async_update(ins):
    op = ins.operands[0].shape
    _async_shape_check(ins, op, _wrapped(ins))
    return op


@rule("async-done")
def _async_done(ins):
    op = ins.operands[0].shape
    _async_shape_check(ins, op, _wrapped(ins))
    return op.tuple_shapes[1]


@rule("copy-start")
def _copy_start(ins):
    op = ins.operands[0].shape
    return Shape.tuple_of([op, op, _scalar("u32")])


@rule("copy-done")
def _copy_done(ins):
    op = ins.operands[0].shape
    if not op.is_tuple or len(op.tuple_shapes) < 2:
        raise _err(f"copy-done operand must be a copy-start tuple, got {s(op)}")
    if not compatible(op.tuple_shapes[0], op.tuple_shapes[1]):
        raise _err(f"copy-done source and destination differ: {s(op)}")
    return op.tuple_shapes[0]


def _token_operand(ins, i: int) -> None:
    x = ins.operands[i].shape
    if not x.is_token:
        raise _err(f"{ins.opcode} operand {i} must be a token, got {s(x)}")


@rule("send")
def _send(ins):
    _token_operand(ins, 1)
    return Shape.tuple_of([ins.operands[0].shape, _scalar("u32"), TOKEN])


@rule("send-done")
def _send_done(ins):
    return TOKEN


@rule("recv")
def _recv(ins):
    _token_operand(ins, 0)
    if not ins.shape.is_tuple or not ins.shape.tuple_shapes:
        raise _err(f"recv result must be a (data, u32[], token) tuple, declared {s(ins.shape)}")
    return Shape.tuple_of([ins.shape.tuple_shapes[0], _scalar("u32"), TOKEN])


@rule("recv-done")
def _recv_done(ins):
    op = ins.operands[0].shape
    if not op.is_tuple or not op.tuple_shapes:
        raise _err(f"recv-done operand must be a recv tuple, got {s(op)}")
    return Shape.tuple_of([op.tuple_shapes[0], TOKEN])


@rule("infeed")
def _infeed(ins):
    _token_operand(ins, 0)
    if not ins.shape.is_tuple or not ins.shape.tuple_shapes:
        raise _err(f"infeed result must be a (data, token) tuple, declared {s(ins.shape)}")
    return Shape.tuple_of([ins.shape.tuple_shapes[0], TOKEN])


@rule("outfeed")
def _outfeed(ins):
    _token_operand(ins, 1)
    raw = ins.attrs.get("outfeed_shape")
    if raw is not None:
        from .shape_parser import ShapeError, parse_shape
        try:
            want = parse_shape(str(raw))
        except ShapeError:
            want = None
        if want is not None and not compatible(want, ins.operands[0].shape):
            raise _err(f"outfeed_shape {s(want)} does not match the operand "
                       f"{s(ins.operands[0].shape)}")
    return TOKEN


@rule("after-all")
def _after_all(ins):
    return TOKEN


@rule("add-dependency")
def _add_dependency(ins):
    _token_operand(ins, 1)
    return ins.operands[0].shape


# ---- collectives -------------------------------------------------------------------------

def _operand_or_tuple(shapes: list[Shape]) -> Shape:
    return shapes[0] if len(shapes) == 1 else Shape.tuple_of(shapes)


def _declared_leaf(ins, i: int, n: int, tuple_index: int | None = None) -> Shape:
    out = ins.shape
    if tuple_index is not None:
        if not out.is_tuple or len(out.tuple_shapes) <= tuple_index:
            raise _err(f"{ins.opcode} result must be a tuple, declared {s(out)}")
        out = out.tuple_shapes[tuple_index]
    if n == 1:
        return out
    if not out.is_tuple or len(out.tuple_shapes) != n:
        raise _err(f"{ins.opcode} with {n} operands must return a tuple of {n}, declared "
                   f"{s(ins.shape)}")
    return out.tuple_shapes[i]


def _check_replica_groups(ins, uniform: bool = True) -> list[tuple[int, ...]]:
    rg = ins.attrs.get("replica_groups")
    if not isinstance(rg, ReplicaGroups):
        return []
    groups = [tuple(g) for g in rg.expanded()]
    seen: set[int] = set()
    for g in groups:
        if not g:
            raise _err(f"{ins.opcode} has an empty replica group")
        for r in g:
            if r in seen:
                raise _err(f"replica {r} is repeated in the replica groups of {ins.opcode}")
            seen.add(r)
    for r in range(len(seen)):
        if r not in seen:
            raise _err(f"replica {r} is not named in the replica groups of {ins.opcode}")
    if uniform and groups and any(len(g) != len(groups[0]) for g in groups):
        raise _err(f"{ins.opcode} replica groups must all have the same size")
    return groups


def _known_group_size(ins, groups, has_global_ids_field: bool = True) -> int | None:
    """The participant count of each group when the HLO alone determines it (cross-replica
    or flattened-id mode; cross-partition for ops without use_global_device_ids); None
    otherwise.  A size of 1 tells nothing (XLA skips the check then: unset replica counts)."""
    if not groups or len(groups[0]) <= 1:
        return None
    if has_global_ids_field and "channel_id" in ins.attrs and \
            not ins.attrs.get("use_global_device_ids", False):
        return None  # cross-replica-and-partition: times the partition count
    return len(groups[0])


def _gather_dims(ins, opcode: str, tuple_index=None) -> list[Shape]:
    shapes = _ops(ins)
    d = _one_dim_attr(ins)
    outs = []
    shard = _known_group_size(ins, _check_replica_groups(ins))
    for i, x in enumerate(shapes):
        _array(x, f"operand {i} of {opcode}")
        if d < 0 or d >= x.rank:
            raise _err(f"{opcode} dimension {d} is out of range for {s(x)}")
        out = _declared_leaf(ins, i, len(shapes), tuple_index)
        if shard is None:
            if not out.is_array or out.rank <= d:
                raise _err(f"{opcode} result {s(out)} has no dimension {d}")
            if UNBOUNDED in (out.dims[d], x.dims[d]) or x.dims[d] == 0:
                shard = 1
            else:
                shard = max(-(-out.dims[d] // x.dims[d]), 1)
        dims = list(x.dims)
        if dims[d] != UNBOUNDED:
            dims[d] *= shard
        outs.append(_shape(x.element_type, dims, x.dynamic))
    return outs


@rule("all-gather")
def _all_gather(ins):
    return _operand_or_tuple(_gather_dims(ins, "all-gather"))


@rule("all-gather-start")
def _all_gather_start(ins):
    outs = _gather_dims(ins, "all-gather-start", tuple_index=1)
    return Shape.tuple_of([_operand_or_tuple(_ops(ins)), _operand_or_tuple(outs)])


@rule("all-gather-done", "collective-permute-done")
def _done_element_1(ins):
    op = ins.operands[0].shape
    if not op.is_tuple or len(op.tuple_shapes) < 2:
        raise _err(f"{ins.opcode} operand must be a start tuple, got {s(op)}")
    return op.tuple_shapes[1]


def _reducer_2(ins):
    comps = ins.called_computations()
    if comps:
        expect_params(comps[0], 2, "to_apply")


@rule("all-reduce", "all-reduce-start")
def _all_reduce(ins):
    _check_replica_groups(ins, uniform=False)
    _reducer_2(ins)
    shapes = _ops(ins)
    for i, x in enumerate(shapes):
        _array(x, f"operand {i} of {ins.opcode}")
    return _operand_or_tuple(shapes)


@rule("all-reduce-done")
def _all_reduce_done(ins):
    return ins.operands[0].shape


@rule("reduce-scatter")
def _reduce_scatter(ins):
    shard = _known_group_size(ins, _check_replica_groups(ins))
    _reducer_2(ins)
    shapes = _ops(ins)
    d = _one_dim_attr(ins)
    outs = []
    for i, x in enumerate(shapes):
        _array(x, f"operand {i} of reduce-scatter")
        if d < 0 or d >= x.rank:
            raise _err(f"reduce-scatter dimension {d} is out of range for {s(x)}")
        if shard is None:
            out = _declared_leaf(ins, i, len(shapes))
            if not out.is_array or out.rank <= d:
                raise _err(f"reduce-scatter result {s(out)} has no dimension {d}")
            if UNBOUNDED in (out.dims[d], x.dims[d]) or out.dims[d] == 0:
                shard = 1
            else:
                shard = max(-(-x.dims[d] // out.dims[d]), 1)
        if x.dims[d] != UNBOUNDED and x.dims[d] % shard:
            raise _err(f"reduce-scatter dimension {d} of {s(x)} is not divisible by the shard "
                       f"count {shard}")
        dims = list(x.dims)
        if dims[d] != UNBOUNDED:
            dims[d] //= shard
        outs.append(_shape(x.element_type, dims, x.dynamic))
    return _operand_or_tuple(outs)


@rule("all-to-all")
def _all_to_all(ins):
    groups = _check_replica_groups(ins)
    shapes = _ops(ins)
    for i, x in enumerate(shapes):
        _array(x, f"operand {i} of all-to-all")
    if "dimensions" in ins.attrs:
        if len(shapes) != 1:
            raise _err(f"array all-to-all takes 1 operand, has {len(shapes)}")
        d = _one_dim_attr(ins)
        x = shapes[0]
        if d < 0 or d >= x.rank:
            raise _err(f"all-to-all split dimension {d} is out of range for {s(x)}")
        if groups and x.dims[d] != UNBOUNDED and x.dims[d] % len(groups[0]):
            raise _err(f"all-to-all split dimension {d} of {s(x)} is not divisible by the "
                       f"split count {len(groups[0])}")
        return x
    if groups and len(shapes) != len(groups[0]):
        raise _err(f"tuple all-to-all needs one operand per group member ({len(groups[0])}), "
                   f"has {len(shapes)}")
    for x in shapes[1:]:
        if not compatible(x, shapes[0]):
            raise _err(f"all-to-all operands must have the same shape: {s(shapes[0])} and {s(x)}")
    return Shape.tuple_of(shapes)


def _check_source_target_pairs(ins) -> None:
    pairs = ins.attrs.get("source_target_pairs", ())
    if len(ins.operands) != 1:
        return
    src, dst = set(), set()
    for a, b in pairs:
        if a < 0 or b < 0:
            raise _err(f"{ins.opcode} source-target pair {{{a},{b}}} is negative")
        if a in src:
            raise _err(f"source {a} appears more than once in the source-target pairs")
        if b in dst:
            raise _err(f"target {b} appears more than once in the source-target pairs")
        src.add(a)
        dst.add(b)


@rule("collective-permute")
def _collective_permute(ins):
    _check_source_target_pairs(ins)
    shapes = _ops(ins)
    if len(shapes) == 1:
        return _array(shapes[0], "the operand of collective-permute")
    return shapes[1]


@rule("collective-permute-start")
def _collective_permute_start(ins):
    _check_source_target_pairs(ins)
    shapes = _ops(ins)
    extra = list(ins.shape.tuple_shapes[2:]) if ins.shape.is_tuple else []
    if len(shapes) == 1:
        _array(shapes[0], "the operand of collective-permute-start")
        return Shape.tuple_of([shapes[0], shapes[0], *extra])
    return Shape.tuple_of([shapes[0], shapes[1], *extra])


@rule("collective-broadcast")
def _collective_broadcast(ins):
    _check_replica_groups(ins)
    shapes = _ops(ins)
    for i, x in enumerate(shapes):
        _array(x, f"operand {i} of collective-broadcast")
    return _operand_or_tuple(shapes)


@rule("ragged-all-to-all")
def _ragged_all_to_all(ins):
    shapes = _ops(ins)
    for i, x in enumerate(shapes):
        _array(x, f"operand {i} of ragged-all-to-all")
    if shapes[0].rank != shapes[1].rank:
        raise _err(f"ragged-all-to-all input {s(shapes[0])} and output {s(shapes[1])} must have "
                   f"the same rank")
    for i in range(2, 6):
        if not is_integral(shapes[i].element_type):
            raise _err(f"ragged-all-to-all operand {i} must be integral, got {s(shapes[i])}")
    return shapes[1]


@rule("replica-id", "partition-id")
def _ids(ins):
    return _scalar("u32")


@rule("rng-get-and-update-state")
def _rng_state(ins):
    return _shape("u64", (2,))


@rule("rng")
def _rng(ins):
    a, b = _ops(ins)
    if not _is_scalar(a) or not _is_scalar(b):
        raise _err(f"rng operands must be scalars, got {s(a)} and {s(b)}")
    if a.element_type != b.element_type:
        raise _err(f"rng operands must have the same element type, got {s(a)} and {s(b)}")
    t = a.element_type
    dist = str(_attr(ins, "distribution"))
    if dist == "rng_uniform":
        if not (is_floating(t) or is_integral(t) or t == "pred"):
            raise _err(f"rng_uniform needs floating-point, integral or pred operands, got {t}")
    elif dist == "rng_normal":
        if not is_floating(t):
            raise _err(f"rng_normal needs floating-point operands, got {t}")
    else:
        raise _err(f"unknown rng distribution {dist}")
    if not ins.shape.is_array:
        raise _err(f"rng result must be an array, declared {s(ins.shape)}")
    return Shape(t, ins.shape.dims, ins.shape.dynamic)


@rule("rng-bit-generator")
def _rng_bit_generator(ins):
    state = _array(ins.operands[0].shape, "the state of rng-bit-generator")
    out = ins.shape
    if not out.is_tuple:
        return out
    if len(out.tuple_shapes) != 2:
        raise _err(f"rng-bit-generator must return a (state, bits) tuple, declared {s(out)}")
    bits = out.tuple_shapes[1]
    if not bits.is_array or not (is_integral(bits.element_type) or
                                 is_floating(bits.element_type)):
        raise _err(f"rng-bit-generator bits must be an integral array, declared {s(bits)}")
    return Shape.tuple_of([state, bits])


# ---- linear algebra and fft --------------------------------------------------------------

@rule("fft")
def _fft(ins):
    op = _array(ins.operands[0].shape, "the operand of fft")
    kind = str(_attr(ins, "fft_type"))
    length = _ints_attr(ins, "fft_length")
    n = len(length)
    if n < 1 or n > 3:
        raise _err(f"fft_length must have 1 to 3 entries, has {n}")
    t = op.element_type
    if op.rank < n:
        raise _err(f"fft of rank {n} needs an operand of at least rank {n}, got {s(op)}")
    inner = op.dims[op.rank - n:]
    if kind in ("FFT", "IFFT"):
        if not is_complex(t):
            raise _err(f"{kind} needs a complex operand, got {s(op)}")
        return op
    if kind == "RFFT":
        if t not in ("f32", "f64"):
            raise _err(f"RFFT needs an f32 or f64 operand, got {s(op)}")
        if not all(dim_eq(a, b) for a, b in zip(inner, length)):
            raise _err(f"RFFT innermost dimensions of {s(op)} must equal fft_length "
                       f"{{{_j(length)}}}")
        dims = list(op.dims)
        if length[-1] != 0:
            dims[-1] = length[-1] // 2 + 1
        return _shape("c64" if t == "f32" else "c128", dims, op.dynamic)
    if kind == "IRFFT":
        if not is_complex(t):
            raise _err(f"IRFFT needs a complex operand, got {s(op)}")
        if not all(dim_eq(a, b) for a, b in zip(inner[:-1], length[:-1])):
            raise _err(f"IRFFT innermost dimensions of {s(op)} (all but the last) must equal "
                       f"fft_length {{{_j(length)}}}")
        last = op.dims[-1]
        if (last != 0 or length[-1] != 0) and not dim_eq(last, length[-1] // 2 + 1):
            raise _err(f"IRFFT last dimension of {s(op)} must be fft_length/2+1 = "
                       f"{length[-1] // 2 + 1}")
        dims = list(op.dims)
        dims[-1] = length[-1]
        return _shape(dtypes.complex_component(t), dims, op.dynamic)
    raise _err(f"unknown fft_type {kind}")


@rule("cholesky")
def _cholesky(ins):
    a = _array(ins.operands[0].shape, "the operand of cholesky")
    if not (is_floating(a.element_type) or is_complex(a.element_type)):
        raise _err(f"cholesky needs a floating-point or complex operand, got {s(a)}")
    if a.rank < 2:
        raise _err(f"cholesky operand must have rank >= 2, got {s(a)}")
    if not dim_eq(a.dims[-1], a.dims[-2]):
        raise _err(f"cholesky operand must be square in its two minor dimensions, got {s(a)}")
    return a


@rule("triangular-solve")
def _triangular_solve(ins):
    a, b = _ops(ins)
    _array(a, "the matrix of triangular-solve")
    _array(b, "the right-hand side of triangular-solve")
    if not (is_floating(a.element_type) or is_complex(a.element_type)) or \
            a.element_type != b.element_type:
        raise _err(f"triangular-solve needs identical floating-point or complex element types, "
                   f"got {s(a)} and {s(b)}")
    if a.rank < 2:
        raise _err(f"triangular-solve matrix must have rank >= 2, got {s(a)}")
    if b.rank != a.rank:
        raise _err(f"triangular-solve operands must have the same rank, got {s(a)} and {s(b)}")
    if not dim_eq(a.dims[-1], a.dims[-2]):
        raise _err(f"triangular-solve matrix must be square in its two minor dimensions, got "
                   f"{s(a)}")
    left = bool(ins.attrs.get("left_side", False))
    if not dim_eq(a.dims[-1], b.dims[-2 if left else -1]):
        raise _err(f"triangular-solve shared dimension of {s(a)} and {s(b)} does not match "
                   f"(left_side={'true' if left else 'false'})")
    if not all(dim_eq(x, y) for x, y in zip(a.dims[:-2], b.dims[:-2])):
        raise _err(f"triangular-solve batch dimensions differ: {s(a)} and {s(b)}")
    t = str(ins.attrs.get("transpose_a", "NO_TRANSPOSE"))
    if t not in ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"):
        raise _err(f"triangular-solve transpose_a must be NO_TRANSPOSE, TRANSPOSE or ADJOINT, "
                   f"got {t}")
    return b


def _bn_common(ins, operand: Shape, others: list[tuple[Shape, str]]) -> int:
    f = _int_attr(ins, "feature_index")
    _array(operand, f"the operand of {ins.opcode}")
    if f < 0 or f >= operand.rank:
        raise _err(f"{ins.opcode} feature_index {f} is out of range for {s(operand)}")
    if not is_floating(operand.element_type):
        raise _err(f"{ins.opcode} needs a floating-point operand, got {s(operand)}")
    n = operand.dims[f]
    for x, what in others:
        _array(x, f"the {what} of {ins.opcode}")
        if x.rank != 1:
            raise _err(f"{ins.opcode} {what} must have rank 1, got {s(x)}")
        if not same_type_ignoring_fp(x.element_type, operand.element_type):
            raise _err(f"{ins.opcode} {what} {s(x)} and operand {s(operand)} have different "
                       f"element types")
        if not dim_eq(x.dims[0], n):
            raise _err(f"{ins.opcode} {what} {s(x)} must have the feature count {n}")
    return n


@rule("batch-norm-training")
def _bn_training(ins):
    op, scale, offset = _ops(ins)
    n = _bn_common(ins, op, [(scale, "scale"), (offset, "offset")])
    feat = _shape(op.element_type, (n,))
    return Shape.tuple_of([op, feat, feat])


@rule("batch-norm-inference")
def _bn_inference(ins):
    op, scale, offset, mean, var = _ops(ins)
    _bn_common(ins, op, [(scale, "scale"), (offset, "offset"), (mean, "mean"),
                         (var, "variance")])
    return op


@rule("batch-norm-grad")
def _bn_grad(ins):
    op, scale, mean, var, grad = _ops(ins)
    n = _bn_common(ins, op, [(scale, "scale"), (mean, "mean"), (var, "variance")])
    _array(grad, "the output gradient of batch-norm-grad")
    if not same_dims(grad, op) or not same_type_ignoring_fp(grad.element_type, op.element_type):
        raise _err(f"batch-norm-grad output gradient {s(grad)} must match the operand {s(op)}")
    feat = _shape(op.element_type, (n,))
    return Shape.tuple_of([op, feat, feat])


MISSING_RULES = sorted(ALL_OPCODES - set(RULES))
assert not MISSING_RULES, MISSING_RULES
