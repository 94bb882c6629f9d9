"""CUDA gather and scatter, with full dimension numbers (explicit batching dims included).

Semantics are those of the CPU kernels (cpu/gather_scatter.py, HloEvaluator); both read
their dimension maps from common/plans_gather.py:
  gather   one thread per result element: its batch coordinates pick an index vector, read
           on the device from the index array (any integer type), each start clamped into
           [0, operand_dim - slice_size] (unsigned indices past int64 clamp high); operand
           batching dims take the batch coordinate of their indices dimension.
  scatter  an update window any part of which falls outside the operand is skipped whole.
           Deterministic, in XLA's update order, for any combiner (no atomics):
             1. one thread per update element, in application order t (row-major over the
                update scatter dims, then the window dims), computes its target position in
                the operand (or a past-the-end key when its window is out of bounds);
             2. a stable sort of t by target (sorting.sort_permutation) groups the updates
                of every target, keeping their application order;
             3. one thread per operand element finds its group (binary search) and folds
                acc = combiner(acc.., update..) over it from the operand's value, in order.
           Updates to one element are therefore applied serially in exactly the CPU
           kernel's order (a non-commutative or inexact combiner gives XLA's result), while
           different elements run in parallel.
"""
from __future__ import annotations

import numpy as np

from ..common.plans import row_strides
from ..common.plans_gather import gather_plan, scatter_plan
from ..registry import kernel as _kernel
from .data_movement import copy_contiguous, fill_value, size_of, tup
from .launch import (cached_kernel, cuda_module, device_empty, flat, jit_source,
                     launch_stride_loop, src_kernel)
from .reductions import device_function, gen_kernel, load
from .sorting import sort_permutation


def kernel(*opcodes):
    return _kernel(*opcodes, device="cuda")


_GATHER = """
def gather(out, x, idx, N, odims, ostr, oistep, oxstep, xmode, xkey, hi, xst, ivs):
    for i in range(cuda.grid(1), N, cuda.gridsize(1)):
        rem = i
        ipos = 0
        xoff = 0
        for od in range(len(odims) - 1, -1, -1):
            c = rem % odims[od]
            rem //= odims[od]
            ipos += c * oistep[od]
            xoff += c * oxstep[od]
        for d in range(len(xst)):
            mode = xmode[d]
            if mode == 1:
                r = idx[ipos + xkey[d] * ivs]
                if r < 0:
                    s = int64(0)
                elif r > hi[d]:
                    s = int64(hi[d])
                else:
                    s = int64(r)
                xoff += s * xst[d]
            elif mode == 2:
                od = xkey[d]
                c = (i // ostr[od]) % odims[od]
                if c > hi[d]:
                    c = hi[d]
                xoff += c * xst[d]
        out[i] = x[xoff]
"""


def _int64_ns():
    from numba import int64
    return {"int64": int64}


@kernel("gather")
def _gather(ins, args, ctx):
    x, idx = args[0], args[1]
    out = device_empty(ins.shape)
    N = ins.shape.num_elements()
    if N == 0:
        return out
    xshape, ishape = tuple(x.shape), tuple(idx.shape)
    if size_of(xshape) == 0:
        return fill_value(out, 0)
    plan = gather_plan(ins, xshape, ishape)
    out_dims = tuple(ins.shape.dims)
    ist, xst = row_strides(ishape), row_strides(xshape)
    # Per result dim, its step through the index array (batch dims) or the operand (offset
    # dims); per operand dim, where its start comes from (mode 1: index-vector component
    # xkey, mode 2: the coordinate of result dim xkey).
    oistep, oxstep = [0] * len(out_dims), [0] * len(out_dims)
    for od, idim in zip(plan.out_batch_dims, plan.batch_dims):
        oistep[od] = ist[idim]
    for od, d in zip(plan.out_offset_dims, plan.offset_operand_dims):
        oxstep[od] = xst[d]
    xmode, xkey = _start_modes(plan, plan.out_batch_dims)
    ivs = ist[plan.index_vector_dim] if plan.index_vector_dim < len(ishape) else 0
    k = src_kernel("gather", _GATHER, "gather", _int64_ns())
    launch_stride_loop(k, N, flat(out), flat(x), flat(idx), N, tup(out_dims, 1),
                       tup(row_strides(out_dims), 1), tup(oistep, 0), tup(oxstep, 0), tup(xmode, 0),
                       tup(xkey, 0), tup(plan.start_hi, 0), tup(xst, 0), ivs)
    return out


def _start_modes(plan, batch_keys):
    """The kernels' start encoding of a plan: per operand dim, mode 1 with the index-vector
    component, mode 2 with batch_keys[its batch position], or mode 0 (start 0)."""
    xmode, xkey = [0] * len(plan.operand_dims), [0] * len(plan.operand_dims)
    for d, (k, j) in enumerate(zip(plan.start_component, plan.start_batch)):
        if k >= 0:
            xmode[d], xkey[d] = 1, k
        elif j >= 0:
            xmode[d], xkey[d] = 2, batch_keys[j]
    return xmode, xkey


_TARGETS = """
def targets(T, NW, BIG, sdims, sstr, sust, sist, wdims, wstr, wust, xmode, xkey, wpos, hi,
            xst, ivs, idx, key, uidx):
    for t in range(cuda.grid(1), T, cuda.gridsize(1)):
        s = t // NW
        w = t - s * NW
        ipos = 0
        u = 0
        for j in range(len(sdims)):
            c = (s // sstr[j]) % sdims[j]
            ipos += c * sist[j]
            u += c * sust[j]
        for q in range(len(wdims)):
            u += ((w // wstr[q]) % wdims[q]) * wust[q]
        tgt = 0
        ok = True
        for d in range(len(xst)):
            mode = xmode[d]
            st = int64(0)
            if mode == 1:
                r = idx[ipos + xkey[d] * ivs]
                if r < 0 or r > hi[d]:
                    ok = False
                    break
                st = int64(r)
            elif mode == 2:
                j = xkey[d]
                st = (s // sstr[j]) % sdims[j]
                if st > hi[d]:
                    ok = False
                    break
            q = wpos[d]
            if q >= 0:
                st += (w // wstr[q]) % wdims[q]
            tgt += st * xst[d]
        if ok:
            key[t] = tgt
        else:
            key[t] = BIG
        uidx[t] = u
"""

_LESS = """
def less(a, b):
    return a < b
"""

_APPLY = """
def apply(N, T, key, perm, uidx, {operands}, {updates}, {outs}):
    for p in range(cuda.grid(1), N, cuda.gridsize(1)):
        a = 0
        b = T
        while a < b:
            c = (a + b) // 2
            if key[perm[c]] < p:
                a = c + 1
            else:
                b = c
{init}        r = a
        while r < T:
            t = perm[r]
            if key[t] != p:
                break
            u = uidx[t]
            {lhs} = fn({args})
            r += 1
{store}"""

def _less_fn():
    return cached_kernel("scatter_less", lambda: jit_source(_LESS, "less", None, device=True))


@kernel("scatter")
def _scatter(ins, args, ctx):
    n = (len(args) - 1) // 2
    operands, idx, updates = args[:n], args[n], args[n + 1:]
    a = ins.attrs
    comp = a["to_apply"]
    shapes = ins.shape.tuple_shapes if ins.shape.is_tuple else (ins.shape,)
    outs = [device_empty(s) for s in shapes]
    xshape, ishape, ushape = tuple(operands[0].shape), tuple(idx.shape), tuple(updates[0].shape)
    N, U = size_of(xshape), size_of(ushape)
    if N == 0 or U == 0:
        for o, x in zip(outs, operands):
            copy_contiguous(o, x)
        return tuple(outs) if ins.shape.is_tuple else outs[0]
    plan = scatter_plan(ins, xshape, ishape, ushape)
    ist, ust, xst = row_strides(ishape), row_strides(ushape), row_strides(xshape)
    sdims = [ushape[d] for d in plan.update_scatter_dims]
    sstr = row_strides(sdims)
    wdims = [ushape[d] for d in plan.update_window_dims]
    wstr = row_strides(wdims)
    xmode, xkey = _start_modes(plan, range(len(plan.batch_dims)))
    wpos = [-1] * len(xshape)
    for q, d in enumerate(plan.window_operand_dims):
        wpos[d] = q
    NW = size_of(wdims)
    T = size_of(sdims) * NW
    ivs = ist[plan.index_vector_dim] if plan.index_vector_dim < len(ishape) else 0
    cuda = cuda_module()
    key = cuda.device_array(T, np.int64)
    uidx = cuda.device_array(T, np.int64)
    k1 = src_kernel("scatter_targets", _TARGETS, "targets", _int64_ns())
    geometry = (tup(sdims, 1), tup(sstr, 1), tup([ust[d] for d in plan.update_scatter_dims], 0),
                tup([ist[d] for d in plan.batch_dims], 0), tup(wdims, 1), tup(wstr, 1),
                tup([ust[d] for d in plan.update_window_dims], 0), tup(xmode, 0), tup(xkey, 0),
                tup(wpos, -1), tup(plan.start_hi, 0), tup(xst, 0))
    launch_stride_loop(k1, T, T, NW, N, *geometry, ivs, flat(idx), key, uidx, threads=128)
    perm = sort_permutation(_less_fn(), [key], 1, T, [1], [0], 1)
    # 3. fold each element's updates in order
    fn = device_function(ins, comp)
    tuple_root = comp.root.shape.is_tuple
    xs = [f"x{j}" for j in range(n)]
    us = [f"u{j}" for j in range(n)]
    os_ = [f"o{j}" for j in range(n)]
    acc = [f"a{j}" for j in range(n)]
    src = _APPLY.format(
        operands=", ".join(xs), updates=", ".join(us), outs=", ".join(os_),
        init="".join(f"        {c} = {load(x, 'p', o.dtype)}\n"
                     for c, x, o in zip(acc, xs, operands)),
        lhs=", ".join(acc) + ("," if n == 1 and tuple_root else ""),
        args=", ".join(acc + [load(u, "u", v.dtype) for u, v in zip(us, updates)]),
        store="".join(f"        {o}[p] = {c}\n" for o, c in zip(os_, acc)))
    dts = tuple(np.dtype(v.dtype).str for v in list(operands) + list(updates))
    k3 = gen_kernel(("scatter_apply", n, dts, tuple_root), src, "apply", {"fn": fn})
    launch_stride_loop(k3, N, N, T, key, perm, uidx,
                       *[flat(v) for v in list(operands) + list(updates)],
                       *[flat(o) for o in outs], threads=128)
    return tuple(outs) if ins.shape.is_tuple else outs[0]
