"""Numba loop drivers that call a compiled scalar computation (reducer, combiner, comparator).

A driver takes the jitted scalar function as its first argument (a first-class dispatcher),
so numba specialises it per function and the call is direct.  Drivers are generated from
source once per arity (variadic reduce, sort with several operands, ...) and kept in
`_DRIVERS`.  In this form they are not disk-cached: a driver's signature includes the
dispatcher type of the scalar function, which is new in every process.  So each keeps its
source (`bound_source`: source, name, function parameters), from which driver_cache.py
makes one module of the driver and its computations for the JIT cache -- what the kernels
run; this form is their fallback.

Values of element types numba lacks (f16, bf16, f8*, s4, u4, ...) travel as a wider type
(`numba_array`) and are rounded back when the result is built (`from_numba`).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..common.scalar_base import numba_dtype  # noqa: F401 - the CPU modules' import point
from .bf16_convert import is_bf16, to_bf16, to_f32
from .jit_options import entry_options


def numba_array(a, parallel: bool = False) -> np.ndarray:
    """`a` as numba's compute dtype (bf16 widened by bf16_convert.to_f32: `parallel` over
    numba's threads for a large one)."""
    a = np.asarray(a)
    nt = numba_dtype(a.dtype)
    if a.dtype == nt:
        return a
    return to_f32(a, parallel) if is_bf16(a.dtype) else a.astype(nt)


def loop_storage(dt) -> np.dtype:
    """The dtype a compiled loop (fused_loop.py, row_loop.py) reads and writes an array of
    element type `dt` as: bf16 as its bits (uint16; the loop widens and rounds inline with
    _xbf16_load / _xbf16_store: no f32 copy in, no rounding pass out), else numba's."""
    return np.dtype(np.uint16) if is_bf16(dt) else numba_dtype(dt)


def loop_array(a, parallel: bool = False) -> np.ndarray:
    """An array operand of a compiled loop, flat and contiguous, in its loop_storage dtype."""
    a = np.ascontiguousarray(a)
    if is_bf16(a.dtype):
        return a.reshape(-1).view(np.uint16)
    return np.ascontiguousarray(numba_array(a, parallel)).reshape(-1)


def from_loop(a, dt, parallel: bool = False) -> np.ndarray:
    """A compiled loop's flat result (loop_storage) -> element type `dt`."""
    return a.view(dt) if is_bf16(dt) else from_numba(a, dt, parallel)


def numba_scalar(a):
    """A 0-d value as a numpy scalar numba can type."""
    return numba_array(a).reshape(())[()]


def from_numba(a, dt, parallel: bool = False) -> np.ndarray:
    """A compute array -> element type `dt` (bf16 rounded by bf16_convert.to_bf16, ml_dtypes'
    bits 9x faster; `parallel` as for numba_array)."""
    dt = np.dtype(dt)
    if a.dtype == dt:
        return a
    return to_bf16(a, parallel) if is_bf16(dt) else a.astype(dt)


_DRIVERS: dict[tuple, object] = {}


def _compile(key, src: str, name: str, params: tuple[str, ...] = ("fn",)):
    fn = _DRIVERS.get(key)
    if fn is None:
        ns = {"np": np}
        exec(compile(src, f"<xlaplug driver {key}>", "exec"), ns)
        fn = _DRIVERS[key] = njit(**entry_options({"nogil": True}))(ns[name])
        fn.bound_source = (src, name, params)  # driver_cache.py's form
    return fn


def _call(results: list[str], args: list[str]) -> str:
    """`r0, r1 = fn(args)` -- a tuple result when there are several."""
    return f"{', '.join(results)} = fn({', '.join(args)})"


def reduce_driver(n: int):
    """rows(fn, x0.., i0.., o0..): o_j[m] = fold of row m of x_j (shape (M, K)) from i_j."""
    xs = [f"x{j}" for j in range(n)]
    inits = [f"i{j}" for j in range(n)]
    outs = [f"o{j}" for j in range(n)]
    acc = [f"a{j}" for j in range(n)]
    src = [f"def rows(fn, {', '.join(xs + inits + outs)}):",
           "    M = x0.shape[0]", "    K = x0.shape[1]",
           "    for m in range(M):"]
    src += [f"        {a} = {i}" for a, i in zip(acc, inits)]
    src += ["        for k in range(K):",
            "            " + _call(acc, acc + [f"{x}[m, k]" for x in xs])]
    src += [f"        {o}[m] = {a}" for o, a in zip(outs, acc)]
    return _compile(("reduce", n), "\n".join(src) + "\n", "rows")


def map_driver(n: int):
    """elems(fn, out, x0..): out[i] = fn(x0[i], ..)."""
    xs = [f"x{j}" for j in range(n)]
    src = [f"def elems(fn, out{''.join(', ' + x for x in xs)}):",
           "    for i in range(out.shape[0]):",
           f"        out[i] = fn({', '.join(x + '[i]' for x in xs)})"]
    return _compile(("map", n), "\n".join(src) + "\n", "elems")


def scatter_driver(n: int):
    """apply(fn, idx, o0.., u0..): o_j[idx[t]] = combine(o_j[idx[t]], u_j[t]) in order of t."""
    os_ = [f"o{j}" for j in range(n)]
    us = [f"u{j}" for j in range(n)]
    acc = [f"r{j}" for j in range(n)]
    src = [f"def apply(fn, idx, {', '.join(os_ + us)}):",
           "    for t in range(idx.shape[0]):",
           "        p = idx[t]",
           "        " + _call(acc, [f"{o}[p]" for o in os_] + [f"{u}[t]" for u in us])]
    src += [f"        {o}[p] = {a}" for o, a in zip(os_, acc)]
    return _compile(("scatter", n), "\n".join(src) + "\n", "apply")


def window_driver(n: int):
    """windows(fn, x0.., i0.., o0.., strides, out_dims, win_dims, table, toff).

    For each output position (row-major) fold, from i_j, the operand elements its window
    covers in row-major window order; `table[toff[d] + o_d * win_dims[d] + w_d]` is the
    operand index along d, or -1 where the window lies on padding or a dilation hole.
    """
    xs = [f"x{j}" for j in range(n)]
    inits = [f"i{j}" for j in range(n)]
    outs = [f"o{j}" for j in range(n)]
    acc = [f"a{j}" for j in range(n)]
    src = [f"def windows(fn, {', '.join(xs + inits + outs)}, strides, out_dims, win_dims, "
           "table, toff):",
           "    R = out_dims.shape[0]",
           "    oidx = np.zeros(R, np.int64)",
           "    nw = 1",
           "    for d in range(R):",
           "        nw *= win_dims[d]",
           f"    for o in range({outs[0]}.shape[0]):",
           "        rem = o",
           "        for d in range(R - 1, -1, -1):",
           "            oidx[d] = rem % out_dims[d]",
           "            rem //= out_dims[d]"]
    src += [f"        {a} = {i}" for a, i in zip(acc, inits)]
    src += ["        for w in range(nw):",
            "            rem = w",
            "            flat = 0",
            "            ok = True",
            "            for d in range(R - 1, -1, -1):",
            "                wd = rem % win_dims[d]",
            "                rem //= win_dims[d]",
            "                t = table[toff[d] + oidx[d] * win_dims[d] + wd]",
            "                if t < 0:",
            "                    ok = False",
            "                    break",
            "                flat += t * strides[d]",
            "            if ok:",
            "                " + _call(acc, acc + [f"{x}[flat]" for x in xs])]
    src += [f"        {o}[o] = {a}" for o, a in zip(outs, acc)]
    return _compile(("window", n), "\n".join(src) + "\n", "windows")


_SELECT_AND_SCATTER_SRC = """
def loop(select, scatter, x, src, out, strides, out_dims, win_dims, table, toff):
    R = out_dims.shape[0]
    oidx = np.zeros(R, np.int64)
    nw = 1
    for d in range(R):
        nw *= win_dims[d]
    for s in range(src.shape[0]):
        rem = s
        for d in range(R - 1, -1, -1):
            oidx[d] = rem % out_dims[d]
            rem //= out_dims[d]
        picked = -1
        best = x[0]
        for w in range(nw):
            rem = w
            flat = 0
            ok = True
            for d in range(R - 1, -1, -1):
                wd = rem % win_dims[d]
                rem //= win_dims[d]
                t = table[toff[d] + oidx[d] * win_dims[d] + wd]
                if t < 0:
                    ok = False
                    break
                flat += t * strides[d]
            if not ok:
                continue
            v = x[flat]
            if picked < 0:
                picked = flat
                best = v
            if not select(best, v):
                picked = flat
                best = v
        if picked >= 0:
            out[picked] = scatter(src[s], out[picked])
"""


def select_and_scatter_driver():
    """loop(select, scatter, x, src, out, strides, out_dims, win_dims, table, toff): for each
    source element (row-major) pick the window element `select` prefers, then out[picked] =
    scatter(source, out[picked]).  Windows entirely on padding scatter nothing."""
    return _compile(("select_and_scatter",), _SELECT_AND_SCATTER_SRC, "loop",
                    ("select", "scatter"))


_SORT_SRC = """
def rows(fn, perm, {xs}):
    M = perm.shape[0]
    L = perm.shape[1]
    buf = np.empty(L, perm.dtype)
    for m in range(M):
        src = perm[m]
        width = 1
        while width < L:
            lo = 0
            while lo < L:
                mid = min(lo + width, L)
                hi = min(lo + 2 * width, L)
                i = lo
                j = mid
                k = lo
                while i < mid and j < hi:
                    a = src[i]
                    b = src[j]
                    if {b_before_a}:
                        buf[k] = b
                        j += 1
                    else:
                        buf[k] = a
                        i += 1
                    k += 1
                while i < mid:
                    buf[k] = src[i]
                    i += 1
                    k += 1
                while j < hi:
                    buf[k] = src[j]
                    j += 1
                    k += 1
                lo = hi
            for q in range(L):
                src[q] = buf[q]
            width *= 2
"""


def sort_driver(n: int):
    """rows(fn, perm, x0..): stable bottom-up merge sort of each row's permutation `perm`
    (shape (M, L), initially 0..L-1) under the comparator fn(x0[a], x0[b], x1[a], x1[b], ..)
    (x_j are (M, L)); an element moves ahead of an earlier one only when fn says it is less,
    as std::stable_sort does."""
    xs = [f"x{j}" for j in range(n)]
    less = "fn(" + ", ".join(f"{x}[m, b], {x}[m, a]" for x in xs) + ")"
    src = _SORT_SRC.format(xs=", ".join(xs), b_before_a=less)
    return _compile(("sort", n), src, "rows")
