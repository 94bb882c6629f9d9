"""CUDA sort and topk.

sort   A stable parallel merge sort of every row along `dimensions={d}`: log2(L) passes,
       each one thread per element.  Pass w merges sorted runs [lo, lo+w) and [lo+w,
       lo+2w) of the row's permutation: an element of the left run moves ahead by the number
       of right-run elements the comparator puts strictly before it; an element of the right
       run moves ahead by the number of left-run elements it does not go before (binary
       searches calling the comparator device function).  For a comparator that is a strict
       weak order this is exactly std::stable_sort's result (the CPU kernel's merge sort):
       equivalent elements keep their order, so is_stable=true and false both hold.  A
       comparator that is not a strict weak order (an IEEE LT on floats holding NaN) has no
       well-defined sorted order: the result is then a permutation that can differ from the
       CPU kernel's.  A last kernel gathers every operand by the permutation.  The
       comparator gets comparator(a0, b0, a1, b1, ...) ("a before b") in compute types (f16
       as float32), as on the CPU.
topk   XLA's TopkDecomposer: a stable sort of each last-dimension row by a total-order GT
       (largest) or LT key -- floats through their bits (-NaN < -inf < .. < -0 < +0 < .. <
       inf < NaN, as the CPU kernel's total_order_key), complex lexicographically (real,
       imag) -- then the first k values and their s32 indices; ties keep index order.

The merge machinery (`sort_permutation`) also serves the scatter kernel (gather_scatter.py).
"""
from __future__ import annotations

import numpy as np

from ..common.errors import ExecutionError
from ..common.plans import row_strides
from ..registry import kernel as _kernel
from .data_movement import size_of, tup
from .launch import (cached_kernel, cuda_module, device_empty, flat, jit_source,
                     launch_stride_loop, src_kernel)
from .reductions import device_function, gen_kernel, load


def kernel(*opcodes):
    return _kernel(*opcodes, device="cuda")


_INIT_PERM = """
def init_perm(p, N, L):
    for g in range(cuda.grid(1), N, cuda.gridsize(1)):
        p[g] = g % L
"""

_MERGE = """
def merge(N, L, w, lead_dims, lead_st, sd, pin, pout, {xs}):
    for g in range(cuda.grid(1), N, cuda.gridsize(1)):
        m = g // L
        i = g - m * L
        rem = m
        base = 0
        for d in range(len(lead_dims) - 1, -1, -1):
            c = rem % lead_dims[d]
            rem //= lead_dims[d]
            base += c * lead_st[d]
        lo = (i // (2 * w)) * (2 * w)
        mid = lo + w
        if mid > L:
            mid = L
        hi = lo + 2 * w
        if hi > L:
            hi = L
        row = m * L
        e = pin[row + i]
        if i < mid:
            a = mid
            b = hi
            while a < b:
                c = (a + b) // 2
                o = pin[row + c]
                if {o_before_e}:
                    a = c + 1
                else:
                    b = c
            pos = i + (a - mid)
        else:
            a = lo
            b = mid
            while a < b:
                c = (a + b) // 2
                o = pin[row + c]
                if {e_before_o}:
                    b = c
                else:
                    a = c + 1
            pos = lo + (i - mid) + (a - lo)
        pout[row + pos] = e
"""


def _before(a: str, b: str, names, dts) -> str:
    args = []
    for x, dt in zip(names, dts):
        args.append(load(x, f"base + {a} * sd", dt))
        args.append(load(x, f"base + {b} * sd", dt))
    return f"fn({', '.join(args)})"


def sort_permutation(fn, operands, M: int, L: int, lead_dims, lead_st, sd: int):
    """The stable sorting permutation (device int64 array, M*L: row m's order of positions
    0..L-1) of M rows of L elements; element l of row m of operand j is
    operands[j][base(m) + l*sd], base(m) = the lead coordinates of m dotted with lead_st.
    fn(a0, b0, a1, b1, ...) is "a before b"."""
    cuda = cuda_module()
    N = M * L
    p = cuda.device_array(max(N, 1), np.int64)
    if N == 0:
        return p
    launch_stride_loop(src_kernel("init_perm", _INIT_PERM, "init_perm"), N, p, N, L)
    if L <= 1:
        return p
    n = len(operands)
    names = [f"x{j}" for j in range(n)]
    dts = [a.dtype for a in operands]
    src = _MERGE.format(xs=", ".join(names), o_before_e=_before("o", "e", names, dts),
                        e_before_o=_before("e", "o", names, dts))
    k = gen_kernel(("merge", n, tuple(np.dtype(d).str for d in dts)), src, "merge", {"fn": fn})
    q = cuda.device_array(N, np.int64)
    w = 1
    args = (tup(lead_dims, 1), tup(lead_st, 0), int(sd))
    flats = [flat(a) for a in operands]
    while w < L:
        launch_stride_loop(k, N, N, L, w, *args, p, q, *flats, threads=128)
        p, q = q, p
        w *= 2
    return p


_GATHER = """
def sort_gather(out, x, perm, N, L, lead_dims, lead_st, sd):
    for g in range(cuda.grid(1), N, cuda.gridsize(1)):
        m = g // L
        i = g - m * L
        rem = m
        base = 0
        for d in range(len(lead_dims) - 1, -1, -1):
            c = rem % lead_dims[d]
            rem //= lead_dims[d]
            base += c * lead_st[d]
        out[base + i * sd] = x[base + perm[g] * sd]
"""


def _rows(shape, dim):
    st = row_strides(shape)
    lead = [d for d in range(len(shape)) if d != dim]
    return ([shape[d] for d in lead], [st[d] for d in lead], st[dim],
            size_of([shape[d] for d in lead]), shape[dim])


@kernel("sort")
def _sort(ins, args, ctx):
    dim = int(ins.attrs["dimensions"][0])
    comp = ins.attrs["to_apply"]
    shapes = ins.shape.tuple_shapes if ins.shape.is_tuple else (ins.shape,)
    shape = tuple(args[0].shape)
    outs = [device_empty(s) for s in shapes]
    lead_dims, lead_st, sd, M, L = _rows(shape, dim)
    N = M * L
    if N:
        if L > 1:
            fn = device_function(ins, comp)
            perm = sort_permutation(fn, list(args), M, L, lead_dims, lead_st, sd)
        else:
            perm = sort_permutation(None, [], M, L, lead_dims, lead_st, sd)
        k = src_kernel("sort_gather", _GATHER, "sort_gather")
        for o, x in zip(outs, args):
            launch_stride_loop(k, N, flat(o), flat(x), perm, N, L, tup(lead_dims, 1),
                               tup(lead_st, 0), sd)
    return tuple(outs) if ins.shape.is_tuple else outs[0]


# ---- topk ---------------------------------------------------------------------------------

_KEY_FNS = {
    # a before b on total-order keys of float bits (int views)
    "bits": """
def before(a, b):
    ka = a ^ MAXV if a < 0 else a
    kb = b ^ MAXV if b < 0 else b
    return ka {op} kb
""",
    "plain": """
def before(a, b):
    return a {op} b
""",
    "pred": """
def before(a, b):
    return int(a) {op} int(b)
""",
    "complex": """
def before(a, b):
    if a.real != b.real:
        return a.real {op} b.real
    return a.imag {op} b.imag
""",
}

_BITS_VIEW = {np.dtype(np.float16): (np.int16, 0x7FFF),
              np.dtype(np.float32): (np.int32, 0x7FFFFFFF),
              np.dtype(np.float64): (np.int64, 0x7FFFFFFFFFFFFFFF)}


def _topk_key(x, largest: bool):
    """(key array, before device function) ordering x's elements as topk does."""
    dt = np.dtype(x.dtype)
    op = ">" if largest else "<"
    ns = {}
    if dt in _BITS_VIEW:
        it, maxv = _BITS_VIEW[dt]
        key = flat(x).view(it) if size_of(x.shape) else x
        kind = "bits"
        ns["MAXV"] = it(maxv)
    elif dt.kind == "b":
        key, kind = x, "pred"
    elif dt.kind == "c":
        key, kind = x, "complex"
    else:
        key, kind = x, "plain"
    fn = _device_fn(("topk_before", kind, op, dt.str), _KEY_FNS[kind].format(op=op), ns)
    return key, fn


def _device_fn(key, src, ns):
    """The `before` device function of `src`, compiled once per key (launch.py's table)."""
    return cached_kernel(key, lambda: jit_source(src, "before", ns, device=True))


_TOPK_TAKE = """
def take(vals, idx, x, perm, N, L, k):
    for g in range(cuda.grid(1), N, cuda.gridsize(1)):
        m = g // k
        j = g - m * k
        p = perm[m * L + j]
        vals[g] = x[m * L + p]
        idx[g] = p
"""


@kernel("topk")
def _topk(ins, args, ctx):
    x = args[0]
    k = int(ins.attrs["k"])
    largest = bool(ins.attrs.get("largest", True))
    vshape, ishape = ins.shape.tuple_shapes
    vals, idx = device_empty(vshape), device_empty(ishape)
    shape = tuple(x.shape)
    if not shape:
        raise ExecutionError(f"topk '{ins.name}': the operand must have rank >= 1")
    L = shape[-1]
    M = size_of(shape[:-1])
    if k > L:
        raise ExecutionError(f"topk '{ins.name}': k={k} exceeds the last dimension {L}")
    if M * k == 0:
        return vals, idx
    key, fn = _topk_key(x, largest)
    perm = sort_permutation(fn, [key], M, L, [M], [L], 1)
    kt = src_kernel("topk_take", _TOPK_TAKE, "take")
    launch_stride_loop(kt, M * k, flat(vals), flat(idx), flat(x), perm, M * k, L, k)
    return vals, idx
