"""Kernels that rearrange elements without arithmetic: broadcast, reshape, transpose, slices,
pads, concatenation, iota, copies and bitcasts.

Semantics follow XLA (hlo_evaluator.cc and the operation semantics page):
  * dynamic-slice / dynamic-update-slice clamp every start index into
    [0, operand_dim - slice_dim], for signed and unsigned index types alike;
  * pad applies interior padding first, then edge padding; negative edge padding crops;
  * bitcast reinterprets the physical buffer: operand and result layouts (minor_to_major)
    decide the element order; without a layout the default row-major order is used.
"""
from __future__ import annotations

import numpy as np

from ..registry import kernel
from ..common.errors import ExecutionError
from ..common.plans import physical_order
from .transpose_copy import copy_into


def _out(ins, x) -> np.ndarray:
    """`x` as a fresh, writable, C-contiguous array of the instruction's dtype."""
    return np.array(x, dtype=ins.shape.dtype, order="C", copy=True)


def _int_list(v) -> tuple[int, ...]:
    if v is None:
        return ()
    if isinstance(v, (int, np.integer)):
        return (int(v),)
    return tuple(int(d) for d in v)


@kernel("broadcast")
def _broadcast(ins, args, ctx):
    x = np.asarray(args[0])
    dims = _int_list(ins.attrs.get("dimensions"))
    out_dims = ins.shape.dims
    if len(dims) != x.ndim:
        raise ExecutionError(f"broadcast '{ins.name}': dimensions={list(dims)} does not match "
                             f"an operand of rank {x.ndim}")
    if x.size == 1:  # one value everywhere (a zeros init): a fill, 2.5x faster than a copy
        return np.full(out_dims, x.reshape(()), dtype=ins.shape.dtype)
    # Put the operand's dimensions in the order they take in the result, then insert ones.
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    x = x.transpose(order)
    shape = [1] * len(out_dims)
    for i in order:
        shape[dims[i]] = np.asarray(args[0]).shape[i]
    y = np.broadcast_to(x.reshape(shape), out_dims)
    return _out(ins, y)


@kernel("reshape")
def _reshape(ins, args, ctx):
    return _out(ins, np.asarray(args[0]).reshape(ins.shape.dims))


@kernel("transpose")
def _transpose(ins, args, ctx):
    x = np.asarray(args[0]).astype(ins.shape.dtype, copy=False)
    perm = _int_list(ins.attrs.get("dimensions"))
    out = np.empty(ins.shape.dims, ins.shape.dtype)
    copy_into(out, x.transpose(perm))
    return out


@kernel("reverse")
def _reverse(ins, args, ctx):
    x = np.asarray(args[0])
    dims = _int_list(ins.attrs.get("dimensions"))
    if dims:
        x = np.flip(x, axis=dims)
    return _out(ins, x)


@kernel("slice")
def _slice(ins, args, ctx):
    x = np.asarray(args[0])
    ranges = ins.attrs["slice"].dims
    idx = tuple(slice(r.start, r.limit, r.stride) for r in ranges)
    return _out(ins, x[idx])


def _start_indices(args) -> list[int]:
    """Start indices from the trailing operands: scalars, or (old form) one rank-1 vector."""
    out: list[int] = []
    for a in args:
        a = np.asarray(a)
        out.extend(int(v) for v in a.reshape(-1))
    return out


def _clamp_starts(starts, operand_dims, sizes) -> list[int]:
    return [min(max(s, 0), max(d - z, 0)) for s, d, z in zip(starts, operand_dims, sizes)]


@kernel("dynamic-slice")
def _dynamic_slice(ins, args, ctx):
    x = np.asarray(args[0])
    sizes = _int_list(ins.attrs.get("dynamic_slice_sizes")) or ins.shape.dims
    starts = _start_indices(args[1:])
    if len(starts) != x.ndim or len(sizes) != x.ndim:
        raise ExecutionError(f"dynamic-slice '{ins.name}': {len(starts)} start indices and "
                             f"{len(sizes)} sizes for an operand of rank {x.ndim}")
    starts = _clamp_starts(starts, x.shape, sizes)
    idx = tuple(slice(s, s + z) for s, z in zip(starts, sizes))
    return _out(ins, x[idx])


@kernel("dynamic-update-slice")
def _dynamic_update_slice(ins, args, ctx):
    x = np.asarray(args[0])
    upd = np.asarray(args[1])
    starts = _start_indices(args[2:])
    if len(starts) != x.ndim or upd.ndim != x.ndim:
        raise ExecutionError(f"dynamic-update-slice '{ins.name}': {len(starts)} start indices "
                             f"for an operand of rank {x.ndim}")
    out = _out(ins, x)
    if upd.size == 0:
        return out
    starts = _clamp_starts(starts, x.shape, upd.shape)
    idx = tuple(slice(s, s + z) for s, z in zip(starts, upd.shape))
    out[idx] = upd.astype(out.dtype, copy=False)
    return out


def pad_array(x: np.ndarray, pads, value, out_dims=None) -> np.ndarray:
    """XLA pad: `pads` is a sequence of (lo, hi, interior); lo/hi may be negative (crop)."""
    x = np.asarray(x)
    if out_dims is None:
        out_dims = []
        for d, (lo, hi, interior) in zip(x.shape, pads):
            core = d + max(d - 1, 0) * interior
            out_dims.append(max(lo + core + hi, 0))
    out = np.full(tuple(out_dims), value, dtype=x.dtype)
    if out.size == 0 or x.size == 0:
        return out
    src, dst = [], []
    for d, od, (lo, hi, interior) in zip(x.shape, out_dims, pads):
        step = interior + 1
        # Source element i lands at lo + i*step; keep those inside [0, od).
        i_min = (-lo + step - 1) // step if lo < 0 else 0
        i_max = min(d - 1, (od - 1 - lo) // step) if od - 1 - lo >= 0 else -1
        if i_min > i_max:
            return out
        src.append(slice(i_min, i_max + 1))
        start = lo + i_min * step
        dst.append(slice(start, start + (i_max - i_min) * step + 1, step))
    copy_into(out[tuple(dst)], x[tuple(src)])
    return out


@kernel("pad")
def _pad(ins, args, ctx):
    x = np.asarray(args[0])
    value = np.asarray(args[1]).astype(ins.shape.dtype)
    padding = ins.attrs["padding"]
    pads = [(p.lo, p.hi, p.interior) for p in padding.dims]
    if len(pads) != x.ndim:
        raise ExecutionError(f"pad '{ins.name}': padding has {len(pads)} dimensions for an "
                             f"operand of rank {x.ndim}")
    return pad_array(x.astype(ins.shape.dtype, copy=False), pads, value, ins.shape.dims)


@kernel("concatenate")
def _concatenate(ins, args, ctx):
    dims = _int_list(ins.attrs.get("dimensions"))
    axis = dims[0] if dims else 0
    parts = [np.asarray(a).astype(ins.shape.dtype, copy=False) for a in args]
    return np.concatenate(parts, axis=axis)


@kernel("iota")
def _iota(ins, args, ctx):
    dims = ins.shape.dims
    d = int(ins.attrs.get("iota_dimension", 0))
    dt = ins.shape.dtype
    n = dims[d] if dims else 1
    base = np.arange(n, dtype=np.int64)
    # static_cast<T>(index): integers wrap modulo 2^bits, floats round to nearest.
    vals = base != 0 if dt.kind == "b" else base.astype(dt)
    if not dims:
        return np.asarray(vals[0], dtype=dt).reshape(())
    shape = [1] * len(dims)
    shape[d] = n
    return np.array(np.broadcast_to(vals.reshape(shape), dims), dtype=dt, copy=True)


@kernel("copy")
def _copy(ins, args, ctx):
    if isinstance(args[0], tuple):
        return tuple(_deep_copy(a) for a in args[0])
    return _out(ins, args[0])


def _deep_copy(v):
    if isinstance(v, tuple):
        return tuple(_deep_copy(a) for a in v)
    return np.array(v, copy=True)


@kernel("copy-start")
def _copy_start(ins, args, ctx):
    # Shape (destination, source, u32[] context): the destination already holds the copy.
    x = args[0]
    ctx_vals = [np.zeros(s.dims, s.dtype) for s in ins.shape.tuple_shapes[2:]]
    return (_deep_copy(x), x, *ctx_vals)


@kernel("copy-done")
def _copy_done(ins, args, ctx):
    return args[0][0]


@kernel("bitcast")
def _bitcast(ins, args, ctx):
    x = np.asarray(args[0])
    src_shape = ins.operands[0].shape if ins.operands else None
    dt = ins.shape.dtype
    # Linearize in the operand's physical order.
    if src_shape is not None and src_shape.is_array and len(src_shape.dims) == x.ndim:
        flat = np.asarray(x.transpose(physical_order(src_shape))).reshape(-1, order="C")
    else:
        flat = np.asarray(x).reshape(-1, order="C")
    if flat.dtype != dt:
        if flat.dtype.itemsize * flat.size != dt.itemsize * ins.shape.num_elements():
            raise ExecutionError(f"bitcast '{ins.name}': {x.dtype}{list(x.shape)} and "
                                 f"{ins.shape} differ in byte size")
        flat = flat.view(dt)
    if flat.size != ins.shape.num_elements():
        raise ExecutionError(f"bitcast '{ins.name}': {flat.size} elements cannot become "
                             f"{ins.shape}")
    order = physical_order(ins.shape)
    phys = flat.reshape([ins.shape.dims[d] for d in order])
    inv = np.argsort(order)
    return np.array(phys.transpose(inv), dtype=dt, order="C", copy=True)


@kernel("get-dimension-size")
def _get_dimension_size(ins, args, ctx):
    dims = _int_list(ins.attrs.get("dimensions"))
    d = dims[0] if dims else 0
    size = np.asarray(args[0]).shape[d]
    return np.asarray(size, dtype=ins.shape.dtype)


@kernel("set-dimension-size")
def _set_dimension_size(ins, args, ctx):
    x = np.asarray(args[0])
    if tuple(x.shape) != tuple(ins.shape.dims):
        raise ExecutionError(f"set-dimension-size '{ins.name}': operand {list(x.shape)} does "
                             f"not match {ins.shape}")
    return _out(ins, x)
