"""How a collective combines values: the reducer computation as fn(acc, x), applied in rank
order (the same bits on every device), with XLA:CPU's accumulation types."""
from __future__ import annotations

import numpy as np

from . import semantics as S


def combiner(ins, ctx):
    """fn(acc, x) applying the reducer computation elementwise (a numpy ufunc when it is a
    plain add / multiply / maximum / minimum / and / or, else the compiled scalar form)."""
    from ..cpu import comp_patterns as P
    from ..cpu.driver_cache import run_driver
    from ..cpu.jit_drivers import from_numba, map_driver, numba_array
    comp = ins.attrs["to_apply"]
    op = P.binary_op(comp)
    et = comp.root.shape.element_type
    uf = P.ufunc_for(op, et) if op is not None else None
    if uf is not None:
        return ufunc_combiner(uf, et)

    def apply(a, b):
        xs = [np.ascontiguousarray(numba_array(v)).reshape(-1) for v in (a, b)]
        out = np.empty(xs[0].size, xs[0].dtype)
        if out.size:
            run_driver(ctx, map_driver(2), [comp], out, *xs)
        return from_numba(out, a.dtype).reshape(a.shape)
    return apply


def ufunc_combiner(uf, et: str):
    """fn(acc, x) combining with the numpy ufunc `uf` as XLA:CPU does for element type `et`:
    bf16 and f8 in f32, rounded once by `reduce_values` (measured against jax 0.10.2: bf16
    and f8e4m3fn sums match f32 accumulation, f16 sums match f16 steps)."""
    if et == "bf16" or et.startswith("f8"):
        return _widened(uf)
    return _plain(uf)


class _plain:
    """A combiner that is one ufunc on the element type (`ufunc`: shares.py applies it in
    place)."""

    def __init__(self, uf):
        self.ufunc = uf

    def __call__(self, a, b):
        return self.ufunc(a, b).astype(a.dtype, copy=False)


class _widened:
    """A combiner that accumulates in f32; `reduce_values` rounds to the element type once."""

    def __init__(self, uf):
        self.uf = uf

    def __call__(self, a, b):
        return self.uf(a.astype(np.float32), np.asarray(b).astype(np.float32))


def reduce_values(values, combine, dtype):
    acc = S.reduce_in_rank_order(values, combine)
    return acc.astype(dtype) if isinstance(combine, _widened) else acc
