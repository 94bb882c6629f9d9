"""Decomposition of geqp3 (QR with column pivoting), as dgeqp3 with dlaqp2 and the kernel
_householder.geqp3_one.

First the columns whose jpvt is nonzero (fixed) are swapped to the front in order, each
with the first free place (dgeqp3's exchange, not a stable partition); they are
factored without pivoting.  From step nfxd on, each step swaps in the remaining column
of largest partial norm (first one on ties; a NaN norm at the front stays), takes a
Householder step (_decomp_qr.householder_step), and downdates the partial norms,
recomputing those that cancelled (dlaqp2's tol3z test).  nfxd differs per matrix, so
column swaps are one-hot selects and the phase is a per-matrix mask.
"""
from __future__ import annotations

import numpy as np

from . import _decomp_qr as Q
from . import _hlo as H


def _pick(sb, x, at, dim):
    """x's slice at per-matrix index `at` [batch] along `dim` (removed)."""
    dims, r = x.shape.dims, len(at.shape.dims)
    hit = H.cmp(sb, H.iota(sb, dims, dim), sb.broadcast(at, dims, range(r)), "EQ")
    return H.reduce_dims(sb, sb.select(hit, x, H.zeros(sb, x.shape.element_type, dims)), [dim])


def swap(sb, x, c1, c2, dim):
    """x with its slices c1 and c2 (per matrix [batch]) along `dim` exchanged."""
    dims, r = x.shape.dims, len(c1.shape.dims)
    keep = [d for d in range(len(dims)) if d != dim]
    at = H.iota(sb, dims, dim)
    s1, s2 = _pick(sb, x, c1, dim), _pick(sb, x, c2, dim)
    is1 = H.cmp(sb, at, sb.broadcast(c1, dims, range(r)), "EQ")
    is2 = H.cmp(sb, at, sb.broadcast(c2, dims, range(r)), "EQ")
    return sb.select(is1, sb.broadcast(s2, dims, keep),
                     sb.select(is2, sb.broadcast(s1, dims, keep), x))


def _col_norms(sb, x, i):
    """|x[i:, j]| for every column j: [..., n] real."""
    dims, r = x.shape.dims, x.shape.rank - 2
    below = H.cmp(sb, H.rows(sb, dims), sb.broadcast(i, dims), "GE")
    sq = sb.select(below, H.abs2(sb, x), H.zeros(sb, H.REAL_OF[x.shape.element_type], dims))
    return sb.sqrt(H.reduce_dims(sb, sq, [r]))


def geqp3(b, a, jpvt, **_):
    dims, et = a.shape.dims, a.shape.element_type
    batch, (m, n), r = dims[:-2], dims[-2:], len(dims) - 2
    k, rt = min(m, n), H.REAL_OF[et]
    s32 = "s32"
    tol3z = float(np.sqrt(np.finfo(np.float32 if rt == "f32" else np.float64).eps / 2))

    def fix(sb, j, state, consts):
        x, piv, nf = state
        (given,) = consts
        fixed = H.cmp(sb, sb.reshape(H.dslice(sb, given, [0] * r + [j], (*batch, 1)), batch),
                      H.zeros(sb, s32, batch), "NE")
        jb = sb.broadcast(j, batch)
        x2 = swap(sb, x, jb, nf, r + 1)
        # jpvt[j] <- jpvt[nfxd]; jpvt[nfxd] <- j + 1
        at = H.iota(sb, piv.shape.dims, r)
        old_nf = _pick(sb, piv, nf, r)
        nb = sb.broadcast(nf, piv.shape.dims, range(r))
        p2 = sb.select(H.cmp(sb, at, nb, "EQ"), sb.broadcast(sb.add(j, H.const(sb, 1, s32)),
                                                             piv.shape.dims),
                       sb.select(H.cmp(sb, at, sb.broadcast(j, piv.shape.dims), "EQ"),
                                 sb.broadcast(old_nf, piv.shape.dims, range(r)), piv))
        fx = sb.broadcast(fixed, dims, range(r))
        fp = sb.broadcast(fixed, piv.shape.dims, range(r))
        return [sb.select(fx, x2, x), sb.select(fp, p2, piv),
                sb.add(nf, sb.convert(fixed, s32))]

    piv0 = b.add(H.iota(b, (*batch, n), r), b.broadcast(H.const(b, 1, s32), (*batch, n)))
    x, piv, nf = H.fori(b, n, [a, piv0, H.zeros(b, s32, batch)], fix, "geqp3_fixed",
                        consts=[jpvt])

    def step(sb, i, state, consts):
        x, piv, tau, vn1, vn2 = state
        (nf,) = consts
        ib = sb.broadcast(i, batch)
        pivoting = H.cmp(sb, ib, nf, "GE")                           # [batch]
        start = H.cmp(sb, ib, nf, "EQ")
        nd = (*batch, n)
        fresh = _col_norms(sb, x, i)
        st = sb.broadcast(start, nd, range(r))
        vn1, vn2 = sb.select(st, fresh, vn1), sb.select(st, fresh, vn2)
        at = H.iota(sb, nd, r)
        nan = H.cmp(sb, vn1, vn1, "NE")
        cand = sb.select(sb.op("or", nan, H.cmp(sb, at, sb.broadcast(i, nd), "LT")),
                         sb.broadcast(H.const(sb, -np.inf, rt), nd), vn1)
        top = H.reduce_dims(sb, cand, [r], "maximum")
        win = sb.op("and", H.cmp(sb, cand, sb.broadcast(top, nd, range(r)), "EQ"),
                    H.cmp(sb, at, sb.broadcast(i, nd), "GE"))
        pvt = H.reduce_dims(sb, sb.select(win, at, sb.broadcast(H.const(sb, n, s32), nd)),
                            [r], "minimum")
        front_nan = sb.reshape(H.dslice(sb, sb.convert(nan, s32), [0] * r + [i], (*batch, 1)),
                               batch)
        pvt = sb.select(sb.op("or", H.cmp(sb, front_nan, H.zeros(sb, s32, batch), "NE"),
                              H.cmp(sb, pvt, sb.broadcast(H.const(sb, n, s32), batch), "GE")),
                        ib, pvt)
        pvt = sb.select(pivoting, pvt, ib)                          # fixed phase: no pivot
        x, piv = swap(sb, x, ib, pvt, r + 1), swap(sb, piv, ib, pvt, r)
        vn1, vn2 = swap(sb, vn1, ib, pvt, r), swap(sb, vn2, ib, pvt, r)
        x, t = Q.householder_step(sb, x, i)
        tau = H.dupdate(sb, tau, sb.reshape(t, (*batch, 1)), [0] * r + [i])
        # downdate the partial norms of the columns after i (pivoting phase only)
        rowi = sb.abs(sb.reshape(H.row(sb, x, i), nd))
        one = sb.broadcast(H.const(sb, 1, rt), nd)
        safe1 = sb.select(H.cmp(sb, vn1, H.zeros(sb, rt, nd), "EQ"), one, vn1)
        q = sb.divide(rowi, safe1)
        temp = sb.maximum(sb.subtract(one, sb.multiply(q, q)), H.zeros(sb, rt, nd))
        ratio = sb.divide(vn1, sb.select(H.cmp(sb, vn2, H.zeros(sb, rt, nd), "EQ"), one, vn2))
        redo = H.cmp(sb, sb.multiply(temp, sb.multiply(ratio, ratio)),
                     sb.broadcast(H.const(sb, tol3z, rt), nd), "LE")
        below = _col_norms(sb, x, sb.add(i, H.const(sb, 1, s32)))
        live = sb.op("and", sb.op("and", H.cmp(sb, at, sb.broadcast(i, nd), "GT"),
                                  H.cmp(sb, vn1, H.zeros(sb, rt, nd), "NE")),
                     sb.broadcast(pivoting, nd, range(r)))
        n1 = sb.select(redo, below, sb.multiply(vn1, sb.sqrt(temp)))
        n2 = sb.select(redo, below, vn2)
        return [x, piv, tau, sb.select(live, n1, vn1), sb.select(live, n2, vn2)]

    zn = H.zeros(b, rt, (*batch, n))
    x, piv, tau, _, _ = H.fori(b, k, [x, piv, H.zeros(b, et, (*batch, k)), zn, zn], step,
                               "geqp3", consts=[nf])
    return b.tuple(x, piv, tau)
