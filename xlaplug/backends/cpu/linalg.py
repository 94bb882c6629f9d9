"""Linear algebra kernels: dot, cholesky, triangular-solve (convolution: convolution.py).

Accumulation types follow XLA:CPU:
  * floats narrower than f32 (f16, bf16, f8...) accumulate in f32 and round once at the end
    (XLA:CPU upcasts such dots/convolutions to f32);
  * f32 accumulates in f32 (BLAS sgemm), f64 in f64, complex in the complex result type,
    as four real sums combined at the end (Eigen's order: dot_complex.py);
  * integers: operands are converted to the result type and multiplied/added with
    wrap-around (the evaluator's static_cast + two's-complement arithmetic).  Modular
    arithmetic makes that equal to exact int64 arithmetic truncated to the result width,
    which is what is computed here (through f64 BLAS when the sums are provably exact);
  * pred: an OR of ANDs.

cholesky and triangular-solve follow XLA's expanders (cholesky_expander.cc,
triangular_solve_expander.cc), which XLA:CPU uses:
  * cholesky reads only the `lower` (or upper) triangle, returns zeros in the other
    triangle, and a matrix whose factorization met a NaN square root (not positive
    definite) becomes all-NaN, per batch element;
  * triangular-solve reads only the named triangle of `a` (the diagonal is not read when
    unit_diagonal) and solves op(a) x = b (left_side) or x op(a) = b.
"""
from __future__ import annotations

import numpy as np

from ..registry import kernel
from ..common.plans import dot_plan
from .bf16_convert import is_bf16, to_bf16, to_f32
from .blas_threads import devices_at_once
from .dot_complex import complex_matmul
from .gang_gemm import ganged_product
from .pool_gemm import matmul as pooled_matmul, pools

def _to_compute(x: np.ndarray, cdt: np.dtype, parallel: bool = False) -> np.ndarray:
    """An operand in the compute type (bf16 widened over numba's threads when `parallel`)."""
    x = np.asarray(x)
    if x.dtype == cdt:
        return x
    if cdt.kind == "i" and x.dtype.kind not in "iub":
        return x.astype(np.int64)
    if is_bf16(x.dtype) and cdt == np.float32:
        return to_f32(x, parallel)  # exact, as astype, without ml_dtypes' per-element call
    return x.astype(cdt)


def _finish(y: np.ndarray, kind: str, out_dt: np.dtype, parallel: bool = False) -> np.ndarray:
    """Compute-type result -> result dtype (integers wrap; pred is `!= 0`; bf16 rounded
    over numba's threads when `parallel`)."""
    if kind == "int":
        if y.dtype != np.int64:
            y = y.astype(np.int64)  # exact: |y| < 2^53
        if out_dt.kind == "b":
            return y != 0
        if out_dt.itemsize < 8 or out_dt.kind == "u":
            return y.astype(out_dt)  # two's-complement truncation
        return y.astype(out_dt, copy=False)
    if out_dt.kind != "c" and y.dtype.kind == "c":
        y = y.real
    if is_bf16(out_dt):
        return to_bf16(y, parallel)  # ml_dtypes' bits (bf16_convert.py), 9x faster
    return y.astype(out_dt, copy=False)


# ---- dot -------------------------------------------------------------------------------

def _strided(w, nb: int, rows: int, cols: int):
    """Operand `w` (in the compute type, already in the product's dimension order) viewed as
    [batch dims..., rows, cols], batch dims kept apart where they do not merge: a transposed
    operand (the attention's per-head q, k and v, [b, t, h, d] read as [b, h, t, d]) then
    costs no copy, numpy's matmul handing BLAS each strided matrix.  One lying row by row is
    the gemm numpy calls on a copy with another leading dimension: the same bits.  One lying
    transposed is gemm's transposed form: the same bits where OpenBLAS packs both forms
    alike (its Haswell kernels, tested), but the small-matrix kernels of others (SkylakeX's:
    17x33x65) sum a transposed operand in another order -- within sgemm's rounding, as
    XLA's own contraction has its own order.  None where a view cannot do
    (then the operand is copied in the product's order): a matrix BLAS cannot take as it
    lies (matmul.c.src's is_blasable2d), or a degenerate one (numpy's gemv)."""
    v = w.view()
    try:
        v.shape = w.shape[:nb] + (rows, cols)
    except AttributeError:  # rows or cols would have to merge dimensions that do not
        return None
    s0, s1 = v.strides[-2:]
    size = v.itemsize
    if rows < 2 or cols < 2 or not ((s1 == size and s0 >= cols * size and s0 % size == 0) or
                                    (s0 == size and s1 >= rows * size and s1 % size == 0)):
        return None
    return v


def _strided_pair(lhs, rhs, p, nb: int, widen):
    """Both operands as _strided views (after `widen`, the compute type's conversion), or
    None. Not for operands sharing memory: numpy's matmul takes a matrix times its own
    transpose to syrk, whose bits are not gemm's."""
    lw, rw = widen(lhs), widen(rhs)
    if np.may_share_memory(lw, rw):
        return None
    L = _strided(lw.transpose(p.lhs_perm), nb, p.m, p.k)
    R = _strided(rw.transpose(p.rhs_perm), nb, p.k, p.n) if L is not None else None
    return None if R is None else (L, R)


@kernel("dot")
def _dot(ins, args, ctx):
    lhs, rhs = args[0], args[1]
    direct = ctx.kernel_cache.table("_dot_direct").get(ins)
    if direct is not None and type(lhs) is np.ndarray and type(rhs) is np.ndarray and \
            lhs.shape == direct[0] and rhs.shape == direct[1] and \
            lhs.dtype == direct[2] and rhs.dtype == direct[2] and \
            (ctx.spmd is None or ctx.spmd.gang is None or ins not in ctx.spmd.gang.products):
        # The product the general path below makes of two matrices of its result's float
        # type (the same views, the same `@`, so the same bits) without its ~5 us of Python
        # a call (20 calls a step of the data-parallel MLP on 4 devices).
        if direct[5] and ctx.product_threads > 1:
            return pooled_matmul(lhs.transpose(direct[3]), rhs.transpose(direct[4]),
                                 ctx.product_threads)
        return lhs.transpose(direct[3]) @ rhs.transpose(direct[4])
    lhs, rhs = np.asarray(lhs), np.asarray(rhs)
    out_dt = ins.shape.dtype
    # Planned once per instruction and operand shapes in this run context: planning took
    # ~10 us of Python a call, a tenth of a 64x512x64 product.
    plans, key = ctx.kernel_cache.table("_dot_plans"), (ins, lhs.shape, rhs.shape,
                                                         lhs.dtype, rhs.dtype)
    p = plans.get(key)
    if p is None:
        p = plans[key] = dot_plan(ins, lhs.shape, rhs.shape, lhs.dtype, rhs.dtype, out_dt)
    B, M, K, N, cdt, kind = p.batch, p.m, p.k, p.n, p.compute_dtype, p.kind
    # large f32/f64 products on numba's threads, with one BLAS thread's bits (pool_gemm.py)
    pool = ctx.product_threads > 1 and pools(B, M, K, N, cdt)
    # bf16 operands and results convert on numba's threads, unless devices share the cores.
    par = not devices_at_once(ctx)
    bf16 = is_bf16(lhs.dtype) and is_bf16(rhs.dtype) and cdt == np.float32
    if K > 0 and ((bf16 and (B > 1 or ctx.spmd is None or ctx.spmd.gang is None)) or
                  (B > 1 and lhs.dtype == rhs.dtype == cdt and cdt.kind == "f")):
        # bf16 widened in its own layout (one contiguous pass); f32 and f64 batched
        # products with no copy at all where their matrices lie strided
        nb = len(ins.attrs.get("lhs_batch_dims", ()))
        pair = _strided_pair(lhs, rhs, p, nb, (lambda x: to_f32(x, par)) if bf16 else
                             (lambda x: x))
        if pair is not None:
            y = pooled_matmul(*pair, ctx.product_threads) if pool else np.matmul(*pair)
            y = _finish(y, kind, out_dt, par)
            return np.asarray(y.reshape(ins.shape.dims), order="C")
    if lhs.ndim == rhs.ndim == 2 == len(ins.shape.dims) and K > 0 and cdt.kind == "f" and \
            lhs.dtype == rhs.dtype == cdt == out_dt and \
            len(ins.attrs.get("lhs_contracting_dims", ())) == 1 and \
            not ins.attrs.get("lhs_batch_dims"):  # [M, K] @ [K, N]: the direct form above
        ctx.kernel_cache.table("_dot_direct")[ins] = (lhs.shape, rhs.shape, cdt,
                                                      p.lhs_perm, p.rhs_perm,
                                                      pools(B, M, K, N, cdt))
    L = _to_compute(lhs.transpose(p.lhs_perm), cdt, par).reshape(B, M, K)
    R = _to_compute(rhs.transpose(p.rhs_perm), cdt, par).reshape(B, K, N)
    if K == 0:
        y = np.zeros((B, M, N), cdt)
    elif cdt.kind == "c":
        y = complex_matmul(L, R)  # Eigen's four real sums, not cgemm (dot_complex.py)
    elif B == 1 and ctx.spmd is not None and ctx.spmd.gang is not None and \
            ins in ctx.spmd.gang.products:
        y = ganged_product(ins, L[0], R[0], ctx)[None]
    elif pool:
        y = pooled_matmul(L, R, ctx.product_threads)
    else:
        y = (L[0] @ R[0])[None] if B == 1 else np.matmul(L, R)
    y = _finish(y, kind, out_dt, par)
    return np.asarray(y.reshape(ins.shape.dims), order="C")


# ---- cholesky --------------------------------------------------------------------------

def _work_dtype(dt: np.dtype) -> np.dtype:
    if dt.kind == "c":
        return dt
    if dt == np.float64:
        return dt
    return np.dtype(np.float32)


def _swap(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, -1, -2)


@kernel("cholesky")
def _cholesky(ins, args, ctx):
    a = np.asarray(args[0])
    lower = bool(ins.attrs.get("lower", False))
    wdt = _work_dtype(a.dtype)
    a = a.astype(wdt)
    if not lower:
        a = _swap(a)  # a plain transpose, as XLA's expander does
    n = a.shape[-1]
    batch = a.shape[:-2]
    L = np.zeros_like(a)
    err = np.zeros(batch, bool)
    cplx = wdt.kind == "c"
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        for j in range(n):
            row = L[..., j, :j]
            if cplx:
                s = a[..., j, j] - np.sum(row * row.conj(), axis=-1)
                ljj = np.sqrt(s.real)
                err |= np.isnan(ljj)
                ljj = ljj.astype(wdt)
            else:
                s = a[..., j, j] - np.sum(row * row, axis=-1)
                ljj = np.sqrt(s)
                err |= np.isnan(ljj)
            L[..., j, j] = ljj
            if j + 1 < n:
                below = a[..., j + 1:, j] - np.matmul(
                    L[..., j + 1:, :j], row.conj()[..., None])[..., 0]
                L[..., j + 1:, j] = below / ljj[..., None]
    if err.any():
        L[err] = np.nan
    if not lower:
        L = _swap(L)
    return np.asarray(L.astype(ins.shape.dtype), order="C")


# ---- triangular-solve ------------------------------------------------------------------

@kernel("triangular-solve")
def _triangular_solve(ins, args, ctx):
    a, b = np.asarray(args[0]), np.asarray(args[1])
    at = ins.attrs
    left = bool(at.get("left_side", False))
    lower = bool(at.get("lower", False))
    unit = bool(at.get("unit_diagonal", False))
    trans = str(at.get("transpose_a", "NO_TRANSPOSE")).upper()
    wide = any(d in (np.float64, np.complex128) for d in (a.dtype, b.dtype))
    if a.dtype.kind == "c" or b.dtype.kind == "c":
        wdt = np.dtype(np.complex128 if wide else np.complex64)
    else:
        wdt = np.dtype(np.float64 if wide else np.float32)
    A = a.astype(wdt)
    Bm = b.astype(wdt)
    n = A.shape[-1]
    A = np.tril(A) if lower else np.triu(A)
    if unit:
        idx = np.arange(n)
        A[..., idx, idx] = 1
    if trans in ("TRANSPOSE", "ADJOINT"):
        A = _swap(A)
        if trans == "ADJOINT":
            A = A.conj()
        lower = not lower
    if not left:
        # x A = b  <=>  A^T x^T = b^T
        A = _swap(A)
        lower = not lower
        Bm = _swap(Bm)
    A = np.broadcast_to(A, Bm.shape[:-2] + A.shape[-2:]) if A.ndim < Bm.ndim else A
    X = np.zeros(np.broadcast_shapes(A.shape[:-2], Bm.shape[:-2]) + Bm.shape[-2:], wdt)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        order = range(n) if lower else range(n - 1, -1, -1)
        for i in order:
            if lower:
                acc = np.matmul(A[..., i:i + 1, :i], X[..., :i, :])
            else:
                acc = np.matmul(A[..., i:i + 1, i + 1:], X[..., i + 1:, :])
            rhs = Bm[..., i:i + 1, :] - acc
            X[..., i:i + 1, :] = rhs if unit else rhs / A[..., i:i + 1, i:i + 1]
    if not left:
        X = _swap(X)
    return np.asarray(X.astype(ins.shape.dtype), order="C")
