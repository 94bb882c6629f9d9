"""Device-neutral plans: plain data, worked out from an instruction, that the CPU and CUDA
kernels both consume -- so the two devices cannot disagree on how an op is laid out or
which type it accumulates in.

* `dot_plan`: a dot canonicalized to a batched [B, M, K] x [B, K, N] matmul (the operand
  transposes) and its compute type (XLA:CPU's accumulation rules, cpu/linalg.py's docstring);
* `conv_plan`: a convolution's geometry -- batch, features, groups, window, output
  spatial sizes, checked against each other -- and its compute type (both devices then
  run im2col and a batched matmul);
* `physical_order`: a shape's dimensions major to minor, per its layout (bitcast);
  `row_strides`: the element strides of row-major dims.

Window and gather/scatter plans live beside this module (plans_window, plans_gather).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...hlo import dtypes as D
from .errors import ExecutionError

_F64_EXACT = float(2 ** 53)


def _int_range(dt: np.dtype) -> float:
    """The largest magnitude an integer (or bool) dtype can hold."""
    if dt.kind == "b":
        return 1.0
    try:
        info = np.iinfo(dt)
        return float(max(abs(int(info.min)), int(info.max)))
    except ValueError:  # ml_dtypes sub-byte ints
        import ml_dtypes
        info = ml_dtypes.iinfo(dt)
        return float(max(abs(int(info.min)), int(info.max)))


def _is_int(dt: np.dtype) -> bool:
    if dt.kind in "iub":
        return True
    try:
        return D.is_integral(D.from_dtype(dt))
    except ValueError:
        return False


def dot_compute_type(lhs_dt: np.dtype, rhs_dt: np.dtype, out_dt: np.dtype, k: int):
    """(compute dtype, kind) for a contraction of length k: kind is 'float' or 'int'."""
    if out_dt.kind == "c":
        if lhs_dt == np.complex128 or rhs_dt == np.complex128 or out_dt == np.complex128 \
                or lhs_dt == np.float64 or rhs_dt == np.float64:
            return np.dtype(np.complex128), "float"
        return np.dtype(np.complex64), "float"
    if _is_int(out_dt) and _is_int(lhs_dt) and _is_int(rhs_dt):
        bound = _int_range(lhs_dt) * _int_range(rhs_dt) * max(k, 1)
        if bound < _F64_EXACT:
            return np.dtype(np.float64), "int"  # exact in f64, fast through BLAS
        return np.dtype(np.int64), "int"
    if lhs_dt.kind == "c" or rhs_dt.kind == "c":
        return np.dtype(np.complex128), "float"
    wide = any(d == np.float64 for d in (lhs_dt, rhs_dt, out_dt))
    return np.dtype(np.float64 if wide else np.float32), "float"


@dataclass(frozen=True)
class DotPlan:
    """lhs.transpose(lhs_perm) -> [batch, m, k], rhs.transpose(rhs_perm) -> [batch, k, n];
    products and sums in compute_dtype; kind 'int' results wrap to the result width."""
    lhs_perm: tuple[int, ...]
    rhs_perm: tuple[int, ...]
    batch: int
    m: int
    k: int
    n: int
    compute_dtype: np.dtype
    kind: str


def _size(dims) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


def dot_plan(ins, lhs_dims, rhs_dims, lhs_dt, rhs_dt, out_dt) -> DotPlan:
    """The dot `ins` on operands of these dims and dtypes (device dtypes on CUDA)."""
    a = ins.attrs
    lb = tuple(a.get("lhs_batch_dims", ()))
    rb = tuple(a.get("rhs_batch_dims", ()))
    lc = tuple(a.get("lhs_contracting_dims", ()))
    rc = tuple(a.get("rhs_contracting_dims", ()))
    if len(lb) != len(rb) or len(lc) != len(rc):
        raise ExecutionError(f"dot '{ins.name}': batch/contracting dimension counts differ")
    ls, rs = tuple(lhs_dims), tuple(rhs_dims)
    lf = [d for d in range(len(ls)) if d not in lb and d not in lc]
    rf = [d for d in range(len(rs)) if d not in rb and d not in rc]
    k = _size(ls[d] for d in lc)
    cdt, kind = dot_compute_type(np.dtype(lhs_dt), np.dtype(rhs_dt), np.dtype(out_dt), k)
    return DotPlan(tuple(lb) + tuple(lf) + tuple(lc), tuple(rb) + tuple(rc) + tuple(rf),
                   _size(ls[d] for d in lb), _size(ls[d] for d in lf), k,
                   _size(rs[d] for d in rf), cdt, kind)


@dataclass(frozen=True)
class ConvPlan:
    """A convolution in canonical form: input [n, c, spatial...], kernel [o, i, window...],
    output [n_out, o, out_spatial...]; c = i * groups, n_out = n // batch_groups; kk and p
    are the window's and the output's spatial element counts."""
    dims: object                 # the dim_labels attribute (ConvDims)
    window: tuple                # one WindowDim per spatial dimension
    groups: int
    batch_groups: int
    n: int
    c: int
    o: int
    i: int
    kernel_spatial: tuple[int, ...]
    out_spatial: tuple[int, ...]
    n_out: int
    kk: int
    p: int
    compute_dtype: np.dtype
    kind: str


def conv_plan(ins, lhs_dims, rhs_dims, lhs_dt, rhs_dt, out_dt) -> ConvPlan:
    """The convolution `ins` on operands of these dims and dtypes (device dtypes on CUDA);
    an ExecutionError when the window, groups and shapes do not fit together."""
    dn = ins.attrs["dim_labels"]
    window = ins.attrs.get("window")
    wdims = tuple(window.dims) if window is not None else ()
    nsp = len(dn.input_spatial)
    if len(wdims) != nsp:
        raise ExecutionError(f"convolution '{ins.name}': window has {len(wdims)} "
                             f"dimensions, dim_labels {nsp} spatial dimensions")
    g = int(ins.attrs.get("feature_group_count", 1) or 1)
    bg = int(ins.attrs.get("batch_group_count", 1) or 1)
    ls, rs, out_dims = tuple(lhs_dims), tuple(rhs_dims), tuple(ins.shape.dims)
    n, c = ls[dn.input_batch], ls[dn.input_feature]
    o, i = rs[dn.kernel_output_feature], rs[dn.kernel_input_feature]
    ksz = tuple(rs[d] for d in dn.kernel_spatial)
    s_out = tuple(out_dims[d] for d in dn.output_spatial)
    n_out, o_out = out_dims[dn.output_batch], out_dims[dn.output_feature]
    if c != i * g or o % g or n % bg or o % bg or o_out != o or n_out != n // bg:
        raise ExecutionError(f"convolution '{ins.name}': inconsistent shapes for "
                             f"feature_group_count={g}, batch_group_count={bg}")
    kk = _size(ksz)
    cdt, kind = dot_compute_type(np.dtype(lhs_dt), np.dtype(rhs_dt), np.dtype(out_dt), i * kk)
    return ConvPlan(dn, wdims, g, bg, n, c, o, i, ksz, s_out, n_out, kk, _size(s_out), cdt,
                    kind)


def physical_order(shape) -> tuple[int, ...]:
    """Dimensions from major to minor, per the shape's layout (default: row-major)."""
    rank = len(shape.dims)
    lay = shape.layout
    if lay is None or len(lay.minor_to_major) != rank:
        return tuple(range(rank))
    return tuple(reversed(lay.minor_to_major))


def row_strides(dims) -> tuple[int, ...]:
    """Row-major element strides of `dims`."""
    s = [1] * len(dims)
    for d in range(len(dims) - 2, -1, -1):
        s[d] = s[d + 1] * int(dims[d + 1])
    return tuple(s)
