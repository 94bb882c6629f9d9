"""sort and topk.

sort (HloEvaluator::HandleSort): along `dimensions={d}` every operand is permuted by the
order the comparator gives; comparator(a0, b0, a1, b1, ...) is "a before b".  It always
runs as a stable sort (is_stable=false lets XLA pick any order of equivalent elements, and
the stable one is among them).
  fast path  the comparator is a compare, LT or GT, of f(operand i's lhs) with f(its rhs)
             for one operand i and one elementwise f (the identity, jnp.sort's NaN and -0
             canonicalisation, XLA's bitcast/xor total-order key, ...), or jax's
             lexicographic chain or(LT(k0), and(EQ(k0), <chain>)) of such compares: each f
             is applied to its whole operand (compiled) and the keys sorted by numpy's
             stable argsort / lexsort, under the compare's type (TOTALORDER keys become
             integers ordering -NaN < -inf < .. < -0 < +0 < .. < inf < NaN; IEEE-ordered
             float keys holding NaN fall back to the merge sort).
  general    a stable merge sort in numba calling the compiled comparator.
topk (XLA's TopkDecomposer: a stable sort by a total-order GT (largest) / LT compare, then
the first k): values and s32 indices along the last dimension; ties keep index order.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ...hlo import dtypes
from ...hlo.ir import Computation, Instruction
from ..registry import kernel
from . import comp_patterns as P
from .driver_cache import run_driver
from .jit_drivers import from_numba, map_driver, numba_array, numba_dtype, sort_driver


def total_order_key(a: np.ndarray) -> np.ndarray:
    """Signed integers ordering floats as IEEE totalOrder does."""
    a = np.asarray(a)
    if a.dtype not in (np.float32, np.float64):
        a = a.astype(np.float32)
    it = np.int32 if a.dtype == np.float32 else np.int64
    bits = a.view(it)
    return np.where(bits < 0, bits ^ np.iinfo(it).max, bits)


def _descending(key: np.ndarray) -> np.ndarray:
    if key.dtype.kind in "iu":
        return ~key
    return -key


@kernel("sort")
def _sort(ins, args, ctx):
    xs = [np.asarray(a) for a in args]
    dim = ins.attrs["dimensions"][0]
    comp = ins.attrs["to_apply"]
    shapes = ins.shape.tuple_shapes if ins.shape.is_tuple else (ins.shape,)
    moved = [np.moveaxis(x, dim, -1) for x in xs]
    lead = moved[0].shape[:-1]
    length = moved[0].shape[-1]
    rows = int(np.prod(lead, dtype=np.int64))
    perm = None
    if xs[0].size and length > 1:
        perm = _fast_order(comp, moved, ctx)
        if perm is None:
            flat = [np.ascontiguousarray(numba_array(m)).reshape(rows, length) for m in moved]
            perm = np.broadcast_to(np.arange(length, dtype=np.int64), (rows, length)).copy()
            run_driver(ctx, sort_driver(len(xs)), [comp], perm, *flat)
        perm = perm.reshape(moved[0].shape)
    res = []
    for m, s in zip(moved, shapes):
        r = m if perm is None else np.take_along_axis(m, perm, axis=-1)
        res.append(np.ascontiguousarray(np.moveaxis(r, -1, dim)).astype(s.dtype, copy=False))
    return tuple(res) if ins.shape.is_tuple else res[0]


@dataclasses.dataclass(frozen=True)
class _Key:
    """One key of a comparator: operand `operand`'s values through `key_comp` (None: as
    they are), ordered by a compare of `direction` and `lt_type`; `eq_type` is the type of
    the EQ compare that hands ties on to the next key (None for the last key)."""
    operand: int
    key_comp: Computation | None
    direction: str
    lt_type: str | None
    eq_type: str | None = None
    last: bool = True


def _fast_order(comp: Computation, moved, ctx):
    """The stable sorting permutation (along the last axis) when the comparator is a
    lexicographic chain of key compares; None otherwise (or when the values break the
    order the numpy sort would assume: the merge sort then decides)."""
    plan = _key_plan(comp, ctx)
    if plan is None:
        return None
    keys = []
    for spec in plan:
        key = _sort_key(spec, moved[spec.operand], ctx)
        if key is None:
            return None
        keys.append(key)
    if len(keys) == 1:
        return np.argsort(keys[0], axis=-1, kind="stable")
    return np.lexsort(keys[::-1], axis=-1)


def _sort_key(spec: _Key, x, ctx):
    """An array whose ascending order is the order `spec` gives `x`, or None."""
    if spec.key_comp is None:
        key = x
    else:
        out_dt = spec.key_comp.root.shape.dtype
        src = np.ascontiguousarray(numba_array(x)).reshape(-1)
        out = np.empty(src.size, numba_dtype(out_dt))
        run_driver(ctx, map_driver(1), [spec.key_comp], out, src)
        key = from_numba(out, out_dt).reshape(x.shape)
    et = dtypes.from_dtype(key.dtype)
    if dtypes.is_complex(et):
        return None
    if dtypes.is_float(et):
        f = numba_array(key)
        eq_type = spec.lt_type if spec.last else spec.eq_type
        if spec.lt_type == "TOTALORDER" and eq_type == "TOTALORDER":
            key = total_order_key(f)
        else:
            # IEEE compares agree with numpy's float order only without NaN; an LT and EQ
            # of different types agree with each other only without -0 as well.
            if np.isnan(f).any():
                return None
            if spec.lt_type != eq_type and np.any((f == 0) & np.signbit(f)):
                return None
            key = f
    elif et == "pred":
        key = key.astype(np.uint8)
    elif spec.lt_type in ("SIGNED", "UNSIGNED") and (
            (spec.lt_type == "SIGNED") != dtypes.is_signed(et)):
        return None
    else:
        key = numba_array(key)
    if spec.direction == "GT":
        key = _descending(key)
    return key


def _key_plan(comp: Computation, ctx) -> list[_Key] | None:
    """The keys, most significant first, when `comp` is a single key compare
    compare(f(p[2i]), f(p[2i+1])), direction LT or GT, or a lexicographic chain
    or(compare_LT/GT(k), and(compare_EQ(k), <chain>)) of them (as jax emits for num_keys>1);
    worked out once per comparator and run context (ctx.kernel_cache)."""
    plans = ctx.kernel_cache.table("sort_key_plans")
    hit = plans.get(comp)
    if hit is None:
        params = comp.parameters
        plan = _chain(comp, comp.root, params) if len(params) % 2 == 0 else None
        hit = plans[comp] = (plan,)
    return hit[0]


def _type(ins: Instruction) -> str | None:
    t = ins.attrs.get("type")
    return str(t) if t is not None else None


def _chain(comp, node, params):
    if node.shape.rank != 0 or node.shape.element_type != "pred":
        return None
    if node.opcode == "compare":
        spec = _compare_key(comp, node, params)
        return [spec] if spec is not None else None
    if node.opcode != "or" or len(node.operands) != 2:
        return None
    for first, rest in (node.operands, node.operands[::-1]):
        if first.opcode != "compare" or rest.opcode != "and" or len(rest.operands) != 2:
            continue
        spec = _compare_key(comp, first, params)
        if spec is None:
            continue
        for eq, tail in (rest.operands, rest.operands[::-1]):
            if eq.opcode != "compare" or str(eq.attrs.get("direction", "")) != "EQ":
                continue
            a, b = first.operands
            if not any(P.same_expression(x, a, _param(a, params), _param(a, params)) and
                       P.same_expression(y, b, _param(b, params), _param(b, params))
                       for x, y in (eq.operands, eq.operands[::-1])):
                continue
            tail_plan = _chain(comp, tail, params)
            if tail_plan is not None:
                spec = dataclasses.replace(spec, eq_type=_type(eq), last=False)
                return [spec] + tail_plan
    return None


def _param(ins: Instruction, params):
    """The one parameter `ins` is computed from (None if several)."""
    for p in params:
        if P.depends_only_on(ins, p):
            return p
    return None


def _compare_key(comp, node, params) -> _Key | None:
    direction = str(node.attrs.get("direction", ""))
    if direction not in ("LT", "GT"):
        return None
    lhs, rhs = node.operands
    for i in range(len(params) // 2):
        pa, pb = params[2 * i], params[2 * i + 1]
        for a, b, d in ((lhs, rhs, direction), (rhs, lhs, "GT" if direction == "LT" else "LT")):
            if (P.depends_only_on(a, pa) and P.depends_only_on(b, pb)
                    and P.same_expression(a, b, pa, pb)):
                key_comp = None if a is pa else _extract(comp, a, pa)
                return _Key(i, key_comp, d, _type(node))
    return None


def _extract(comp: Computation, root: Instruction, param: Instruction) -> Computation:
    """A one-parameter computation computing `root` from `param`."""
    new: dict[int, Instruction] = {}
    order: list[Instruction] = []

    def visit(ins: Instruction) -> Instruction:
        got = new.get(id(ins))
        if got is not None:
            return got
        if ins is param:
            n = dataclasses.replace(ins, operands=[], control_predecessors=[],
                                    parameter_number=0, attrs=dict(ins.attrs))
        else:
            ops = [visit(o) for o in ins.operands]
            n = dataclasses.replace(ins, operands=ops, control_predecessors=[],
                                    attrs=dict(ins.attrs))
        new[id(ins)] = n
        order.append(n)
        return n

    new_root = visit(root)
    return Computation(f"{comp.name}.sort_key", order, new_root)


@kernel("topk")
def _topk(ins, args, ctx):
    x = np.asarray(args[0])
    k = ins.attrs["k"]
    largest = ins.attrs.get("largest", True)
    vshape, ishape = ins.shape.tuple_shapes
    et = dtypes.from_dtype(x.dtype)
    if dtypes.is_float(et):
        key = total_order_key(x)
    elif et == "pred":
        key = x.astype(np.uint8)
    else:
        key = numba_array(x)
    if largest:
        key = _descending(key)
    if x.ndim == 0 or x.shape[-1] == 0:
        order = np.zeros(x.shape[:-1] + (0,), np.int64)
    else:
        order = np.argsort(key, axis=-1, kind="stable")[..., :k]
    values = np.take_along_axis(x, order, axis=-1).astype(vshape.dtype, copy=False)
    return values.reshape(vshape.dims), order.astype(ishape.dtype).reshape(ishape.dims)
