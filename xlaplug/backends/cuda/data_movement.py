"""CUDA data-movement kernels: broadcast, reshape, transpose, reverse, slice, dynamic-slice,
dynamic-update-slice, pad, concatenate, iota, copy, bitcast, get/set-dimension-size,
copy-start/copy-done.

Every kernel is one of a few numba.cuda index-mapping kernels, one thread per element:

  strided   out[i] = x[base + sum_d c_d * stride_d] (c = row-major coordinates of i in the
            result): broadcast (stride 0), reshape/copy (contiguous), transpose (permuted
            strides), reverse (negative strides), slice (scaled strides, offset base);
  put       out[base + sum_d c_d * stride_d] = x[i] (c = coordinates of i in the operand):
            concatenate, one launch per operand;
  pad       out[i] = x[...] or the pad value (edge padding may be negative: it crops;
            interior padding first, as in XLA);
  dynamic   dynamic-slice / dynamic-update-slice: start indices are device scalars (or
            one rank-1 vector, the old form) read by every thread inside the kernel and
            clamped into [0, operand_dim - slice_dim] (unsigned indices never go below 0).
            These kernels are generated per (rank, number of start operands).

Dimension metadata (dims, strides) travels as kernel arguments (int64 tuples, passed by
value): nothing is copied to the device besides the data.  Semantics are those of the CPU
kernels (cpu/data_movement.py); bitcast honours both layouts (physical element order).
Kernel sources avoid the builtins min()/max() on scalars: numba 0.68's CUDA target cannot
compile their varargs overload ("Signature mismatch"), which the simulator does not show.
Helpers here (`tup`, `start_code`, `copy_contiguous`; `row_strides` from common/plans) are shared by the
other CUDA modules of the same author (reductions, sorting, gather_scatter).
"""
from __future__ import annotations

import threading

import numpy as np

from ..common.errors import ExecutionError
from ..common.plans import physical_order, row_strides
from ..registry import kernel as _kernel
from .launch import (NARROW_TYPES, cuda_module, device_dtype, device_empty, device_zeros, flat,
                     jit_source, launch_stride_loop)


def kernel(*opcodes):
    return _kernel(*opcodes, device="cuda")


# ---- shared helpers -----------------------------------------------------------------------

def tup(values, pad: int = 0) -> tuple[int, ...]:
    """A tuple of Python ints for a kernel argument (numba types it as UniTuple(int64));
    rank 0 becomes (pad,) so the tuple is never empty."""
    t = tuple(int(v) for v in values)
    return t if t else (int(pad),)


def size_of(dims) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


def int_list(v) -> tuple[int, ...]:
    if v is None:
        return ()
    if isinstance(v, (int, np.integer)):
        return (int(v),)
    return tuple(int(d) for d in v)


_KERNELS: dict = {}
_LOCK = threading.RLock()


def cached_kernel(key, make):
    """A kernel compiled once per process per key (`make()` builds it)."""
    with _LOCK:
        k = _KERNELS.get(key)
        if k is None:
            k = _KERNELS[key] = make()
        return k


def src_kernel(key, src: str, name: str, namespace: dict | None = None):
    return cached_kernel(key, lambda: jit_source(src, name, namespace))


def start_code(rank: int, n_ops: int, indent: str = "        ", hi: str = "hi",
               prefix: str = "s") -> str:
    """Source computing clamped starts st0..st{rank-1} (int64) from the start operands
    `{prefix}0..` (flat device arrays: `rank` scalars, or one vector of `rank` entries), each
    clamped into [0, hi[d]].  Comparisons are written so unsigned indices (which can exceed
    int64) clamp to hi, as XLA's unsigned clamp does."""
    lines = []
    for d in range(rank):
        ref = f"{prefix}{d}[0]" if n_ops == rank else f"{prefix}0[{d}]"
        lines += [f"r{d} = {ref}",
                  f"if r{d} < 0:",
                  f"    st{d} = int64(0)",
                  f"elif r{d} > {hi}[{d}]:",
                  f"    st{d} = int64({hi}[{d}])",
                  "else:",
                  f"    st{d} = int64(r{d})"]
    if rank:
        lines.append("st = (" + "".join(f"st{d}, " for d in range(rank)) + ")")
    else:
        lines.append("st = (int64(0),)")
    return "".join(indent + ln + "\n" for ln in lines)


def int64_namespace() -> dict:
    from numba import int64
    return {"int64": int64}


# ---- generic kernels ----------------------------------------------------------------------

# Thread i walks the row-major coordinates of `dims` to an offset base + c . strides; the
# gather form reads there, the scatter form writes there.
_OFFSET_KERNEL = """
def {name}(out, x, n, dims, strides, base):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        rem = i
        off = base
        for d in range(len(dims) - 1, -1, -1):
            c = rem % dims[d]
            rem //= dims[d]
            off += c * strides[d]
        {move}
"""
_STRIDED = _OFFSET_KERNEL.format(name="strided", move="out[i] = x[off]")
_PUT = _OFFSET_KERNEL.format(name="put", move="out[off] = x[i]")

_COPY = """
def copy(out, x, n):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        out[i] = x[i]
"""

_FILL = """
def fill(out, n, v):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        out[i] = v
"""

_FILL_FROM = """
def fill_from(out, n, v):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        out[i] = v[0]
"""


def launch_strided(out, x, odims, sstrides, base=0):
    """out (contiguous, dims `odims`)[c] = x_flat[base + c . sstrides]."""
    n = size_of(odims)
    if n == 0:
        return out
    k = src_kernel("strided", _STRIDED, "strided")
    launch_stride_loop(k, n, flat(out), flat(x), n, tup(odims, 1), tup(sstrides, 0), int(base))
    return out


def launch_put(out, x, idims, dst_strides, base=0):
    n = size_of(idims)
    if n == 0:
        return out
    k = src_kernel("put", _PUT, "put")
    launch_stride_loop(k, n, flat(out), flat(x), n, tup(idims, 1), tup(dst_strides, 0), int(base))
    return out


def copy_contiguous(out, x):
    """Element copy of a contiguous device array into `out` (same number of elements)."""
    n = size_of(out.shape)
    if n:
        launch_stride_loop(src_kernel("copy", _COPY, "copy"), n, flat(out), flat(x), n)
    return out


def fill_value(out, value):
    """Every element of `out` = a host constant (an int/float/bool known before launch)."""
    n = size_of(out.shape)
    if n:
        launch_stride_loop(src_kernel("fill", _FILL, "fill"), n, flat(out), n, value)
    return out


def fill_from_device(out, scalar):
    """Every element of `out` = the one element of the device array `scalar`."""
    n = size_of(out.shape)
    if n:
        launch_stride_loop(src_kernel("fill_from", _FILL_FROM, "fill_from"), n, flat(out), n,
                           flat(scalar))
    return out


def fresh_copy(ins_shape, x):
    out = device_empty(ins_shape)
    return copy_contiguous(out, x)


# ---- kernels ------------------------------------------------------------------------------

@kernel("broadcast")
def _broadcast(ins, args, ctx):
    x = args[0]
    dims = int_list(ins.attrs.get("dimensions"))
    if len(dims) != len(x.shape):
        raise ExecutionError(f"broadcast '{ins.name}': dimensions={list(dims)} does not match "
                             f"an operand of rank {len(x.shape)}")
    xs = row_strides(x.shape)
    sst = [0] * ins.shape.rank
    for i, d in enumerate(dims):
        if x.shape[i] != 1:
            sst[d] = xs[i]
    return launch_strided(device_empty(ins.shape), x, ins.shape.dims, sst)


@kernel("reshape", "set-dimension-size")
def _reshape(ins, args, ctx):
    x = args[0]
    if size_of(x.shape) != ins.shape.num_elements():
        raise ExecutionError(f"{ins.opcode} '{ins.name}': operand {list(x.shape)} cannot "
                             f"become {ins.shape}")
    return fresh_copy(ins.shape, x)


@kernel("transpose")
def _transpose(ins, args, ctx):
    x = args[0]
    perm = int_list(ins.attrs.get("dimensions"))
    xs = row_strides(x.shape)
    return launch_strided(device_empty(ins.shape), x, ins.shape.dims, [xs[p] for p in perm])


@kernel("reverse")
def _reverse(ins, args, ctx):
    x = args[0]
    rev = set(int_list(ins.attrs.get("dimensions")))
    xs = row_strides(x.shape)
    sst, base = [], 0
    for d, n in enumerate(x.shape):
        if d in rev:
            sst.append(-xs[d])
            base += (n - 1) * xs[d] if n else 0
        else:
            sst.append(xs[d])
    return launch_strided(device_empty(ins.shape), x, ins.shape.dims, sst, base)


@kernel("slice")
def _slice(ins, args, ctx):
    x = args[0]
    ranges = ins.attrs["slice"].dims
    xs = row_strides(x.shape)
    sst = [xs[d] * r.stride for d, r in enumerate(ranges)]
    base = sum(xs[d] * r.start for d, r in enumerate(ranges))
    return launch_strided(device_empty(ins.shape), x, ins.shape.dims, sst, base)


# As _OFFSET_KERNEL, with clamped start indices added to each coordinate: dynamic-slice
# gathers from there, dynamic-update-slice scatters the update there.
_DYN_OFFSET_KERNEL = """
def {name}(out, x, n, dims, strides, hi, {{starts}}):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
{{start_code}}        rem = i
        off = 0
        for d in range(len(dims) - 1, -1, -1):
            c = rem % dims[d]
            rem //= dims[d]
            off += (c + st[d]) * strides[d]
        {move}
"""
_DYN_SLICE = _DYN_OFFSET_KERNEL.format(name="dyn_slice", move="out[i] = x[off]")
_DYN_UPDATE = _DYN_OFFSET_KERNEL.format(name="dyn_update", move="out[off] = x[i]")


def _dynamic_kernel(template, name, rank, n_ops):
    starts = ", ".join(f"s{j}" for j in range(n_ops)) or "s_unused"
    src = template.format(starts=starts, start_code=start_code(rank, n_ops))
    return src_kernel((name, rank, n_ops), src, name, int64_namespace())


def _start_operands(ins, starts, rank):
    n = sum(size_of(s.shape) for s in starts)
    if n != rank:
        raise ExecutionError(f"{ins.opcode} '{ins.name}': {n} start indices for an operand of "
                             f"rank {rank}")
    if len(starts) not in (rank, 1) and rank:
        raise ExecutionError(f"{ins.opcode} '{ins.name}': start indices must be {rank} scalars "
                             "or one vector")
    return [flat(s) for s in starts]


@kernel("dynamic-slice")
def _dynamic_slice(ins, args, ctx):
    x = args[0]
    rank = len(x.shape)
    sizes = int_list(ins.attrs.get("dynamic_slice_sizes")) or tuple(ins.shape.dims)
    if len(sizes) != rank:
        raise ExecutionError(f"dynamic-slice '{ins.name}': {len(sizes)} sizes for an operand "
                             f"of rank {rank}")
    starts = _start_operands(ins, args[1:], rank)
    out = device_empty(ins.shape)
    n = ins.shape.num_elements()
    if n == 0:
        return out
    if rank == 0:
        return copy_contiguous(out, x)
    hi = [max(d - z, 0) for d, z in zip(x.shape, sizes)]
    k = _dynamic_kernel(_DYN_SLICE, "dyn_slice", rank, len(starts))
    launch_stride_loop(k, n, flat(out), flat(x), n, tup(ins.shape.dims, 1),
                       tup(row_strides(x.shape)), tup(hi), *starts)
    return out


@kernel("dynamic-update-slice")
def _dynamic_update_slice(ins, args, ctx):
    x, upd = args[0], args[1]
    rank = len(x.shape)
    if len(upd.shape) != rank:
        raise ExecutionError(f"dynamic-update-slice '{ins.name}': update of rank "
                             f"{len(upd.shape)} for an operand of rank {rank}")
    starts = _start_operands(ins, args[2:], rank)
    out = fresh_copy(ins.shape, x)
    n = size_of(upd.shape)
    if n == 0 or size_of(x.shape) == 0:
        return out
    if rank == 0:
        return copy_contiguous(out, upd)
    hi = [max(d - z, 0) for d, z in zip(x.shape, upd.shape)]
    k = _dynamic_kernel(_DYN_UPDATE, "dyn_update", rank, len(starts))
    launch_stride_loop(k, n, flat(out), flat(upd), n, tup(upd.shape), tup(row_strides(x.shape)),
                       tup(hi), *starts)
    return out


_PAD = """
def pad(out, x, pv, n, odims, lo, step, xdims, xst):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        rem = i
        src = 0
        inside = True
        for d in range(len(odims) - 1, -1, -1):
            c = rem % odims[d]
            rem //= odims[d]
            p = c - lo[d]
            if p < 0 or p % step[d] != 0:
                inside = False
            else:
                q = p // step[d]
                if q >= xdims[d]:
                    inside = False
                else:
                    src += q * xst[d]
        if inside:
            out[i] = x[src]
        else:
            out[i] = pv[0]
"""


@kernel("pad")
def _pad(ins, args, ctx):
    x, pv = args[0], args[1]
    pads = [(p.lo, p.hi, p.interior) for p in ins.attrs["padding"].dims]
    if len(pads) != len(x.shape):
        raise ExecutionError(f"pad '{ins.name}': padding has {len(pads)} dimensions for an "
                             f"operand of rank {len(x.shape)}")
    out = device_empty(ins.shape)
    n = ins.shape.num_elements()
    if n == 0:
        return out
    if size_of(x.shape) == 0:
        return fill_from_device(out, pv)
    k = src_kernel("pad", _PAD, "pad")
    launch_stride_loop(k, n, flat(out), flat(x), flat(pv), n, tup(ins.shape.dims, 1),
                       tup([p[0] for p in pads], 0), tup([p[2] + 1 for p in pads], 1),
                       tup(x.shape, 1), tup(row_strides(x.shape), 0))
    return out


@kernel("concatenate")
def _concatenate(ins, args, ctx):
    dims = int_list(ins.attrs.get("dimensions"))
    axis = dims[0] if dims else 0
    out = device_empty(ins.shape)
    ost = row_strides(ins.shape.dims)
    off = 0
    for a in args:
        launch_put(out, a, a.shape, ost, off * ost[axis])
        off += a.shape[axis]
    if off != ins.shape.dims[axis]:
        raise ExecutionError(f"concatenate '{ins.name}': operands add up to {off} along "
                             f"dimension {axis}, the result has {ins.shape.dims[axis]}")
    return out


_IOTA = """
def iota(out, n, stride, size):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        out[i] = (i // stride) % size
"""

_IOTA_PRED = """
def iota(out, n, stride, size):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        out[i] = (i // stride) % size != 0
"""

_IOTA_F16 = """
def iota(out, n, stride, size):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        out[i] = float32((i // stride) % size)
"""


@kernel("iota")
def _iota(ins, args, ctx):
    dims = ins.shape.dims
    out = device_empty(ins.shape)
    n = ins.shape.num_elements()
    if n == 0:
        return out
    d = int(ins.attrs.get("iota_dimension", 0))
    size = dims[d] if dims else 1
    stride = row_strides(dims)[d] if dims else 1
    et = ins.shape.element_type
    if et == "pred":
        k = src_kernel("iota_pred", _IOTA_PRED, "iota")
    elif et == "f16":
        from numba import float32
        k = src_kernel("iota_f16", _IOTA_F16, "iota", {"float32": float32})
    elif et in ("s8", "s16", "s32", "u8", "u16", "u32") and size > np.iinfo(out.dtype).max:
        # static_cast<T>(index) wraps; the simulator's numpy stores would refuse the
        # out-of-range Python int, so go through s64 and a wrapping narrowing copy.
        wide = cuda_module().device_array(out.shape, np.int64)
        launch_stride_loop(src_kernel("iota", _IOTA, "iota"), n, flat(wide), n, stride, size)
        return _wrap_copy(out, wide)
    else:
        k = src_kernel("iota", _IOTA, "iota")
    launch_stride_loop(k, n, flat(out), n, stride, size)
    return out


_WRAP = """
def wrap(out, x, n, bits, signed):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        v = x[i] & ((1 << bits) - 1)
        if signed and v >= (1 << (bits - 1)):
            v -= 1 << bits
        out[i] = v
"""


def _wrap_copy(out, wide):
    dt = np.dtype(out.dtype)
    n = size_of(out.shape)
    launch_stride_loop(src_kernel("wrap", _WRAP, "wrap"), n, flat(out), flat(wide), n,
                       dt.itemsize * 8, dt.kind == "i")
    return out


def deep_copy(v):
    if isinstance(v, tuple):
        return tuple(deep_copy(a) for a in v)
    out = cuda_module().device_array(v.shape, v.dtype)
    return copy_contiguous(out, v)


@kernel("copy")
def _copy(ins, args, ctx):
    if isinstance(args[0], tuple):
        return deep_copy(args[0])
    return fresh_copy(ins.shape, args[0])


@kernel("copy-start")
def _copy_start(ins, args, ctx):
    # Shape (destination, source, u32[] context): the destination already holds the copy.
    x = args[0]
    ctx_vals = [device_zeros(s) for s in ins.shape.tuple_shapes[2:]]
    return (deep_copy(x), x, *ctx_vals)


@kernel("copy-done")
def _copy_done(ins, args, ctx):
    return args[0][0]


@kernel("bitcast")
def _bitcast(ins, args, ctx):
    x = args[0]
    src_shape = ins.operands[0].shape if ins.operands else None
    dt = device_dtype(ins.shape.element_type)
    if (src_shape is not None and src_shape.is_array and src_shape.element_type !=
            ins.shape.element_type and NARROW_TYPES & {src_shape.element_type,
                                                      ins.shape.element_type}):
        raise ExecutionError(f"bitcast '{ins.name}': {src_shape.element_type} -> "
                             f"{ins.shape.element_type} is not supported on cuda (narrow "
                             "types are held as values; use bitcast-convert)")
    n_in = size_of(x.shape)
    # 1. the operand's elements in its physical order (a flat contiguous buffer)
    src_order = (physical_order(src_shape) if src_shape is not None and src_shape.is_array
                 and len(src_shape.dims) == len(x.shape) else tuple(range(len(x.shape))))
    if src_order == tuple(range(len(x.shape))):
        phys = x
    else:
        xs = row_strides(x.shape)
        phys = cuda_module().device_array(n_in, x.dtype)
        launch_strided(phys, x, [x.shape[d] for d in src_order], [xs[d] for d in src_order])
    phys = flat(phys) if n_in else cuda_module().device_array(0, x.dtype)
    # 2. reinterpret the bytes
    if np.dtype(x.dtype) != dt:
        if np.dtype(x.dtype).itemsize * n_in != dt.itemsize * ins.shape.num_elements():
            raise ExecutionError(f"bitcast '{ins.name}': {x.dtype}{list(x.shape)} and "
                                 f"{ins.shape} differ in byte size")
        if n_in:
            phys = phys.view(dt)
    if (size_of(phys.shape) if n_in else 0) != ins.shape.num_elements():
        raise ExecutionError(f"bitcast '{ins.name}': {n_in} elements cannot become "
                             f"{ins.shape}")
    # 3. the result's logical order from its physical order
    out = device_empty(ins.shape)
    if ins.shape.num_elements() == 0:
        return out
    order = physical_order(ins.shape)
    pdims = [ins.shape.dims[d] for d in order]
    pst = row_strides(pdims)
    sst = [0] * len(order)
    for pos, d in enumerate(order):
        sst[d] = pst[pos]
    return launch_strided(out, phys, ins.shape.dims, sst)


@kernel("get-dimension-size")
def _get_dimension_size(ins, args, ctx):
    dims = int_list(ins.attrs.get("dimensions"))
    d = dims[0] if dims else 0
    out = device_empty(ins.shape)
    return fill_value(out, int(args[0].shape[d]))
