"""CUDA convolution (numba.cuda): an im2col kernel reads the input in its own dim_labels order
(padding, lhs/rhs dilation and strides are index arithmetic, nothing is materialized), the
kernel is laid out as [O, I*window] (with rhs_reversal), linalg's tiled matmul multiplies
them per batch (feature and batch groups map to matmul batches), and a final kernel writes
the output dim order and type.  Types as linalg's dot."""
from __future__ import annotations

import numpy as np
from numba import cuda

from ..common.errors import ExecutionError
from ..common.plans import conv_plan
from ..registry import kernel
from .launch import cached_kernel, device_dtype, flat, launch_stride_loop
from .linalg import _c_strides, _device_compute, _empty, _nbt, _tup, matmul, permute_convert


def _im2col_kernel(out_dt, in_dt):
    """The im2col kernel writing `out_dt` columns from an `in_dt` input (compiled once)."""
    return cached_kernel(("im2col", np.dtype(out_dt), np.dtype(in_dt)),
                         lambda: _compile_im2col(_nbt(out_dt)))


def _compile_im2col(T):
    @cuda.jit
    def im2col(cols, x, R, P, KK, G, BG, Nb, Cg, sN, sC, ksz, osz, isz, sS, stride, rdil,
               ldil, padlo):
        """cols[b, c*KK + kk, p] = x[n(b), c0(b) + c, p*stride + k*rdil - padlo (/ ldil)]."""
        for i in range(cuda.grid(1), cols.size, cuda.gridsize(1)):
            p = i % P
            r = (i // P) % R
            b = i // (P * R)
            c = r // KK
            kk = r - c * KK
            g = b % G
            nq = b // G
            if BG > 1:
                n = (nq % BG) * Nb + nq // BG
            else:
                n = nq
            off = n * sN + (g * Cg + c) * sC
            ok = True
            for d in range(len(ksz) - 1, -1, -1):
                kd = kk % ksz[d]
                kk = kk // ksz[d]
                od = p % osz[d]
                p = p // osz[d]
                j = od * stride[d] + kd * rdil[d] - padlo[d]
                if j < 0:
                    ok = False
                else:
                    q = j // ldil[d]
                    if q * ldil[d] != j or q >= isz[d]:
                        ok = False
                    else:
                        off += q * sS[d]
            if ok:
                cols[i] = T(x[off])
            else:
                cols[i] = T(0)
    return im2col


@kernel("convolution", device="cuda")
def _convolution(ins, args, ctx):
    lhs, rhs = args[0], args[1]
    out_dt = device_dtype(ins.shape.element_type)
    ls, rs = tuple(lhs.shape), tuple(rhs.shape)
    cp = conv_plan(ins, ls, rs, lhs.dtype, rhs.dtype, out_dt)
    dn, wdims, G, BG = cp.dims, cp.window, cp.groups, cp.batch_groups
    N, C, O, I, KK, P = cp.n, cp.c, cp.o, cp.i, cp.kk, cp.p
    ksz, s_out = list(cp.kernel_spatial), list(cp.out_spatial)
    if G > 1 and BG > 1:  # (the im2col kernel indexes one kind of group)
        raise ExecutionError(f"convolution '{ins.name}': inconsistent shapes for "
                             f"feature_group_count={G}, batch_group_count={BG}")
    cdt, kind = _device_compute(cp.compute_dtype, cp.kind), cp.kind
    lst, rst = _c_strides(ls), _c_strides(rs)
    out_dims = tuple(ins.shape.dims)
    isz = [ls[d] for d in dn.input_spatial]

    # The kernel as [O, I, window...] in the compute type, reversed where asked.
    kstrides = [rst[dn.kernel_output_feature], rst[dn.kernel_input_feature]]
    base = 0
    for d, wd in zip(dn.kernel_spatial, wdims):
        if wd.reversal:
            base += (rs[d] - 1) * rst[d]
            kstrides.append(-rst[d])
        else:
            kstrides.append(rst[d])
    w = permute_convert(rhs, [O, I] + ksz, kstrides, base, cdt)

    # Matmul batches: b = n*G + g (feature groups), b = nb*BG + g (batch groups), b = n.
    if G > 1:
        nbatch, Mo, Cg = N * G, O // G, I
        A = w.reshape((G, Mo, I * KK))
    elif BG > 1:
        nbatch, Mo, Cg = N, O // BG, C
        A = w.reshape((BG, Mo, C * KK))
    else:
        nbatch, Mo, Cg = N, O, C
        A = w.reshape((1, O, C * KK))
    R = Cg * KK
    cols = _empty((nbatch, R, P), cdt)
    if cols.size:
        k = _im2col_kernel(cdt, lhs.dtype)
        windows = (_tup([wd.stride for wd in wdims]), _tup([wd.rhs_dilate for wd in wdims]),
                   _tup([wd.lhs_dilate for wd in wdims]), _tup([wd.pad_lo for wd in wdims], 0))
        launch_stride_loop(k, cols.size, flat(cols), flat(lhs), R, P, KK, G, BG, N // BG, Cg,
                           lst[dn.input_batch], lst[dn.input_feature], _tup(ksz), _tup(s_out),
                           _tup(isz), _tup([lst[d] for d in dn.input_spatial], 0), *windows)
    y = matmul(A, cols, nbatch)  # [n_out, O, P] in every case

    # [n_out, O, spatial...] -> the output's dim order and type.
    ystr = {dn.output_batch: O * P, dn.output_feature: P}
    sp = _c_strides(s_out)
    for d, s in zip(dn.output_spatial, sp):
        ystr[d] = s
    if kind == "int" and np.dtype(out_dt).kind == "b":
        mode = "nonzero"
    elif np.dtype(out_dt).kind != "c" and np.dtype(cdt).kind == "c":
        mode = "real"
    else:
        mode = "cast"
    return permute_convert(y, out_dims, [ystr[d] for d in range(len(out_dims))], 0, out_dt,
                           mode)
