"""CUDA reduce and map (reduce-window and select-and-scatter: cuda/windows.py).

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
map          one thread per element.

Values of f16 travel as float32 inside the kernels (the device functions' compute type);
results are stored back into the result's element type.
"""
from __future__ import annotations

import weakref

import numpy as np

from ..common.errors import ExecutionError
from ..common.plans import row_strides
from ..registry import kernel as _kernel
from .data_movement import size_of, tup
from .launch import (cached_kernel, device_empty, flat, jit_source, launch_stride_loop,
                     simulating, stride_loop)

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


def type_key(arrays) -> tuple:
    return tuple(np.dtype(a.dtype).str for a in arrays)


def operand_shapes(ins):
    return ins.shape.tuple_shapes if ins.shape.is_tuple else (ins.shape,)


def _lhs(names: list[str], tuple_root: bool) -> str:
    """Assignment targets for a device-function result (a 1-tuple root unpacks too)."""
    return ", ".join(names) + ("," if len(names) == 1 and tuple_root else "")


def fold_source(acc: list[str], xs: list[str], dts, tuple_root: bool) -> str:
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
    lines += ["            " + fold_source(acc, xs, dts, tuple_root)]
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
              "                " + fold_source(acc, xs, dts, tuple_root),
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
    shapes = operand_shapes(ins)
    outs = [device_empty(s) for s in shapes]
    xshape = tuple(xs[0].shape)
    kept = [d for d in range(len(xshape)) if d not in dims]
    M = size_of([xshape[d] for d in kept])
    K = size_of([xshape[d] for d in dims])
    if M == 0:
        return tuple(outs) if ins.shape.is_tuple else outs[0]
    fn = device_function(ins, comp)
    st = row_strides(xshape)
    dts = type_key(xs)
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
    k = gen_kernel(("map", n, type_key(args)), src, "mp", {"fn": fn})
    launch_stride_loop(k, N, N, flat(out), *[flat(a) for a in args])
    return out
