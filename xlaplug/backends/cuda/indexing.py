"""CUDA dynamic-slice, dynamic-update-slice, pad and concatenate (numba.cuda), on
data_movement's index-mapping kernels: start indices are device scalars read by every thread
and clamped into [0, operand_dim - slice_dim]; pad crops with negative edges, interior
padding first, as in XLA; concatenate is one `put` launch per operand."""
from __future__ import annotations

from ..common.errors import ExecutionError
from ..common.plans import row_strides
from .data_movement import (copy_contiguous, fill_from_device, fresh_copy, int64_namespace,
                            int_list, kernel, launch_put, size_of, start_code, tup)
from .launch import device_empty, flat, launch_stride_loop, src_kernel


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
