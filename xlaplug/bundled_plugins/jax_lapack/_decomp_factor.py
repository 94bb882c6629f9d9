"""Decompositions of potrf, trsm and getrf into core HLO (while loops, dynamic slices, dots).

The models are XLA's own expanders for backends with no LAPACK: cholesky_expander.cc's
unblocked column-by-column Cholesky, triangular_solve_expander.cc's substitution (here
one row per step, with every side / triangle / transpose case turned into a forward
substitution on the left), and jax's `_lu_unblocked` (partial pivoting, LAPACK's pivot
choice).  Results keep the kernels' contract (_kernels.py): the untouched triangle of
potrf, NaNs in the factor and the first bad leading minor in info when it fails, 1-based
pivots and dgetf2's info for a zero pivot.
"""
from __future__ import annotations

import numpy as np

from xlaplug.hlo.errors import HloError

from . import _hlo as H
from ._common import char


def potrf(b, a, *, uplo=76, **_):
    """Lower: L with A = L L^H column by column; upper: U = L(A^H)^H."""
    dims, et = a.shape.dims, a.shape.element_type
    batch, n, r = dims[:-2], dims[-1], len(dims) - 2
    lower = char(uplo, "L") == "L"
    src = a if lower else H.adjoint(b, a)
    rt = H.REAL_OF[et]

    def step(sb, j, state, consts):
        l, info = state
        (src,) = consts
        lrow = H.row(sb, l, j)                                 # columns >= j still 0
        c = sb.subtract(H.column(sb, src, j), H.bmm(sb, l, H.adjoint(sb, lrow)))
        d = H.real(sb, H.entry(sb, c, j, j))                   # [..., 1, 1]
        bad = sb.op("not", H.cmp(sb, d, H.const(sb, 0, rt), "GT"))  # NaN too, as dpotf2
        flat = sb.reshape(bad, batch)
        first = sb.op("and", flat, H.cmp(sb, info, H.zeros(sb, "s32", batch), "EQ"))
        info = sb.select(first, sb.broadcast(sb.add(j, H.const(sb, 1, "s32")), batch), info)
        ljj = H.as_type(sb, sb.sqrt(d), et)
        cdims = c.shape.dims
        below = sb.divide(c, H.expand(sb, ljj, cdims))
        i = H.rows(sb, cdims)
        jj = sb.broadcast(j, cdims)
        newcol = sb.select(H.cmp(sb, i, jj, "GT"), below,
                           sb.select(H.cmp(sb, i, jj, "EQ"), H.expand(sb, ljj, cdims),
                                     H.zeros(sb, et, cdims)))
        return [H.dupdate(sb, l, newcol, [0] * (r + 1) + [j]), info]

    l, info = H.fori(b, n, [H.zeros(b, et, dims), H.zeros(b, "s32", batch)], step, "potrf",
                      consts=[src])
    failed = b.broadcast(H.cmp(b, info, H.zeros(b, "s32", batch), "NE"), dims, range(r))
    l = b.select(failed, H.as_type(b, b.broadcast(H.const(b, np.nan, rt), dims), et), l)
    tri = H.cmp(b, H.rows(b, dims), H.cols(b, dims), "GE" if lower else "LE")
    return b.tuple(b.select(tri, l if lower else H.adjoint(b, l), a), info)


def _solve_lower_left(b, t, x):
    """X with T X = B, T lower triangular [.., k, k], B [.., k, n]: row i of X is
    (B_i - T_i X) / T_ii, X's rows >= i still zero."""
    dims, r = x.shape.dims, x.shape.rank - 2
    k = dims[-2]

    def step(sb, i, state, consts):
        (sol,) = state
        t, x = consts
        rhs = sb.subtract(H.row(sb, x, i), H.bmm(sb, H.row(sb, t, i), sol))
        xi = sb.divide(rhs, H.expand(sb, H.entry(sb, t, i, i), rhs.shape.dims))
        return [H.dupdate(sb, sol, xi, [0] * r + [i, 0])]
    (sol,) = H.fori(b, k, [H.zeros(b, x.shape.element_type, dims)], step, "trsm",
                    consts=[t, x])
    return sol


def trsm(b, a, x, *alpha, side=76, uplo=76, trans_x=78, diag=78, **_):
    """op(A) X = alpha B (side L) or X op(A) = alpha B (side R), A's `uplo` triangle only."""
    et, dims = a.shape.element_type, a.shape.dims
    r = len(dims) - 2
    lower = char(uplo, "L") == "L"
    t = b.select(H.cmp(b, H.rows(b, dims), H.cols(b, dims), "GE" if lower else "LE"), a,
                 H.zeros(b, et, dims))
    if char(diag, "N") == "U":
        t = b.select(H.cmp(b, H.rows(b, dims), H.cols(b, dims), "EQ"), H.eye(b, et, dims), t)
    trans = char(trans_x, "N")
    if trans in "TC":
        t = H.adjoint(b, t) if trans == "C" else H.transpose(b, t)
        lower = not lower
    if alpha:
        if alpha[0].shape.rank != 0:
            raise HloError(f"trsm decomposition: alpha must be a scalar, got {alpha[0].shape}")
        x = b.multiply(x, alpha[0])
    right = char(side, "L") == "R"
    if right:                                   # X T = B  <=>  T^T X^T = B^T
        t, x, lower = H.transpose(b, t), H.transpose(b, x), not lower
    if not lower:                               # reverse rows and columns: upper -> lower
        t = b.reverse(t, dimensions=(r, r + 1))
        x = b.reverse(x, dimensions=(r,))
    sol = _solve_lower_left(b, t, x)
    if not lower:
        sol = b.reverse(sol, dimensions=(r,))
    return H.transpose(b, sol) if right else sol


def getrf(b, a, **_):
    """dgetf2: for each column, the first row of largest |re| + |im| at or below the
    diagonal is swapped up, the column below the pivot scaled by its reciprocal (left as
    it is for a zero pivot, which sets info), and the trailing block updated."""
    dims, et = a.shape.dims, a.shape.element_type
    batch, (m, n), r = dims[:-2], dims[-2:], len(dims) - 2
    k, rt = min(m, n), H.REAL_OF[et]

    def step(sb, j, state, consts):
        x, ipiv, info = state
        c = H.column(sb, x, j)                                  # [..., m, 1]
        mag = sb.add(sb.abs(sb.real(c)), sb.abs(sb.imag(c))) if H.is_complex(c) else sb.abs(c)
        ri = H.rows(sb, c.shape.dims)
        here = H.cmp(sb, ri, sb.broadcast(j, c.shape.dims), "GE")
        nan = H.cmp(sb, mag, mag, "NE")
        ninf = sb.broadcast(H.const(sb, -np.inf, rt), c.shape.dims)
        safe = sb.select(sb.op("or", sb.op("not", here), nan), ninf, mag)
        top = H.reduce_dims(sb, safe, [r, r + 1], "maximum")   # [batch]
        win = sb.op("and", here, H.cmp(sb, safe, H.expand(sb, sb.reshape(top, (*batch, 1, 1)),
                                                      c.shape.dims), "EQ"))
        none = sb.broadcast(H.const(sb, m, "s32"), ri.shape.dims)
        p = H.reduce_dims(sb, sb.select(win, ri, none), [r, r + 1], "minimum")
        jb = sb.broadcast(j, batch)
        first_nan = sb.reshape(H.entry(sb, sb.convert(nan, "s32"), j, 0), batch)
        p = sb.select(H.cmp(sb, first_nan, H.zeros(sb, "s32", batch), "NE"), jb, p)
        p = sb.select(H.cmp(sb, p, sb.broadcast(H.const(sb, m, "s32"), batch), "LT"), p, jb)
        ipiv = H.dupdate(sb, ipiv, sb.reshape(sb.add(p, H.const(sb, 1, "s32")), (*batch, 1)),
                         [0] * r + [j])
        # Swap rows j and p (p differs per matrix: one-hot masks, not a dynamic slice).
        ir = H.rows(sb, dims)
        at_p = H.cmp(sb, ir, b_to(sb, p, dims, r), "EQ")
        row_p = H.reduce_dims(sb, sb.select(at_p, x, H.zeros(sb, et, dims)), [r])
        row_j = sb.reshape(H.row(sb, x, j), (*batch, n))
        at_j = H.cmp(sb, ir, sb.broadcast(j, dims), "EQ")
        x = sb.select(at_j, b_rows(sb, row_p, dims, r),
                      sb.select(at_p, b_rows(sb, row_j, dims, r), x))
        pivot = H.entry(sb, x, j, j)
        zero = H.cmp(sb, pivot, H.zeros(sb, et, pivot.shape.dims), "EQ")
        fz = sb.reshape(zero, batch)
        info = sb.select(sb.op("and", fz, H.cmp(sb, info, H.zeros(sb, "s32", batch), "EQ")),
                         sb.broadcast(sb.add(j, H.const(sb, 1, "s32")), batch), info)
        recip = sb.divide(H.const(sb, 1, et), pivot)
        col = H.column(sb, x, j)
        scaled = sb.select(H.expand(sb, zero, col.shape.dims), col,
                           sb.multiply(col, H.expand(sb, recip, col.shape.dims)))
        below = H.cmp(sb, H.rows(sb, col.shape.dims), sb.broadcast(j, col.shape.dims), "GT")
        col = sb.select(below, scaled, col)
        x = H.dupdate(sb, x, col, [0] * (r + 1) + [j])
        prow = H.row(sb, x, j)
        trail = sb.op("and", H.cmp(sb, ir, sb.broadcast(j, dims), "GT"),
                        H.cmp(sb, H.cols(sb, dims), sb.broadcast(j, dims), "GT"))
        upd = sb.subtract(x, sb.multiply(H.expand(sb, col, dims), H.expand(sb, prow, dims)))
        return [sb.select(trail, upd, x), ipiv, info]

    x, ipiv, info = H.fori(b, k, [a, H.zeros(b, "s32", (*batch, k)), H.zeros(b, "s32", batch)],
                           step, "getrf")
    return b.tuple(x, ipiv, info)


def b_to(b, v, dims, r):
    """A per-matrix scalar [batch] broadcast over the matrix [batch, m, n]."""
    return b.broadcast(v, dims, range(r))


def b_rows(b, v, dims, r):
    """A per-matrix row [batch, n] repeated down the rows of [batch, m, n]."""
    return b.broadcast(v, dims, list(range(r)) + [r + 1])
