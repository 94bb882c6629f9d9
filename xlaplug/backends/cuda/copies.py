"""CUDA iota, copy, copy-start/copy-done, bitcast and get-dimension-size (numba.cuda), on
data_movement's kernels; iota into narrow integers wraps through s64 as static_cast does;
bitcast honours both layouts (physical element order)."""
from __future__ import annotations

import numpy as np

from ..common.errors import ExecutionError
from ..common.plans import physical_order, row_strides
from .data_movement import (copy_contiguous, fill_value, fresh_copy, int_list, kernel,
                            launch_strided, size_of)
from .launch import (NARROW_TYPES, cuda_module, device_dtype, device_empty, device_zeros, flat,
                     launch_stride_loop, src_kernel)


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
