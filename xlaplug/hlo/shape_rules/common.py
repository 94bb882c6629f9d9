"""The shape-rule registry (`RULES`, `@rule`, `TRUST_DECLARED`), `ShapeInferenceError`, and the
helpers every family of rules uses: element-type predicates, XLA's shape comparisons
(`compatible`, `same_dims`, `dim_eq`), attribute readers and the called computations'
signatures."""
from __future__ import annotations

from typing import Callable

from .. import dtypes
from ..ir import UNBOUNDED, Computation, Instruction, Shape
from ..opcodes import ALL_OPCODES


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
    t = a.element_type
    if t == b.element_type and t != "tuple" and a.dims == b.dims:
        return True  # the common case, as below
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


def _check_range(dims, rank: int, what) -> None:
    """`what`: the dimensions' name, or a function giving it (made only for the message)."""
    for d in dims:
        if d < 0 or d >= rank:
            raise _err(f"{what() if callable(what) else what} {d} is out of range for rank {rank}")


def _check_unique(dims, what: str) -> None:
    if len(set(dims)) != len(dims):
        raise _err(f"{what} {{{_j(dims)}}} repeat a dimension")


def _check_sorted_unique(dims, what: str) -> None:
    if list(dims) != sorted(set(dims)):
        raise _err(f"{what} {{{_j(dims)}}} must be sorted and not repeat")


def has_unbounded(shape: Shape) -> bool:
    return any(d == UNBOUNDED for leaf in shape.leaves() for d in leaf.dims)
