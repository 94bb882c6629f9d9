"""reduce and map.

reduce folds, for every output element, the reduced elements in row-major order of the
reduced dimensions: acc = init; acc = reducer(acc..., x...) (XLA's HloEvaluator order; a
variadic reducer takes N accumulators then N elements and returns an N-tuple).  A reducer
that is a plain add/multiply/maximum/minimum/and/or of its two parameters, with the
identity as init value, runs as a numpy reduction instead (sums then add in numpy's
pairwise order), except a complex product (XLA's multiply contracts into FMAs: the loop).  Narrow floats (f16, bf16, f8) travel as f32; their add/multiply keep the
compiled loop, so every step rounds to the narrow type as in XLA.
"""
from __future__ import annotations

import numpy as np

from ..registry import kernel
from . import comp_patterns as P
from .jit_store import cached_njit
from .driver_cache import run_driver
from .jit_drivers import (from_numba, map_driver, numba_array, numba_dtype, numba_scalar,
                          reduce_driver)


def _out_shapes(ins):
    return ins.shape.tuple_shapes if ins.shape.is_tuple else (ins.shape,)


@kernel("reduce")
def _reduce(ins, args, ctx):
    n = len(args) // 2
    xs = [np.asarray(x) for x in args[:n]]
    inits = [np.asarray(i) for i in args[n:]]
    dims = tuple(sorted(ins.attrs.get("dimensions", ())))
    comp = ins.attrs["to_apply"]
    shapes = _out_shapes(ins)
    if n == 1:
        fast = _fast_reduce(comp, xs[0], inits[0], dims, shapes[0])
        if fast is not None:
            return fast
    kept = [d for d in range(xs[0].ndim) if d not in dims]
    perm = kept + list(dims)
    m = int(np.prod([xs[0].shape[d] for d in kept], dtype=np.int64))
    k = int(np.prod([xs[0].shape[d] for d in dims], dtype=np.int64))
    rows = [np.ascontiguousarray(numba_array(x).transpose(perm)).reshape(m, k) for x in xs]
    outs = [np.empty(m, numba_dtype(s.dtype)) for s in shapes]
    if m:
        run_driver(ctx, reduce_driver(n), [comp], *rows, *[numba_scalar(i) for i in inits],
                   *outs)
    res = [from_numba(o, s.dtype).reshape(s.dims) for o, s in zip(outs, shapes)]
    return tuple(res) if ins.shape.is_tuple else res[0]


def _fast_reduce(comp, x, init, dims, shape):
    uf = P.identity_fold_ufunc(comp, x, init, shape)
    if uf is None:
        return None
    if x.size == 0 or not dims:
        if not dims:
            return x.copy()
        return np.full(shape.dims, init, shape.dtype)
    work = numba_array(x)  # narrow floats as f32: exact for max/min
    r = _leading_sums(work, dims) if uf is np.add else None
    if r is None:
        r = uf.reduce(work, axis=dims, dtype=work.dtype if work.dtype != np.bool_ else None)
    return np.asarray(r).astype(shape.dtype, copy=False).reshape(shape.dims)


# Sums over a block of dimensions with a short kept block after it: numpy's reduction then
# runs an inner loop of the kept block's length per reduced row (a bias gradient: f32
# [16,32,32,32] over {0,1,2}, 0.22 ms), the compiled loop below the same adds in the same
# order (0.05 ms; one core, 2026-12-06).
_SUMS_FROM, _SUMS_MOST_KEPT = 1 << 12, 1 << 12


def _leading_sums(x: np.ndarray, dims) -> np.ndarray | None:
    """x [A..., R..., C...] summed over the R block `dims` as numpy's add.reduce sums it
    -- every output element in the reduced rows' order, one add at a time (its pairwise
    sum is along a reduced innermost dimension only, which this never is) -- but from the
    init 0 as XLA folds, where numpy starts from the first row (a column of -0.0 only: +0.0
    here and in XLA, -0.0 in numpy); for a C-contiguous f32/f64 x whose kept inner block C
    holds 2.._SUMS_MOST_KEPT elements; else None."""
    if x.dtype not in (np.float32, np.float64) or x.size < _SUMS_FROM \
            or not x.flags.c_contiguous or list(dims) != list(range(dims[0], dims[-1] + 1)):
        return None
    a = int(np.prod(x.shape[:dims[0]], dtype=np.int64))
    c = int(np.prod(x.shape[dims[-1] + 1:], dtype=np.int64))
    if not 2 <= c <= _SUMS_MOST_KEPT:
        return None
    out = np.empty((a, c), x.dtype)
    _sum_rows(x.reshape(a, -1, c), out)
    return out


@cached_njit(lazy=True, nogil=True)
def _sum_rows(x, out):
    """out[a, :] = 0 + x[a, 0, :] + x[a, 1, :] + ... in that order."""
    for a in range(x.shape[0]):
        out[a, :] = 0
        for r in range(x.shape[1]):
            for j in range(x.shape[2]):
                out[a, j] += x[a, r, j]


@kernel("map")
def _map(ins, args, ctx):
    comp = ins.attrs["to_apply"]
    xs = [numba_array(np.asarray(a)).reshape(-1) for a in args]
    out = np.empty(ins.shape.num_elements(), numba_dtype(ins.shape.dtype))
    if out.size:
        run_driver(ctx, map_driver(len(xs)), [comp], out,
                   *[np.ascontiguousarray(x) for x in xs])
    return from_numba(out, ins.shape.dtype).reshape(ins.shape.dims)
