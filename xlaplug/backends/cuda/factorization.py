"""CUDA cholesky and triangular-solve (numba.cuda): one thread per matrix (per right-hand-side
vector for triangular-solve), batched, following XLA's expanders as the CPU kernel does
(cpu/linalg.py).  f16/bf16 work in f32, complex and f64 in their own type; the result is
converted to the instruction's type once, by linalg.finish."""
from __future__ import annotations

import math

import numpy as np
from numba import cuda

from ..common.errors import ExecutionError
from ..registry import kernel
from .launch import cached_kernel, device_dtype, launch_1d
from .linalg import _empty, _nbt, _size, finish


# ---- cholesky ------------------------------------------------------------------------------

def _work_dtype(dt) -> np.dtype:
    dt = np.dtype(dt)
    if dt.kind == "c" or dt == np.float64:
        return dt
    return np.dtype(np.float32)


def _cholesky_kernel(wdt, in_dt):
    """The cholesky kernel working in `wdt` on an `in_dt` operand (compiled once)."""
    return cached_kernel(("cholesky", np.dtype(wdt), np.dtype(in_dt)),
                         lambda: _compile_cholesky(_nbt(wdt)))


def _compile_cholesky(W):
    @cuda.jit
    def chol(L, a, lower):
        """One thread per matrix: L (= out, work type) from the `lower` (or upper) triangle
        of a; the other triangle is zero; all-NaN when a square root met a NaN."""
        bi = cuda.grid(1)
        nbat = L.shape[0]
        n = L.shape[1]
        if bi < nbat:
            err = False
            for j in range(n):
                for i in range(n):  # zero the other triangle and the diagonal
                    if i <= j:
                        if lower:
                            L[bi, i, j] = W(0)
                        else:
                            L[bi, j, i] = W(0)
            for j in range(n):
                s = W(0)
                for k in range(j):
                    v = L[bi, j, k] if lower else L[bi, k, j]
                    s += v * v.conjugate()
                ajj = W(a[bi, j, j])
                sr = (ajj - s).real
                if sr >= 0:
                    r = math.sqrt(sr)
                else:
                    r = math.nan
                    err = True
                if math.isnan(r):
                    err = True
                ljj = W(r)
                L[bi, j, j] = ljj
                for i in range(j + 1, n):
                    acc = W(0)
                    for k in range(j):
                        if lower:
                            acc += L[bi, i, k] * L[bi, j, k].conjugate()
                        else:
                            acc += L[bi, k, i] * L[bi, k, j].conjugate()
                    if lower:
                        L[bi, i, j] = (W(a[bi, i, j]) - acc) / ljj
                    else:
                        L[bi, j, i] = (W(a[bi, j, i]) - acc) / ljj
            if err:
                for i in range(n):
                    for j in range(n):
                        L[bi, i, j] = W(math.nan)
    return chol


@kernel("cholesky", device="cuda")
def _cholesky(ins, args, ctx):
    a = args[0]
    lower = bool(ins.attrs.get("lower", False))
    dims = tuple(a.shape)
    n = dims[-1]
    nb = _size(dims[:-2])
    wdt = _work_dtype(a.dtype)
    out_dt = device_dtype(ins.shape.element_type)
    L = _empty((nb, n, n), wdt)
    if nb and n:
        k = _cholesky_kernel(wdt, a.dtype)
        launch_1d(k, nb, L, a.reshape((nb, n, n)), lower, threads=64)
    return finish(L, "float", out_dt, ins.shape.dims)


# ---- triangular-solve ----------------------------------------------------------------------

def _trsm_kernel(wdt, a_dt, b_dt):
    """The triangular-solve kernel working in `wdt` on `a_dt` and `b_dt` operands (compiled
    once)."""
    return cached_kernel(("trsm", np.dtype(wdt), np.dtype(a_dt), np.dtype(b_dt)),
                         lambda: _compile_trsm(_nbt(wdt)))


def _compile_trsm(W):
    @cuda.jit
    def trsm(X, a, bm, left, lower, unit, transposed, conj):
        """One thread per (batch, right-hand-side vector): solves op(a) x = b (left) or
        x op(a) = b by substitution, reading only the named triangle of a."""
        t = cuda.grid(1)
        nbat = X.shape[0]
        n = a.shape[1]
        nv = X.shape[2] if left else X.shape[1]
        if t < nbat * nv:
            bi = t // nv
            v = t - bi * nv
            ai = bi % a.shape[0]
            eff_lower = lower != transposed
            for s in range(n):
                i = s if eff_lower else n - 1 - s
                lo = 0 if eff_lower else i + 1
                hi = i if eff_lower else n
                acc = W(0)
                for k in range(lo, hi):
                    e = W(a[ai, k, i]) if transposed else W(a[ai, i, k])
                    if conj:
                        e = e.conjugate()
                    xk = X[bi, k, v] if left else X[bi, v, k]
                    acc += e * xk
                rhs = (W(bm[bi, i, v]) if left else W(bm[bi, v, i])) - acc
                if not unit:
                    d = W(a[ai, i, i])
                    if conj:
                        d = d.conjugate()
                    rhs = rhs / d
                if left:
                    X[bi, i, v] = rhs
                else:
                    X[bi, v, i] = rhs
    return trsm


@kernel("triangular-solve", device="cuda")
def _triangular_solve(ins, args, ctx):
    a, b = args[0], args[1]
    at = ins.attrs
    left = bool(at.get("left_side", False))
    lower = bool(at.get("lower", False))
    unit = bool(at.get("unit_diagonal", False))
    trans = str(at.get("transpose_a", "NO_TRANSPOSE")).upper()
    wide = any(np.dtype(d) in (np.float64, np.complex128) for d in (a.dtype, b.dtype))
    if np.dtype(a.dtype).kind == "c" or np.dtype(b.dtype).kind == "c":
        wdt = np.dtype(np.complex128 if wide else np.complex64)
    else:
        wdt = np.dtype(np.float64 if wide else np.float32)
    transposed = trans in ("TRANSPOSE", "ADJOINT")
    conj = trans == "ADJOINT"
    if not left:
        transposed = not transposed  # x op(a) = b  <=>  op(a)^T x^T = b^T
    bdims, adims = tuple(b.shape), tuple(a.shape)
    n = adims[-1]
    na = _size(adims[:-2])
    nb = _size(bdims[:-2])
    if na not in (1, nb):
        raise ExecutionError(f"triangular-solve '{ins.name}': batch dimensions of "
                             f"{list(a.shape)} and {list(bdims)} differ")
    X = _empty((nb,) + bdims[-2:], wdt)
    nv = bdims[-1] if left else bdims[-2]
    if nb and nv and n:
        k = _trsm_kernel(wdt, a.dtype, b.dtype)
        launch_1d(k, nb * nv, X, a.reshape((na, n, n)), b.reshape((nb,) + bdims[-2:]),
                  left, lower, unit, transposed, conj, threads=64)
    return finish(X, "float", device_dtype(ins.shape.element_type), ins.shape.dims)
