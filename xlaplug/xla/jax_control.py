"""HLO instructions that call computations, for the jax builder: reduce, reduce-window, map,
sort, while, conditional, call.  A reducer that is a binary monoid (add, multiply, maximum,
minimum, and, or, xor) becomes lax's own reduction (reduce_sum, ...), which jax
differentiates and batches; any other runs as lax.reduce with the computation evaluated by
the builder (`env.call`) as its jax function.
"""
from __future__ import annotations

import numpy as np

from .jax_lowering import MONOIDS, binary_monoid, no_lax

# ---- reductions and control flow: called computations ---------------------------------------

def _is_identity(value, monoid: str) -> bool:
    """Whether a concrete init value is the monoid's identity (then it need not be folded in)."""
    if not isinstance(value, np.ndarray) and not np.isscalar(value):
        return False  # a traced init: fold it in
    v = np.asarray(value)
    if v.dtype.kind == "f":
        ident = {"add": 0, "multiply": 1, "maximum": -np.inf, "minimum": np.inf}.get(monoid)
    elif v.dtype.kind == "b":
        ident = {"and": True, "or": False, "xor": False, "maximum": False,
                 "minimum": True, "add": False}.get(monoid)
    elif v.dtype.kind in "iu":
        info = np.iinfo(v.dtype)
        ident = {"add": 0, "multiply": 1, "maximum": info.min, "minimum": info.max,
                 "or": 0, "xor": 0, "and": -1 if v.dtype.kind == "i" else info.max}.get(monoid)
    else:
        ident = {"add": 0, "multiply": 1}.get(monoid)
    return ident is not None and bool(np.all(v == ident))


def _reduce(jax, ins, ops, env):
    lax = jax.lax
    n = len(ops) // 2
    xs, inits = ops[:n], ops[n:]
    dims = tuple(int(d) for d in ins.attrs["dimensions"])
    comp = ins.attrs["to_apply"]
    monoid = binary_monoid(comp) if n == 1 else None
    if monoid is not None:
        reducer, fold = MONOIDS[monoid]
        r = getattr(lax, reducer)(xs[0], dims) if dims else xs[0]
        if not _is_identity(inits[0], monoid):
            r = getattr(lax, fold)(r, lax.convert_element_type(inits[0], r.dtype))
        return r

    def fn(acc, val):  # lax.reduce's computation: (accumulators, values) -> accumulators
        accs = acc if n > 1 else (acc,)
        vals = val if n > 1 else (val,)
        out = env.call(comp, [*accs, *vals])
        return tuple(out) if n > 1 else out
    r = lax.reduce(tuple(xs) if n > 1 else xs[0], tuple(inits) if n > 1 else inits[0], fn, dims)
    return tuple(r) if n > 1 else r


def _reduce_window(jax, ins, ops, env):
    lax = jax.lax
    n = len(ops) // 2
    w = ins.attrs["window"].dims
    comp = ins.attrs["to_apply"]
    monoid = binary_monoid(comp) if n == 1 else None
    args = dict(window_dimensions=[d.size for d in w], window_strides=[d.stride for d in w],
                padding=[(d.pad_lo, d.pad_hi) for d in w], base_dilation=[d.lhs_dilate for d in w],
                window_dilation=[d.rhs_dilate for d in w])
    if monoid in ("add", "maximum", "minimum") and _is_identity(ops[1], monoid):
        fn = {"add": lax.add, "maximum": lax.max, "minimum": lax.min}[monoid]
        return lax.reduce_window(ops[0], np.asarray(ops[1]), fn, **args)

    def fn(acc, val):
        accs = acc if n > 1 else (acc,)
        vals = val if n > 1 else (val,)
        out = env.call(comp, [*accs, *vals])
        return tuple(out) if n > 1 else out
    r = lax.reduce_window(tuple(ops[:n]) if n > 1 else ops[0],
                          tuple(ops[n:]) if n > 1 else ops[1], fn, **args)
    return tuple(r) if n > 1 else r


def _map(jax, ins, ops, env):
    # map applies a scalar computation elementwise: vmap it over every dimension.
    comp = ins.attrs["to_apply"]
    fn = lambda *xs: env.call(comp, list(xs))  # noqa: E731
    for _ in range(ins.shape.rank):
        fn = jax.vmap(fn)
    return fn(*ops)


def _sort(jax, ins, ops, env):
    comp = ins.attrs["to_apply"]
    root = comp.root
    p = comp.parameters
    # lax.sort orders by its own total order on the first operand; it is that sort only when
    # the comparator is `p0 < p1` on the first operand's pair.
    if not (root.opcode == "compare" and str(root.attrs.get("direction")) == "LT"
            and root.operands == [p[0], p[1]]):
        raise no_lax("sort", "only a comparator `compare(p0, p1), direction=LT` maps to lax.sort")
    dim = int(ins.attrs["dimensions"][0])
    r = jax.lax.sort(tuple(ops), dimension=dim, is_stable=bool(ins.attrs.get("is_stable")),
                     num_keys=1)
    return tuple(r) if ins.shape.is_tuple else r[0]


def _while(jax, ins, ops, env):
    cond, body = ins.attrs["condition"], ins.attrs["body"]
    return jax.lax.while_loop(lambda s: env.call(cond, [s]), lambda s: env.call(body, [s]),
                              ops[0])


def _conditional(jax, ins, ops, env):
    branches = ins.attrs.get("branch_computations")
    if branches is None:  # predicated: operand 1 goes to the true branch, 2 to the false one
        branches = [ins.attrs["false_computation"], ins.attrs["true_computation"]]
        ops = [ops[0], ops[2], ops[1]]
    index = jax.lax.convert_element_type(ops[0], np.int32)
    if ins.attrs.get("branch_computations") is not None:
        # HLO runs the last branch for an index out of range; lax.switch would clamp -1 to 0.
        last = np.int32(len(branches) - 1)
        index = jax.lax.select((index < 0) | (index > last), jax.lax.full_like(index, last),
                               index)
    fns = [lambda args, c=c, k=k: env.call(c, [args[k]]) for k, c in enumerate(branches)]
    return jax.lax.switch(index, fns, tuple(ops[1:]))


def _call(jax, ins, ops, env):
    return env.call(ins.attrs["to_apply"], list(ops))


CONTROL = {"reduce": _reduce, "reduce-window": _reduce_window, "map": _map, "sort": _sort,
            "while": _while, "conditional": _conditional, "call": _call}
