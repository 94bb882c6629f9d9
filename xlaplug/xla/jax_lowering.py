"""One HLO instruction as `jax.lax` calls: the table the jax builder (jax_builder.py) runs.

`lower(ins, operands, env)` takes a built Instruction (its shape already inferred by the HLO
builder, its attributes spelled as the HLO builder spells them) and the jax values of its
operands, and returns its jax value (a tuple for a tuple-shaped result).  Called
computations (reducers, loop bodies, branches) run through `env.call(comp, args)`.
Instructions that call computations are in jax_control.py, collectives in
jax_collectives.py, gather and scatter in jax_gather_scatter.py.  An opcode with no lax
equivalent is an HloError naming it.
"""
from __future__ import annotations

from ..hlo.errors import HloError

_UNARY = {
    "abs": "abs", "cbrt": "cbrt", "ceil": "ceil", "count-leading-zeros": "clz",
    "cosine": "cos", "erf": "erf", "exponential": "exp", "exponential-minus-one": "expm1",
    "floor": "floor", "imag": "imag", "is-finite": "is_finite", "log": "log",
    "log-plus-one": "log1p", "logistic": "logistic", "negate": "neg", "not": "bitwise_not",
    "popcnt": "population_count", "real": "real", "round-nearest-even": "round_even",
    "round-nearest-afz": "round_afz", "rsqrt": "rsqrt", "sign": "sign", "sine": "sin",
    "sqrt": "sqrt", "tan": "tan", "tanh": "tanh", "erf-inv": "erf_inv", "acos": "acos",
    "acosh": "acosh", "asin": "asin", "asinh": "asinh", "atanh": "atanh", "cosh": "cosh",
    "sinh": "sinh",
}
_BINARY = {
    "add": "add", "atan2": "atan2", "complex": "complex", "divide": "div", "maximum": "max",
    "minimum": "min", "multiply": "mul", "power": "pow", "remainder": "rem",
    "subtract": "sub", "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor",
    "shift-left": "shift_left", "shift-right-arithmetic": "shift_right_arithmetic",
    "shift-right-logical": "shift_right_logical",
}
_COMPARE = {"EQ": "eq", "NE": "ne", "GE": "ge", "GT": "gt", "LE": "le", "LT": "lt"}
# Reducers jax differentiates and batches as monoids (reduce_sum, reduce_max, ...), and
# the matching binary op that folds an init value that is not the identity back in.
MONOIDS = {"add": ("reduce_sum", "add"), "multiply": ("reduce_prod", "mul"),
           "maximum": ("reduce_max", "max"), "minimum": ("reduce_min", "min"),
           "and": ("reduce_and", "bitwise_and"), "or": ("reduce_or", "bitwise_or"),
           "xor": ("reduce_xor", "bitwise_xor")}


def no_lax(opcode: str, why: str = "") -> HloError:
    return HloError(f"jax builder: opcode '{opcode}' has no lax equivalent"
                    + (f" ({why})" if why else ""))


def binary_monoid(comp) -> str | None:
    """'add' when `comp` is `add(p0, p1)` (or `add(p1, p0)`) on scalars, etc.; else None."""
    root = comp.root
    params = comp.parameters
    if root is None or len(params) != 2 or root.opcode not in MONOIDS or \
            root.shape.is_tuple or root.shape.rank:
        return None
    return root.opcode if set(root.operands) == set(params) and len(root.operands) == 2 \
        else None


def _jax():
    import jax
    return jax


def dtype_of(shape):
    """The dtype jax computes in for an HLO shape (f64 is f32 without jax_enable_x64)."""
    jax = _jax()
    return jax.dtypes.canonicalize_dtype(shape.dtype)


def lower(ins, operands: list, env):
    jax = _jax()
    lax = jax.lax
    op, a = ins.opcode, ins.attrs
    if op in _UNARY:
        name = _UNARY[op]
        if name == "round_afz":
            return lax.round(operands[0], lax.RoundingMethod.AWAY_FROM_ZERO)
        if name == "round_even":
            return lax.round(operands[0], lax.RoundingMethod.TO_NEAREST_EVEN)
        return getattr(lax, name)(operands[0])
    if op == "copy":
        return operands[0]
    if op in _BINARY:
        return getattr(lax, _BINARY[op])(*operands)
    if op == "compare":
        return getattr(lax, _COMPARE[str(a.get("direction"))])(*operands)
    if op in _SHAPE_OPS:
        return _SHAPE_OPS[op](lax, ins, operands, a)
    from .jax_control import CONTROL
    if op in CONTROL:
        return CONTROL[op](jax, ins, operands, env)
    if op in ("gather", "scatter"):
        from . import jax_gather_scatter
        return getattr(jax_gather_scatter, op)(jax, ins, operands, env)
    from . import jax_collectives
    if op in jax_collectives.LOWERINGS:
        return jax_collectives.LOWERINGS[op](jax, ins, operands, env)
    if op == "custom-call":
        return env.custom_call(ins, operands)
    raise no_lax(op)


# ---- elementwise with attributes, data movement -------------------------------------------

def _convert(lax, ins, ops, a):
    return lax.convert_element_type(ops[0], dtype_of(ins.shape))


def _bitcast_convert(lax, ins, ops, a):
    return lax.bitcast_convert_type(ops[0], dtype_of(ins.shape))


def _reduce_precision(lax, ins, ops, a):
    return lax.reduce_precision(ops[0], exponent_bits=int(a["exponent_bits"]),
                                mantissa_bits=int(a["mantissa_bits"]))


def _select(lax, ins, ops, a):
    pred, t, f = ops
    return lax.select(pred, t, f)


def _clamp(lax, ins, ops, a):
    return lax.clamp(*ops)


def _broadcast(lax, ins, ops, a):
    return lax.broadcast_in_dim(ops[0], ins.shape.dims, tuple(a.get("dimensions", ())))


def _reshape(lax, ins, ops, a):
    return lax.reshape(ops[0], ins.shape.dims)


def _transpose(lax, ins, ops, a):
    return lax.transpose(ops[0], tuple(a["dimensions"]))


def _slice(lax, ins, ops, a):
    dims = a["slice"].dims
    return lax.slice(ops[0], [d.start for d in dims], [d.limit for d in dims],
                     [d.stride for d in dims])


def _dynamic_slice(lax, ins, ops, a):
    return lax.dynamic_slice(ops[0], ops[1:], tuple(a["dynamic_slice_sizes"]))


def _dynamic_update_slice(lax, ins, ops, a):
    return lax.dynamic_update_slice(ops[0], ops[1], ops[2:])


def _concatenate(lax, ins, ops, a):
    return lax.concatenate(ops, int(a["dimensions"][0]))


def _iota(lax, ins, ops, a):
    return lax.broadcasted_iota(dtype_of(ins.shape), ins.shape.dims, int(a["iota_dimension"]))


def _pad(lax, ins, ops, a):
    return lax.pad(ops[0], ops[1], [(d.lo, d.hi, d.interior) for d in a["padding"].dims])


def _reverse(lax, ins, ops, a):
    return lax.rev(ops[0], tuple(a["dimensions"]))


def _dot(lax, ins, ops, a):
    def get(key):
        return tuple(a.get(key) or ())
    dims = ((get("lhs_contracting_dims"), get("rhs_contracting_dims")),
            (get("lhs_batch_dims"), get("rhs_batch_dims")))
    return lax.dot_general(ops[0], ops[1], dims, preferred_element_type=dtype_of(ins.shape))


def _tuple(lax, ins, ops, a):
    return tuple(ops)


def _get_tuple_element(lax, ins, ops, a):
    return ops[0][int(a["index"])]


def _opt_barrier(lax, ins, ops, a):
    return lax.optimization_barrier(ops[0])


_SHAPE_OPS = {
    "convert": _convert, "bitcast-convert": _bitcast_convert,
    "reduce-precision": _reduce_precision, "select": _select, "clamp": _clamp,
    "broadcast": _broadcast, "reshape": _reshape, "transpose": _transpose, "slice": _slice,
    "dynamic-slice": _dynamic_slice, "dynamic-update-slice": _dynamic_update_slice,
    "concatenate": _concatenate, "iota": _iota, "pad": _pad, "reverse": _reverse,
    "dot": _dot, "tuple": _tuple, "get-tuple-element": _get_tuple_element,
    "opt-barrier": _opt_barrier,
}
