"""Decompositions of the two-sided Householder reductions: gehrd (upper Hessenberg) and
sytrd / hetrd (tridiagonal), step for step as dgehd2 and dsytd2 / zhetd2 (and the numpy
kernels in _householder.py): one reflector per column from dlarfg (_decomp_qr.larfg),
applied on both sides with dots over the whole matrix and a mask for the block it
touches, the reflector stored where it annihilated, taus in a vector.
"""
from __future__ import annotations

from . import _decomp_eigh as E
from . import _decomp_qr as Q
from . import _hlo as H
from ._common import char


def _place(sb, x, j, newcol_mask_pairs):
    """Column j of x with rows chosen by masks replaced: [(mask [..., m, 1], values)]."""
    c = H.column(sb, x, j)
    for mask, values in newcol_mask_pairs:
        c = sb.select(mask, values, c)
    return H.dupdate(sb, x, c, [0] * (x.shape.rank - 1) + [j])


def gehrd(b, a, *, low=1, high=None, **_):
    dims, et = a.shape.dims, a.shape.element_type
    batch, n, r = dims[:-2], dims[-1], len(dims) - 2
    ilo = max(int(low), 1) if n else 1
    ihi = min(int(high), n) if high is not None else n

    def step(sb, i, state, consts):
        x, tau = state
        cd = (*batch, n, 1)
        i1 = sb.add(i, H.const(sb, 1, "s32"))
        i2 = sb.add(i, H.const(sb, 2, "s32"))
        c = H.column(sb, x, i)
        tail = sb.select(Q.between(sb, cd, r, i2, ihi), c, H.zeros(sb, et, cd))
        beta, t, v = Q.larfg(sb, H.entry(sb, x, i1, i), tail)
        head = H.cmp(sb, H.rows(sb, cd), sb.broadcast(i1, cd), "EQ")
        vv = sb.select(head, sb.broadcast(H.const(sb, 1, et), cd), v)
        right = Q._apply_right(sb, vv, t, x)                 # columns i+1 .. ihi-1
        x = sb.select(H.cmp(sb, H.rows(sb, dims), sb.broadcast(H.const(sb, ihi, "s32"), dims),
                            "LT"), right, x)
        left = Q._apply_left(sb, vv, H.conj(sb, t), x)       # rows i+1 .. ihi-1
        x = sb.select(H.cmp(sb, H.cols(sb, dims), sb.broadcast(i1, dims), "GE"), left, x)
        x = _place(sb, x, i, [(head, H.expand(sb, H.as_type(sb, beta, et), cd)),
                              (Q.between(sb, cd, r, i2, ihi), v)])
        tau = H.dupdate(sb, tau, sb.reshape(t, (*batch, 1)), [0] * r + [i])
        return [x, tau]

    m1 = max(n - 1, 0)
    x, tau = H.fori(b, ihi - 1, [a, H.zeros(b, et, (*batch, m1))], step, "gehrd",
                    start=ilo - 1)
    return b.tuple(x, tau, H.zeros(b, "s32", batch))


def sytrd(b, a, *, uplo=76, **_):
    """On the Hermitian matrix the `uplo` triangle holds; lower: step i annihilates
    h[i+2:, i] by a reflector on rows/columns i+1:, upper (i = n-2 down to 0): h[:i, i+1]
    by one on rows/columns :i+1.  d and e are the tridiagonal's, the reflectors go where
    they annihilated in a copy of the input, whose diagonal becomes d."""
    dims, et = a.shape.dims, a.shape.element_type
    batch, n, r, rt = dims[:-2], dims[-1], len(dims) - 2, H.REAL_OF[et]
    lower = char(uplo, "L") == "L"
    m1 = max(n - 1, 0)

    def step(sb, s, state, consts):
        h, out, e, tau = state
        cd = (*batch, n, 1)
        if lower:
            i = s
            col, head = sb.add(i, H.const(sb, 1, "s32")), sb.add(i, H.const(sb, 1, "s32"))
            tail_lo, tail_hi, blk_lo, blk_hi = sb.add(i, H.const(sb, 2, "s32")), n, head, n
        else:
            i = sb.subtract(H.const(sb, n - 2, "s32"), s)
            col, head = sb.add(i, H.const(sb, 1, "s32")), i
            tail_lo, tail_hi, blk_lo, blk_hi = 0, i, 0, sb.add(i, H.const(sb, 1, "s32"))
        src = i if lower else col                            # the column being reduced
        c = H.column(sb, h, src)
        tail_m = Q.between(sb, cd, r, tail_lo, tail_hi)
        tail = sb.select(tail_m, c, H.zeros(sb, et, cd))
        beta, t, v = Q.larfg(sb, H.entry(sb, h, head, src), tail)
        at_head = H.cmp(sb, H.rows(sb, cd), sb.broadcast(head, cd), "EQ")
        vv = sb.select(at_head, sb.broadcast(H.const(sb, 1, et), cd), v)
        blk = Q.between(sb, cd, r, blk_lo, blk_hi)
        x = sb.multiply(H.expand(sb, t, cd), H.bmm(sb, h, vv))
        x = sb.select(blk, x, H.zeros(sb, et, cd))
        alpha = sb.multiply(sb.multiply(H.const(sb, -0.5, et), t),
                            H.bmm(sb, H.adjoint(sb, x), vv))
        w = sb.add(x, sb.multiply(H.expand(sb, alpha, cd), vv))
        h = sb.subtract(h, sb.add(H.bmm(sb, vv, H.adjoint(sb, w)), H.bmm(sb, w, H.adjoint(sb, vv))))
        eye = H.cmp(sb, H.rows(sb, dims), H.cols(sb, dims), "EQ")
        h = sb.select(eye, H.as_type(sb, H.real(sb, h), et), h)
        pairs = [(at_head, H.expand(sb, H.as_type(sb, beta, et), cd)), (tail_m, v)]
        h, out = _place(sb, h, src, pairs), _place(sb, out, src, pairs)
        e = H.dupdate(sb, e, sb.reshape(beta, (*batch, 1)), [0] * r + [i])
        tau = H.dupdate(sb, tau, sb.reshape(t, (*batch, 1)), [0] * r + [i])
        return [h, out, e, tau]

    h = E.hermitian_from(b, a, lower)
    h, out, e, tau = H.fori(b, m1, [h, a, H.zeros(b, rt, (*batch, m1)),
                                    H.zeros(b, et, (*batch, m1))], step, "sytrd")
    eye = H.cmp(b, H.rows(b, dims), H.cols(b, dims), "EQ")
    d = H.reduce_dims(b, b.select(eye, H.real(b, h), H.zeros(b, rt, dims)), [r + 1])
    out = b.select(eye, H.as_type(b, b.broadcast(d, dims, list(range(r + 1))), et), out)
    return b.tuple(out, d, e, tau, H.zeros(b, "s32", batch))
