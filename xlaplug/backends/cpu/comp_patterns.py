"""Recognising small called computations (reducers, combiners, comparators) by their shape,
so kernels can take a numpy fast path where the computation is a known operation."""
from __future__ import annotations

import numpy as np

from ...hlo import dtypes
from ...hlo.ir import Computation, Instruction

# Binary opcodes a fast path can run as a numpy ufunc, by element kind ('b' = pred).
_UFUNCS = {
    "add": np.add, "multiply": np.multiply, "maximum": np.maximum, "minimum": np.minimum,
    "and": np.logical_and, "or": np.logical_or,
}
# Element types numba computes in a wider type (f32 / s8 / u8).
NARROW_TYPES = frozenset(t for t in dtypes.FLOAT_TYPES if t not in ("f32", "f64")) | {
    "s1", "s2", "s4", "u1", "u2", "u4"}
_BOOL_OPS = {"and": np.logical_and, "or": np.logical_or, "maximum": np.logical_or,
             "minimum": np.logical_and}


def binary_op(comp: Computation) -> str | None:
    """'add' / 'multiply' / 'maximum' / 'minimum' / 'and' / 'or' when `comp` is exactly that
    operation of its two scalar parameters (either order: all are commutative), else None."""
    params = comp.parameters
    root = comp.root
    if len(params) != 2 or root is None or root.opcode not in _UFUNCS:
        return None
    if root.shape.rank != 0 or root.shape.is_tuple:
        return None
    if {id(o) for o in root.operands} != {id(p) for p in params} or len(root.operands) != 2:
        return None
    if any(p.shape.element_type != root.shape.element_type for p in params):
        return None
    return root.opcode


def ufunc_for(op: str, element_type: str, widened: bool = False, xla_loop: bool = False):
    """The numpy ufunc computing `op` on elements of `element_type`, or None.  With
    `widened` (values of narrow types held as f32 / s8 / u8), None for add and multiply of
    narrow types: the wide type would skip the rounding or wrapping XLA does every step.
    With `xla_loop` (reduce, reduce-window: XLA:CPU runs the computation in its compiled
    loop), None for complex multiply: XLA's contracts into FMAs, numpy's does not
    (scalar_complex.py's multiply does, as XLA)."""
    if widened and op in ("add", "multiply") and element_type in NARROW_TYPES:
        return None
    if xla_loop and op == "multiply" and element_type in ("c64", "c128"):
        return None
    if element_type == "pred":
        return _BOOL_OPS.get(op)
    if op in ("and", "or"):
        return None if element_type[0] in "fbc" else {"and": np.bitwise_and,
                                                        "or": np.bitwise_or}[op]
    if element_type in ("c64", "c128") and op in ("maximum", "minimum"):
        return None
    return _UFUNCS[op]


def identity(op: str, dtype: np.dtype):
    """The identity element of `op` over `dtype`, or None when it has none there."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return {"and": True, "or": False, "maximum": False, "minimum": True}.get(op)
    et = dtypes.from_dtype(dt)
    if op == "add":
        return dt.type(0)
    if op == "multiply":
        return dt.type(1)
    if dtypes.is_integral(et):
        if dt.kind not in "iu":
            return None  # sub-byte integers: no fast path needed
        info = np.iinfo(dt)
        return {"maximum": info.min, "minimum": info.max,
                "and": dt.type(-1) if dt.kind == "i" else info.max, "or": dt.type(0)}.get(op)
    if op in ("maximum", "minimum") and dtypes.is_float(et):
        v = np.asarray(-np.inf if op == "maximum" else np.inf).astype(dt)
        return v[()] if np.isinf(v.astype(np.float32)) else None  # e4m3fn has no inf
    return None


def is_identity(op: str, init) -> bool:
    """True when the 0-d array `init` is the identity of `op` (bitwise, so -0.0 is not 0)."""
    init = np.asarray(init)
    ident = identity(op, init.dtype)
    if ident is None:
        return False
    ident = np.asarray(ident).astype(init.dtype)
    return init.reshape(()).tobytes() == ident.reshape(()).tobytes()


def identity_fold_ufunc(comp: Computation, x, init, shape):
    """The (widened) ufunc that folds like the reducer `comp` when `comp` is one binary op,
    `init` is that op's identity and `x` already has the result's type -- the case a fast
    numpy reduce or reduce-window may take instead of the scalar loop; else None (complex
    multiply among them: XLA's loop contracts it into FMAs, numpy's does not)."""
    op = binary_op(comp)
    if op is None or x.dtype != shape.dtype or not is_identity(op, init):
        return None
    return ufunc_for(op, shape.element_type, widened=True, xla_loop=True)


def returns_param(comp: Computation, first: int) -> bool:
    """True when `comp` returns parameters first.. in order (e.g. scatter's `set` combiner:
    the update replaces the operand)."""
    params = comp.parameters
    root = comp.root
    n = len(params) - first
    if root.opcode == "tuple":
        outs = root.operands
    else:
        outs = [root]
    if len(outs) != n:
        return False
    return all(o is params[first + i] for i, o in enumerate(outs))


def depends_only_on(ins: Instruction, param: Instruction) -> bool:
    """True when `ins` is computed from `param` and constants only."""
    seen: set[int] = set()
    stack = [ins]
    while stack:
        i = stack.pop()
        if id(i) in seen:
            continue
        seen.add(id(i))
        if i.opcode == "parameter":
            if i is not param:
                return False
            continue
        if i.called_computations() or i.has_side_effect:
            return False
        if i.opcode in ("rng", "rng-bit-generator", "custom-call", "iota"):
            return False
        stack.extend(i.operands)
    return True


def same_expression(a: Instruction, b: Instruction, pa: Instruction, pb: Instruction) -> bool:
    """True when `a` computes from `pa` what `b` computes from `pb` (same opcodes, shapes,
    attributes, constants)."""
    memo: dict[tuple[int, int], bool] = {}

    def eq(x: Instruction, y: Instruction) -> bool:
        key = (id(x), id(y))
        if key in memo:
            return memo[key]
        if x.opcode == "parameter" or y.opcode == "parameter":
            r = x is pa and y is pb
        elif x is y:
            r = True  # a shared constant subexpression
        elif (x.opcode != y.opcode or x.shape != y.shape or len(x.operands) != len(y.operands)
              or _attrs_key(x) != _attrs_key(y)):
            r = False
        elif x.opcode == "constant":
            r = (np.asarray(x.literal).tobytes() == np.asarray(y.literal).tobytes())
        else:
            r = all(eq(u, v) for u, v in zip(x.operands, y.operands))
        memo[key] = r
        return r

    return eq(a, b)


def _attrs_key(ins: Instruction):
    return {k: str(v) for k, v in ins.attrs.items()
            if k not in ("metadata", "frontend_attributes", "sharding", "backend_config")}
