"""CUDA data-movement kernels: broadcast, reshape, transpose, reverse, slice here;
dynamic-slice, dynamic-update-slice, pad, concatenate in indexing.py; iota, copy, bitcast,
get-dimension-size, copy-start/copy-done in copies.py.

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
other CUDA modules of the same author (reductions, sorting, gather_scatter); the kernels are
compiled once, in launch.py's table (`src_kernel`).
"""
from __future__ import annotations

import numpy as np

from ..common.errors import ExecutionError
from ..common.plans import row_strides
from ..registry import kernel as _kernel
from .launch import device_empty, flat, launch_stride_loop, src_kernel


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
