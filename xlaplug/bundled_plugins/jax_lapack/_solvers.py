"""LU with partial pivoting, triangular solves and the tridiagonal solver, in numpy.

Each follows its reference LAPACK / BLAS routine (dgetf2's pivot choice and its
handling of zero pivots, dtrsm's referenced triangle and unit diagonal, dgtsv's and
zgtsv's row interchanges and early exits) so the results, pivots and info codes are
LAPACK's; arithmetic stays in the operand dtype.  Batches are a leading axis.
"""
from __future__ import annotations

import numpy as np


def _cabs1(x):
    """|x| as LAPACK's pivot searches measure it: |re| + |im| for complex (izamax)."""
    return np.abs(x.real) + np.abs(x.imag) if np.iscomplexobj(x) else np.abs(x)


def iamax(mag: np.ndarray) -> np.ndarray:
    """idamax along the last axis: first maximum; NaNs never win unless they come first."""
    safe = np.where(np.isnan(mag), -np.inf, mag)
    p = np.argmax(safe, axis=-1)
    return np.where(np.isnan(mag[..., 0]), 0, p)


def getrf(a: np.ndarray):
    """dgetf2 on a batch (B, m, n): returns (lu, ipiv (1-based, int32), info)."""
    a = a.copy()
    b, m, n = a.shape
    k = min(m, n)
    ipiv = np.zeros((b, k), np.int32)
    info = np.zeros(b, np.int32)
    rows = np.arange(b)
    sfmin = np.finfo(a.dtype).tiny
    for j in range(k):
        p = j + iamax(_cabs1(a[:, j:, j]))
        ipiv[:, j] = p + 1
        swap = p != j
        if swap.any():
            top = a[rows, j].copy()
            a[rows, j] = a[rows, p]
            a[rows, p] = top
        pivot = a[:, j, j]
        zero = pivot == 0
        info[(info == 0) & zero] = j + 1
        if j + 1 < m:
            col = a[:, j + 1:, j]
            with np.errstate(all="ignore"):
                recip = np.ones((), a.dtype) / pivot
                scaled = np.where((np.abs(pivot) >= sfmin)[:, None], col * recip[:, None],
                                  col / pivot[:, None])
            a[:, j + 1:, j] = np.where(zero[:, None], col, scaled)
            if j + 1 < n:
                with np.errstate(all="ignore"):
                    a[:, j + 1:, j + 1:] -= a[:, j + 1:, j, None] * a[:, j, None, j + 1:]
    return a, ipiv, info


def trsm(a: np.ndarray, b: np.ndarray, side: str, uplo: str, trans: str, diag: str,
         alpha=None) -> np.ndarray:
    """dtrsm: solve op(A) X = alpha B (side 'L') or X op(A) = alpha B (side 'R').

    a (B, k, k) reads only its `uplo` triangle (and not its diagonal when diag == 'U')."""
    lower = uplo == "L"
    t = np.tril(a) if lower else np.triu(a)
    k = t.shape[-1]
    idx = np.arange(k)
    if diag == "U":
        t[:, idx, idx] = 1
    if trans in ("T", "C"):
        t = np.swapaxes(t, -1, -2)
        if trans == "C":
            t = t.conj()
        lower = not lower
    x = b.copy() if alpha is None else b * alpha
    if side == "R":                        # X T = B  <=>  T^T X^T = B^T
        t = np.swapaxes(t, -1, -2)
        lower = not lower
        x = np.swapaxes(x, -1, -2).copy()
    with np.errstate(all="ignore"):
        order = range(k) if lower else range(k - 1, -1, -1)
        for j in order:
            if diag != "U":
                x[:, j, :] /= t[:, j, j, None]
            rest = slice(j + 1, k) if lower else slice(0, j)
            x[:, rest, :] -= t[:, rest, j, None] * x[:, j, None, :]
    if side == "R":
        x = np.swapaxes(x, -1, -2)
    return x


def gtsv_one(dl, d, du, b):
    """dgtsv / zgtsv on one system: dl[i] = A[i, i-1] (dl[0] unused), du[i] = A[i, i+1].

    Returns (dl, d, du, b, info) as LAPACK leaves them (dl shifted back to jax's layout)."""
    dl, d, du, b = dl.copy(), d.copy(), du.copy(), b.copy()
    n = d.shape[0]
    low = dl[1:]                           # LAPACK's DL(1:n-1)
    cplx = np.iscomplexobj(d)
    with np.errstate(all="ignore"):
        for i in range(n - 1):
            if cplx and low[i] == 0:
                if d[i] == 0:
                    return dl, d, du, b, i + 1
                continue
            if _cabs1(d[i]) >= _cabs1(low[i]):     # no row interchange
                if d[i] == 0:
                    return dl, d, du, b, i + 1
                fact = low[i] / d[i]
                d[i + 1] -= fact * du[i]
                b[i + 1] -= fact * b[i]
                if i < n - 2:
                    low[i] = 0
            else:                                  # interchange rows i and i+1
                fact = d[i] / low[i]
                d[i] = low[i]
                temp = d[i + 1]
                d[i + 1] = du[i] - fact * temp
                if i < n - 2:
                    low[i] = du[i + 1]
                    du[i + 1] = -fact * low[i]
                du[i] = temp
                temp_b = b[i].copy()
                b[i] = b[i + 1]
                b[i + 1] = temp_b - fact * b[i + 1]
        if n == 0:
            return dl, d, du, b, 0
        if d[n - 1] == 0:
            return dl, d, du, b, n
        b[n - 1] /= d[n - 1]
        if n > 1:
            b[n - 2] = (b[n - 2] - du[n - 2] * b[n - 1]) / d[n - 2]
        for i in range(n - 3, -1, -1):
            b[i] = (b[i] - du[i] * b[i + 1] - low[i] * b[i + 2]) / d[i]
    return dl, d, du, b, 0
