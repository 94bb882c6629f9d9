"""CUDA reduce, reduce-window, select-and-scatter and map.

The reducer / selector / scatter / map computation becomes a numba.cuda device function
(scalar_cuda.compile_scalar_device_function: the CPU scalar JIT's source, so the same
semantics, narrow-float rounding and FMA contraction included).  Kernels calling it are
generated per operand count and element-type set, with the function bound as a global.

reduce       one thread per output element folds the reduced elements in row-major order of
             the reduced dimensions from the init value: acc = init; acc = f(acc.., x..) --
             HloEvaluator's order, so any reducer (variadic too) gives XLA's result.  When
             few outputs each reduce many elements (K >= TREE_MIN_K, M <= TREE_MAX_M) a
             block per output element reduces instead: each thread folds a contiguous chunk
             of the row-major reduced index space, then a shared-memory tree combines the
             chunk results left to right, and thread 0 applies the init value once:
             f(init, f(f(c0, c1), f(c2, c3))...).  That regrouping is exact for an
             associative reducer (XLA requires one) but float sums may round differently
             from the CPU kernel's numpy pairwise sums: they agree to a tolerance only.
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
map          one thread per element.

Values of f16 travel as float32 inside the kernels (the device functions' compute type);
results are stored back into the result's element type.
"""
from __future__ import annotations

import weakref

import numpy as np

from ..common.errors import ExecutionError
from ..common.plans import row_strides
from ..common.plans_window import window_plan
from ..registry import kernel as _kernel
from .data_movement import cached_kernel, fill_from_device, size_of, tup
from .launch import (cuda_module, device_empty, flat, jit_source, launch_stride_loop, simulating,
                     stride_loop)

# Tree-reduction thresholds (module globals so tests can force either path).
TREE_MIN_K = 2048
TREE_MAX_M = 1024


def kernel(*opcodes):
    return _kernel(*opcodes, device="cuda")


# ---- device functions ---------------------------------------------------------------------

_FNS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def device_function(ins, comp):
    """The numba.cuda device function of a called scalar computation (cached per
    computation); an ExecutionError when it cannot be compiled for CUDA."""
    fn = _FNS.get(comp)
    if fn is None:
        from .scalar_cuda import ScalarCompileError, compile_scalar_device_function
        try:
            fn = compile_scalar_device_function(comp)
        except ScalarCompileError as e:
            raise ExecutionError(f"{ins.opcode} '{ins.name}': computation '{comp.name}' cannot "
                                 f"run on cuda: {e}") from None
        _FNS[comp] = fn
    return fn


def load(arr: str, idx: str, dtype) -> str:
    """Source reading arr[idx] in its compute type (f16 as float32)."""
    if np.dtype(dtype) == np.float16:
        return f"float32({arr}[{idx}])"
    return f"{arr}[{idx}]"


def returns_tuple(comp) -> bool:
    return comp.root.shape.is_tuple


def gen_kernel(key, src: str, name: str, fns: dict):
    """A cached kernel generated from `src`, with device functions `fns` as globals (the key
    must identify them: they are kept alive by the namespace, so their ids stay unique)."""
    def make():
        from numba import float32, int64
        ns = {"float32": float32, "int64": int64}
        ns.update(fns)
        return jit_source(src, name, ns)
    return cached_kernel(key + tuple(id(f) for f in fns.values()), make)


def _type_key(arrays) -> tuple:
    return tuple(np.dtype(a.dtype).str for a in arrays)


def _shapes(ins):
    return ins.shape.tuple_shapes if ins.shape.is_tuple else (ins.shape,)


def _lhs(names: list[str], tuple_root: bool) -> str:
    """Assignment targets for a device-function result (a 1-tuple root unpacks too)."""
    return ", ".join(names) + ("," if len(names) == 1 and tuple_root else "")


def _fold(acc: list[str], xs: list[str], dts, tuple_root: bool) -> str:
    """`a0, a1 = fn(a0, a1, x0[off], x1[off])`: one fold step over the element at `off`."""
    loads = [load(x, "off", dt) for x, dt in zip(xs, dts)]
    return f"{_lhs(acc, tuple_root)} = fn({', '.join(acc + loads)})"


def _unravel(idx: str, dims: str, strides: str, acc: str, start: str, indent: str) -> list[str]:
    """Source lines setting `acc` to `start` plus the strided offset of flat index `idx`."""
    return [f"{indent}rem = {idx}",
            f"{indent}{acc} = {start}",
            f"{indent}for d in range(len({dims}) - 1, -1, -1):",
            f"{indent}    c = rem % {dims}[d]",
            f"{indent}    rem //= {dims}[d]",
            f"{indent}    {acc} += c * {strides}[d]"]


# ---- reduce -------------------------------------------------------------------------------

def _reduce_serial_src(n, dts, tuple_root):
    xs = [f"x{j}" for j in range(n)]
    ins_ = [f"i{j}" for j in range(n)]
    os_ = [f"o{j}" for j in range(n)]
    acc = [f"a{j}" for j in range(n)]
    lines = [f"def red(M, K, kdims, kst, rdims, rst, {', '.join(xs + ins_ + os_)}):",
             "    " + stride_loop("M", "m")]
    lines += _unravel("m", "kdims", "kst", "base", "0", " " * 8)
    lines += [f"        {a} = {load(i, '0', dt)}" for a, i, dt in zip(acc, ins_, dts)]
    lines += ["        for k in range(K):"]
    lines += _unravel("k", "rdims", "rst", "off", "base", " " * 12)
    lines += ["            " + _fold(acc, xs, dts, tuple_root)]
    lines += [f"        {o}[m] = {a}" for o, a in zip(os_, acc)]
    return "\n".join(lines) + "\n"


def _reduce_tree_src(n, dts, tuple_root, tpb):
    xs = [f"x{j}" for j in range(n)]
    ins_ = [f"i{j}" for j in range(n)]
    os_ = [f"o{j}" for j in range(n)]
    acc = [f"a{j}" for j in range(n)]
    sh = [f"s{j}" for j in range(n)]
    other = [f"b{j}" for j in range(n)]
    lines = [f"def red(M, K, chunk, kdims, kst, rdims, rst, {', '.join(xs + ins_ + os_)}):",
             "    t = cuda.threadIdx.x"]
    lines += [f"    {s} = cuda.shared.array({tpb}, ct{j})" for j, s in enumerate(sh)]
    lines += [f"    has = cuda.shared.array({tpb}, bool_)",
              "    m = cuda.blockIdx.x",
              "    while m < M:"] + _unravel("m", "kdims", "kst", "base", "0", " " * 8)
    lines += [f"        {a} = {load(i, '0', dt)}" for a, i, dt in zip(acc, ins_, dts)]
    lines += ["        mine = False",
              "        lo = t * chunk",
              "        hi = lo + chunk",
              "        if hi > K:",
              "            hi = K",
              "        for k in range(lo, hi):"]
    lines += _unravel("k", "rdims", "rst", "off", "base", " " * 12)
    lines += ["            if mine:",
              "                " + _fold(acc, xs, dts, tuple_root),
              "            else:"]
    lines += [f"                {a} = {load(x, 'off', dt)}" for a, x, dt in zip(acc, xs, dts)]
    lines += ["                mine = True"]
    lines += [f"        {s}[t] = {a}" for s, a in zip(sh, acc)]
    lines += ["        has[t] = mine",
              "        cuda.syncthreads()",
              f"        step = {tpb // 2}",
              "        while step > 0:",
              "            if t < step and has[t + step]:",
              "                if has[t]:"]
    pair = [f"{s}[t]" for s in sh] + [f"{s}[t + step]" for s in sh]
    lines += [f"                    {_lhs(other, tuple_root)} = fn({', '.join(pair)})"]
    lines += [f"                    {s}[t] = {b}" for s, b in zip(sh, other)]
    lines += ["                else:"]
    lines += [f"                    {s}[t] = {s}[t + step]" for s in sh]
    lines += ["                    has[t] = True",
              "            cuda.syncthreads()",
              "            step //= 2",
              "        if t == 0:"]
    lines += [f"            {a} = {load(i, '0', dt)}" for a, i, dt in zip(acc, ins_, dts)]
    firsts = [s + "[0]" for s in sh]
    lines += ["            if has[0]:",
              f"                {_lhs(acc, tuple_root)} = fn({', '.join(acc + firsts)})"]
    lines += [f"            {o}[m] = {a}" for o, a in zip(os_, acc)]
    lines += ["        cuda.syncthreads()",
              "        m += cuda.gridDim.x"]
    return "\n".join(lines) + "\n"


def _compute_dtype(dt) -> np.dtype:
    dt = np.dtype(dt)
    return np.dtype(np.float32) if dt == np.float16 else dt


@kernel("reduce")
def _reduce(ins, args, ctx):
    n = len(args) // 2
    xs, inits = args[:n], args[n:]
    dims = tuple(sorted(int(d) for d in ins.attrs.get("dimensions", ())))
    comp = ins.attrs["to_apply"]
    shapes = _shapes(ins)
    outs = [device_empty(s) for s in shapes]
    xshape = tuple(xs[0].shape)
    kept = [d for d in range(len(xshape)) if d not in dims]
    M = size_of([xshape[d] for d in kept])
    K = size_of([xshape[d] for d in dims])
    if M == 0:
        return tuple(outs) if ins.shape.is_tuple else outs[0]
    fn = device_function(ins, comp)
    st = row_strides(xshape)
    dts = _type_key(xs)
    tuple_root = returns_tuple(comp)
    geometry = (tup([xshape[d] for d in kept], 1), tup([st[d] for d in kept], 0),
                tup([xshape[d] for d in dims], 1), tup([st[d] for d in dims], 0))
    operands = [flat(a) for a in list(xs) + list(inits) + outs]
    if K >= TREE_MIN_K and M <= TREE_MAX_M:
        tpb = 32 if simulating() else 256
        cts = [_compute_dtype(a.dtype) for a in xs]
        src = _reduce_tree_src(n, [a.dtype for a in xs], tuple_root, tpb)

        def make():
            from numba import bool_, float32, from_dtype, int64
            ns = {"float32": float32, "int64": int64, "bool_": bool_, "fn": fn}
            for j, ct in enumerate(cts):
                ns[f"ct{j}"] = from_dtype(ct)
            return jit_source(src, "red", ns)
        k = cached_kernel(("reduce_tree", n, dts, tuple_root, tpb, id(fn)), make)
        chunk = -(-K // tpb)
        blocks = min(M, 65535)
        k[blocks, tpb](M, K, chunk, *geometry, *operands)
    else:
        src = _reduce_serial_src(n, [a.dtype for a in xs], tuple_root)
        k = gen_kernel(("reduce", n, dts, tuple_root), src, "red", {"fn": fn})
        launch_stride_loop(k, M, M, K, *geometry, *operands, threads=128)
    return tuple(outs) if ins.shape.is_tuple else outs[0]


# ---- reduce-window ------------------------------------------------------------------------

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
              "            ro = o",
              "            rw_ = w",
              "            off = 0",
              "            ok = True",
              "            for d in range(len(odims) - 1, -1, -1):",
              "                oc = ro % odims[d]",
              "                ro //= odims[d]",
              "                wc = rw_ % wdims[d]",
              "                rw_ //= wdims[d]",
              "                pos = oc * wst[d] + wc * rdil[d] - plo[d]",
              "                if pos < 0 or pos % ldil[d] != 0:",
              "                    ok = False",
              "                    break",
              "                q = pos // ldil[d]",
              "                if q >= xdims[d]:",
              "                    ok = False",
              "                    break",
              "                off += q * xst[d]",
              "            if ok:",
              "                " + _fold(acc, xs, dts, tuple_root)]
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
    shapes = _shapes(ins)
    outs = [device_empty(s) for s in shapes]
    out_dims = shapes[0].dims
    N = size_of(out_dims)
    plan = window_plan(ins, xs[0].shape, out_dims)
    if N:
        fn = device_function(ins, comp)
        tuple_root = returns_tuple(comp)
        src = _window_src(n, [a.dtype for a in xs], tuple_root)
        k = gen_kernel(("reduce_window", n, _type_key(xs), tuple_root), src, "rw", {"fn": fn})
        launch_stride_loop(k, N, N, plan.window_elements, tup(out_dims, 1), *window_geometry(plan),
                           *[flat(a) for a in list(xs) + list(inits) + outs], threads=128)
    return tuple(outs) if ins.shape.is_tuple else outs[0]


# ---- select-and-scatter -------------------------------------------------------------------

_SELECT_SRC = """
def pick(S, NW, sdims, wdims, wst, plo, ldil, rdil, xdims, xst, x, sel):
    for s in range(cuda.grid(1), S, cuda.gridsize(1)):
        picked = -1
        best = {load_x0}
        for w in range(NW):
            ro = s
            rw_ = w
            off = 0
            ok = True
            for d in range(len(sdims) - 1, -1, -1):
                oc = ro % sdims[d]
                ro //= sdims[d]
                wc = rw_ % wdims[d]
                rw_ //= wdims[d]
                pos = oc * wst[d] + wc * rdil[d] - plo[d]
                if pos < 0 or pos % ldil[d] != 0:
                    ok = False
                    break
                q = pos // ldil[d]
                if q >= xdims[d]:
                    ok = False
                    break
                off += q * xst[d]
            if ok:
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
            P = pd * ldil[d] + plo[d]
            o_lo = -((-(P - (wdims[d] - 1) * rdil[d])) // wst[d])
            o_hi = P // wst[d]
            if o_lo < 0:
                o_lo = 0
            if o_hi > sdims[d] - 1:
                o_hi = sdims[d] - 1
            cnt = o_hi - o_lo + 1
            if cnt < 0:
                cnt = 0
            total *= cnt
        for t in range(total):
            rt = t
            rp = p
            s = 0
            for d in range(len(xdims) - 1, -1, -1):
                pd = rp % xdims[d]
                rp //= xdims[d]
                P = pd * ldil[d] + plo[d]
                o_lo = -((-(P - (wdims[d] - 1) * rdil[d])) // wst[d])
                o_hi = P // wst[d]
                if o_lo < 0:
                    o_lo = 0
                if o_hi > sdims[d] - 1:
                    o_hi = sdims[d] - 1
                cnt = o_hi - o_lo + 1
                c = rt % cnt
                rt //= cnt
                s += (o_lo + c) * sst[d]
            if sel[s] == p:
                acc = scatter({load_src}, acc)
        out[p] = acc
"""


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
    k1 = gen_kernel(("sas_pick", np.dtype(xdt).str), src1, "pick", {"select": sel_fn})
    launch_stride_loop(k1, S, S, plan.window_elements, tup(sshape, 1), *geo, flat(operand), sel,
                       threads=128)
    src2 = _SCATTER_SRC.format(load_init=load("init", "0", idt), load_src=load("src", "s", sdt))
    k2 = gen_kernel(("sas_apply", np.dtype(sdt).str, np.dtype(idt).str), src2, "apply",
                    {"scatter": sca_fn})
    wdims, wst, plo, ldil, rdil, xdims, _ = geo
    launch_stride_loop(k2, N, N, tup(sshape, 1), tup(row_strides(sshape), 0), wdims, wst, plo, ldil,
                       rdil, xdims, sel, flat(source), flat(init), flat(out), threads=128)
    return out


# ---- map ----------------------------------------------------------------------------------

@kernel("map")
def _map(ins, args, ctx):
    comp = ins.attrs["to_apply"]
    out = device_empty(ins.shape)
    N = ins.shape.num_elements()
    if N == 0:
        return out
    fn = device_function(ins, comp)
    n = len(args)
    xs = [f"x{j}" for j in range(n)]
    loads = ", ".join(load(x, "i", a.dtype) for x, a in zip(xs, args))
    src = "\n".join([f"def mp(N, out{''.join(', ' + x for x in xs)}):",
                     "    " + stride_loop("N"),
                     f"        out[i] = fn({loads})"]) + "\n"
    k = gen_kernel(("map", n, _type_key(args)), src, "mp", {"fn": fn})
    launch_stride_loop(k, N, N, flat(out), *[flat(a) for a in args])
    return out
