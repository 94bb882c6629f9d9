"""CUDA reduce-window and select-and-scatter, on reductions.py's device functions and
generated kernels (the HLO computation as a numba.cuda device function).

reduce-window one thread per output element walks its window (the geometry is
             common/plans_window's plan, as on the CPU; positions are computed in the kernel,
             not read from the CPU's reach table, which grows as outputs x window -- a
             cumsum's reduce-window would need N^2 entries): positions on padding or in a
             base-dilation hole are skipped, the fold runs in row-major window order from
             the init value.
select-and-scatter  phase 1: one thread per source element picks its window's element
             (first in-bounds, then replaced unless select(picked, e)); phase 2: one thread
             per operand element starts from the init value and applies
             scatter(source, acc) for every source element whose window can reach it and
             that picked it, in row-major source order -- deterministic, XLA's order, no
             atomics.
"""
from __future__ import annotations

import numpy as np

from ..common.plans import row_strides
from ..common.plans_window import window_plan
from .data_movement import fill_from_device, size_of, tup
from .launch import cached_kernel, cuda_module, device_empty, flat, launch_stride_loop, stride_loop
from .reductions import (device_function, fold_source, gen_kernel, kernel, load, operand_shapes,
                         returns_tuple, type_key)


def _window_src(n, dts, tuple_root):
    xs = [f"x{j}" for j in range(n)]
    ins_ = [f"i{j}" for j in range(n)]
    os_ = [f"o{j}" for j in range(n)]
    acc = [f"a{j}" for j in range(n)]
    lines = [f"def rw(N, NW, odims, wdims, wst, plo, ldil, rdil, xdims, xst, "
             f"{', '.join(xs + ins_ + os_)}):",
             "    " + stride_loop("N", "o")]
    lines += [f"        {a} = {load(i, '0', dt)}" for a, i, dt in zip(acc, ins_, dts)]
    lines += ["        for w in range(NW):",
              "            off = window_at(o, w, odims, wdims, wst, plo, ldil, rdil, xdims, xst)",
              "            if off >= 0:",
              "                " + fold_source(acc, xs, dts, tuple_root)]
    lines += [f"        {o_}[o] = {a}" for o_, a in zip(os_, acc)]
    return "\n".join(lines) + "\n"


def window_geometry(plan):
    """(wdims, wst, plo, ldil, rdil, xdims, xst): the window plan (common/plans_window) as a
    window kernel's arguments."""
    return (tup(plan.sizes, 1), tup(plan.strides, 1), tup(plan.pad_lo, 0),
            tup(plan.lhs_dilate, 1), tup(plan.rhs_dilate, 1), tup(plan.operand_dims, 1),
            tup(plan.operand_strides, 0))


@kernel("reduce-window")
def _reduce_window(ins, args, ctx):
    n = len(args) // 2
    xs, inits = args[:n], args[n:]
    comp = ins.attrs["to_apply"]
    shapes = operand_shapes(ins)
    outs = [device_empty(s) for s in shapes]
    out_dims = shapes[0].dims
    N = size_of(out_dims)
    plan = window_plan(ins, xs[0].shape, out_dims)
    if N:
        fn = device_function(ins, comp)
        tuple_root = returns_tuple(comp)
        src = _window_src(n, [a.dtype for a in xs], tuple_root)
        launch_window(("reduce_window", n, type_key(xs), tuple_root), src, "rw", {"fn": fn}, N,
                      plan.window_elements, tup(out_dims, 1), *window_geometry(plan),
                      *[flat(a) for a in list(xs) + list(inits) + outs])
    return tuple(outs) if ins.shape.is_tuple else outs[0]


# ---- select-and-scatter -------------------------------------------------------------------

_SELECT_SRC = """
def pick(S, NW, sdims, wdims, wst, plo, ldil, rdil, xdims, xst, x, sel):
    for s in range(cuda.grid(1), S, cuda.gridsize(1)):
        picked = -1
        best = {load_x0}
        for w in range(NW):
            off = window_at(s, w, sdims, wdims, wst, plo, ldil, rdil, xdims, xst)
            if off >= 0:
                v = {load_x}
                if picked < 0:
                    picked = off
                    best = v
                elif not select(best, v):
                    picked = off
                    best = v
        sel[s] = picked
"""

_SCATTER_SRC = """
def apply(N, sdims, sst, wdims, wst, plo, ldil, rdil, xdims, sel, src, init, out):
    for p in range(cuda.grid(1), N, cuda.gridsize(1)):
        acc = {load_init}
        total = 1
        rp = p
        for d in range(len(xdims) - 1, -1, -1):
            pd = rp % xdims[d]
            rp //= xdims[d]
            o_lo, cnt = reach(pd * ldil[d] + plo[d], wdims[d], rdil[d], wst[d], sdims[d])
            total *= cnt
        for t in range(total):
            rt = t
            rp = p
            s = 0
            for d in range(len(xdims) - 1, -1, -1):
                pd = rp % xdims[d]
                rp //= xdims[d]
                o_lo, cnt = reach(pd * ldil[d] + plo[d], wdims[d], rdil[d], wst[d], sdims[d])
                c = rt % cnt
                rt //= cnt
                s += (o_lo + c) * sst[d]
            if sel[s] == p:
                acc = scatter({load_src}, acc)
        out[p] = acc
"""


def _device_helpers() -> dict:
    """The device functions the window kernels' sources call, by name (compiled once):

    window_at(o, w, odims, wdims, wst, plo, ldil, rdil, xdims, xst) -> the flat offset in x
        of tap w of output (or source) element o's window, or -1 where the tap lies on
        padding or in a base-dilation hole (reduce-window's fold and select's pick);
    reach(P, w, rd, st, sd) -> (first, count): the source positions along one dimension
        whose window (w taps, rhs dilation rd, stride st; sd source positions) covers
        padded position P, count 0 when none does (both of scatter's walks: counting the
        source elements an operand element meets, then visiting them)."""
    return cached_kernel("window_helpers", _compile_helpers)


def _compile_helpers() -> dict:
    from numba import cuda

    @cuda.jit(device=True)
    def window_at(o, w, odims, wdims, wst, plo, ldil, rdil, xdims, xst):
        off = 0
        for d in range(len(odims) - 1, -1, -1):
            oc = o % odims[d]
            o //= odims[d]
            wc = w % wdims[d]
            w //= wdims[d]
            pos = oc * wst[d] + wc * rdil[d] - plo[d]
            if pos < 0 or pos % ldil[d] != 0:
                return -1
            q = pos // ldil[d]
            if q >= xdims[d]:
                return -1
            off += q * xst[d]
        return off

    @cuda.jit(device=True)
    def reach(P, w, rd, st, sd):
        o_lo = -((-(P - (w - 1) * rd)) // st)
        o_hi = P // st
        if o_lo < 0:
            o_lo = 0
        if o_hi > sd - 1:
            o_hi = sd - 1
        cnt = o_hi - o_lo + 1
        if cnt < 0:
            cnt = 0
        return o_lo, cnt
    return {"window_at": window_at, "reach": reach}


def window_kernel(key, src: str, name: str, fns: dict):
    """gen_kernel with the window helpers (_device_helpers) beside the HLO's functions."""
    return gen_kernel(key, src, name, {**fns, **_device_helpers()})


def launch_window(key, src: str, name: str, fns: dict, n: int, *args) -> None:
    """Launches window_kernel(key, src, name, fns) as a stride loop over n elements, 128
    threads a block; n is also the kernel's first argument (rw's N, pick's S, apply's N),
    `args` the rest."""
    launch_stride_loop(window_kernel(key, src, name, fns), n, n, *args, threads=128)


@kernel("select-and-scatter")
def _select_and_scatter(ins, args, ctx):
    operand, source, init = args
    out = device_empty(ins.shape)
    N = size_of(operand.shape)
    S = size_of(source.shape)
    xshape, sshape = tuple(operand.shape), tuple(source.shape)
    plan = window_plan(ins, xshape, sshape)
    if N == 0:
        return out
    if S == 0:  # nothing scatters: every element keeps the init value
        return fill_from_device(out, init)
    sel_fn = device_function(ins, ins.attrs["select"])
    sca_fn = device_function(ins, ins.attrs["scatter"])
    geo = window_geometry(plan)  # wdims, wst, plo, ldil, rdil, xdims, xst
    sel = cuda_module().device_array(S, np.int64)
    xdt, sdt, idt = operand.dtype, source.dtype, init.dtype
    src1 = _SELECT_SRC.format(load_x0=load("x", "0", xdt), load_x=load("x", "off", xdt))
    launch_window(("sas_pick", np.dtype(xdt).str), src1, "pick", {"select": sel_fn}, S,
                  plan.window_elements, tup(sshape, 1), *geo, flat(operand), sel)
    src2 = _SCATTER_SRC.format(load_init=load("init", "0", idt), load_src=load("src", "s", sdt))
    # apply takes the geometry but xst: it visits the operand's elements by their own index
    launch_window(("sas_apply", np.dtype(sdt).str, np.dtype(idt).str), src2, "apply",
                  {"scatter": sca_fn}, N, tup(sshape, 1), tup(row_strides(sshape), 0),
                  *geo[:-1], sel, flat(source), flat(init), flat(out))
    return out
