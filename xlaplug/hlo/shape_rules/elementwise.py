"""Shape rules of the elementwise opcodes: unary, binary (with compare), select, clamp and the
same-as-operand ones (copy, domain, opt-barrier)."""
from __future__ import annotations

from .. import dtypes
from ..dtypes import is_signed_or_float
from ..ir import UNBOUNDED, Shape
from .common import (_array, _attr, _err, _merge_dim, _ops, _shape, _with_type, compatible,
                     higher_precision, is_complex, is_floating, is_integral, rule, s,
                     same_dims, same_type_ignoring_fp)
from ..opcodes import BINARY_ELEMENTWISE, UNARY_ELEMENTWISE

# (copy is elementwise too, but has the same-as-operand rule below)
_UNARY = UNARY_ELEMENTWISE - {"copy"}
_BINARY = BINARY_ELEMENTWISE


def _unary_check(op: str, t: str) -> str | None:
    """Result element type of unary `op` on `t`, or None when `t` is not allowed."""
    if op in ("floor", "ceil", "round-nearest-afz", "round-nearest-even", "erf", "erf-inv"):
        return t if is_floating(t) else None
    if op in ("cosine", "sine", "exponential", "exponential-minus-one", "log", "log-plus-one",
              "logistic", "rsqrt", "sqrt", "cbrt", "tanh", "tan", "acos", "acosh", "asin",
              "asinh", "atanh", "cosh", "sinh"):
        return t if is_floating(t) or is_complex(t) else None
    if op in ("real", "imag"):
        return dtypes.complex_component(t) if is_complex(t) else (t if is_floating(t) else None)
    if op == "abs":
        return dtypes.complex_component(t) if is_complex(t) else (t if is_signed_or_float(t) else None)
    if op in ("count-leading-zeros", "popcnt"):
        return t if is_integral(t) else None
    if op == "negate":
        return t if is_integral(t) or is_floating(t) or is_complex(t) else None
    if op == "sign":
        return t if is_signed_or_float(t) or is_complex(t) else None
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
    t = lhs.element_type
    if (lhs is rhs or t == rhs.element_type and lhs.dims == rhs.dims
            and lhs.dynamic == rhs.dynamic) and t != "tuple" and t != "token":
        return Shape(t, lhs.dims, lhs.dynamic)  # the common case: one shape on both sides
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
