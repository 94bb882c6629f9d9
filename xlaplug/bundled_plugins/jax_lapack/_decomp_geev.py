"""Decomposition of geev (general eigenproblem) into core HLO, in complex arithmetic.

1. Householder reduction to upper Hessenberg form H = Z^H A Z (dgehd2's reflectors,
   _decomp_qr.larfg), Z accumulated.
2. Shifted QR iterations to the complex Schur form T (the textbook explicit algorithm:
   H - mu I = QR, H <- RQ + mu I, Z <- ZQ, with the QR from _decomp_qr), mu the Wilkinson
   shift of the trailing 2x2 of each matrix's unreduced bottom block, an exceptional shift
   every tenth step; a subdiagonal entry below eps (|h_kk| + |h_k-1,k-1|) is set to zero,
   and a matrix whose subdiagonal is all zero is done (each one of the batch freezes).
3. Eigenvectors of T by back substitution (right: x_kj (t_kk - w_j) = -sum t_ki x_ij, left
   likewise forwards), a zero t_kk - w_j replaced by eps |T| as dtrevc does, mapped back by
   Z and normalised as ?geev: unit norm, largest component real.

Eigenvalues come out in the order the iteration deflates them, which need not be LAPACK's
(nor are a real matrix's conjugate pairs exactly conjugate here): `canonical_geev` sorts
the eigen-triples and fixes each vector's phase for check-plugins.  Real input gives
wr, wi from the complex eigenvalues.  Non-finite input: NaN eigenvalues, zero vectors,
info -4, as XLA's kernel.
"""
from __future__ import annotations

import numpy as np

from . import _decomp_qr as Q
from . import _hlo as H
from ._common import char

COMPLEX = {"f32": "c64", "f64": "c128", "c64": "c64", "c128": "c128"}


def _hessenberg(b, x, z):
    dims, et = x.shape.dims, x.shape.element_type
    batch, n, r = dims[:-2], dims[-1], len(dims) - 2

    def step(sb, i, state, consts):
        x, z = state
        cd = (*batch, n, 1)
        i1, i2 = sb.add(i, H.const(sb, 1, "s32")), sb.add(i, H.const(sb, 2, "s32"))
        tail_m = Q.between(sb, cd, r, i2, n)
        tail = sb.select(tail_m, H.column(sb, x, i), H.zeros(sb, et, cd))
        beta, t, v = Q.larfg(sb, H.entry(sb, x, i1, i), tail)
        head = H.cmp(sb, H.rows(sb, cd), sb.broadcast(i1, cd), "EQ")
        vv = sb.select(head, sb.broadcast(H.const(sb, 1, et), cd), v)
        x = Q._apply_left(sb, vv, H.conj(sb, t), Q._apply_right(sb, vv, t, x))
        c = H.column(sb, x, i)
        c = sb.select(head, H.expand(sb, H.as_type(sb, beta, et), cd),
                      sb.select(tail_m, H.zeros(sb, et, cd), c))
        return [H.dupdate(sb, x, c, [0] * (r + 1) + [i]), Q._apply_right(sb, vv, t, z)]
    return H.fori(b, max(n - 2, 0), [x, z], step, "geev_hessenberg")


def _pick(sb, x, mask):
    """The one entry of each matrix where `mask` holds, as [..., 1, 1]."""
    r = x.shape.rank - 2
    s = H.reduce_dims(sb, sb.select(mask, x, H.zeros(sb, x.shape.element_type, x.shape.dims)),
                      [r, r + 1])
    return sb.reshape(s, (*x.shape.dims[:-2], 1, 1))


def _schur(b, h, z, max_iter):
    dims, et = h.shape.dims, h.shape.element_type
    r, rt = len(dims) - 2, H.REAL_OF[et]
    eps = float(np.finfo(np.float32 if rt == "f32" else np.float64).eps)

    def deflate(sb, h):
        """(h with negligible subdiagonal entries zeroed, the bottom row of each matrix's
        last unreduced block [batch], or 0 when it is triangular)."""
        i, j = H.rows(sb, dims), H.cols(sb, dims)
        sub = H.cmp(sb, i, sb.add(j, sb.broadcast(H.const(sb, 1, "s32"), dims)), "EQ")
        dg = sb.abs(sb.select(H.cmp(sb, i, j, "EQ"), h, H.zeros(sb, et, dims)))
        dsum = H.reduce_dims(sb, dg, [r + 1])                            # |h_kk| by row
        dn = sb.broadcast(dsum, dims, list(range(r + 1)))               # |h_ii| at (i, j)
        dp = sb.broadcast(dsum, dims, list(range(r)) + [r + 1])         # |h_jj| at (i, j)
        small = H.cmp(sb, sb.abs(h), sb.multiply(sb.add(dn, dp), H.const(sb, eps, rt)), "LE")
        h = sb.select(sb.op("and", sub, small), H.zeros(sb, et, dims), h)
        live = sb.op("and", sub, H.cmp(sb, h, H.zeros(sb, et, dims), "NE"))
        hi = H.reduce_dims(sb, sb.select(live, i, H.zeros(sb, "s32", dims)), [r, r + 1],
                           "maximum")
        return h, hi

    def cond(cb, vals):
        it, h = vals[0], vals[1]
        _, hi = deflate(cb, h)
        busy = H.reduce_dims(cb, H.cmp(cb, hi, H.zeros(cb, "s32", hi.shape.dims), "GT"),
                             list(range(r)), "or")
        return cb.op("and", busy, H.cmp(cb, it, H.const(cb, max_iter, "s32"), "LT"))

    def body(sb, vals):
        it, h, z = vals
        h, hi = deflate(sb, h)
        i, j = H.rows(sb, dims), H.cols(sb, dims)
        hb = sb.broadcast(hi, dims, range(r))
        one = sb.broadcast(H.const(sb, 1, "s32"), dims)
        lo = sb.subtract(hb, one)

        def at(ri, ci):
            return _pick(sb, h, sb.op("and", H.cmp(sb, i, ri, "EQ"), H.cmp(sb, j, ci, "EQ")))
        a, bb, c, d = at(lo, lo), at(lo, hb), at(hb, lo), at(hb, hb)
        half = H.const(sb, 0.5, et)
        m = sb.multiply(sb.subtract(a, d), half)
        disc = sb.sqrt(sb.add(sb.multiply(m, m), sb.multiply(bb, c)))
        mid = sb.multiply(sb.add(a, d), half)
        mu1, mu2 = sb.add(mid, disc), sb.subtract(mid, disc)
        near1 = H.cmp(sb, sb.abs(sb.subtract(mu1, d)), sb.abs(sb.subtract(mu2, d)), "LE")
        mu = sb.select(near1, mu1, mu2)
        odd = H.cmp(sb, sb.remainder(sb.add(it, H.const(sb, 1, "s32")), H.const(sb, 10, "s32")),
                    H.const(sb, 0, "s32"), "EQ")
        exceptional = sb.add(d, H.as_type(sb, sb.multiply(sb.abs(c), H.const(sb, 0.75, rt)), et))
        mu = sb.select(sb.broadcast(odd, mu.shape.dims), exceptional, mu)
        shift = sb.multiply(H.expand(sb, mu, dims), H.eye(sb, et, dims))
        qr = Q.geqrf(sb, sb.subtract(h, shift))
        f, tau = sb.get_tuple_element(qr, 0), sb.get_tuple_element(qr, 1)
        q = Q.orgqr(sb, f, tau)
        rr = sb.select(H.cmp(sb, i, j, "LE"), f, H.zeros(sb, et, dims))
        busy = sb.broadcast(H.cmp(sb, hi, H.zeros(sb, "s32", hi.shape.dims), "GT"), dims, range(r))
        h = sb.select(busy, sb.add(H.bmm(sb, rr, q), shift), h)
        z = sb.select(busy, H.bmm(sb, z, q), z)
        return [sb.add(it, H.const(sb, 1, "s32")), h, z]

    it, h, z = H.while_loop(b, [H.const(b, 0, "s32"), h, z], cond, body, "geev_qr")
    h, hi = deflate(b, h)
    t = b.select(H.cmp(b, H.rows(b, dims), H.cols(b, dims), "LE"), h, H.zeros(b, et, dims))
    return t, z, hi


def _eigvecs_of_triangular(b, t, w, right: bool):
    """Right (upper triangular X, T X = X diag(w)) or left (lower triangular Yc with
    Yc^T T = diag(w) Yc^T, i.e. conj(Yc)'s columns are T's left eigenvectors); entry
    (k, j) is component k of vector j."""
    dims, et = t.shape.dims, t.shape.element_type
    n, r, rt = dims[-1], len(dims) - 2, H.REAL_OF[et]
    eps = float(np.finfo(np.float32 if rt == "f32" else np.float64).eps)
    norm = H.reduce_dims(b, b.abs(t), [r, r + 1], "maximum")
    smin = b.maximum(b.multiply(norm, H.const(b, eps, rt)),
                     b.broadcast(H.const(b, np.finfo(np.float32).tiny, rt), norm.shape.dims))

    def step(sb, s, state, consts):
        (x,) = state
        t, w, smin = consts
        k = sb.subtract(H.const(sb, n - 1, "s32"), s) if right else s
        rowdims = (*dims[:-2], 1, n)
        src = H.row(sb, t, k) if right else H.transpose(sb, H.column(sb, t, k))
        num = H.bmm(sb, src, x)                                           # [..., 1, n]
        tkk = H.expand(sb, H.entry(sb, t, k, k), rowdims)
        den = sb.subtract(tkk, sb.reshape(w, rowdims))
        tiny = H.cmp(sb, sb.abs(den), H.expand(sb, sb.reshape(smin, (*dims[:-2], 1, 1)),
                                               rowdims), "LT")
        den = sb.select(tiny, H.as_type(sb, H.expand(sb, sb.reshape(smin, (*dims[:-2], 1, 1)),
                                                      rowdims), et), den)
        val = sb.negate(sb.divide(num, den))
        jj = H.cols(sb, rowdims)
        kk = sb.broadcast(k, rowdims)
        newrow = sb.select(H.cmp(sb, jj, kk, "GT" if right else "LT"), val,
                           sb.select(H.cmp(sb, jj, kk, "EQ"),
                                     sb.broadcast(H.const(sb, 1, et), rowdims),
                                     H.zeros(sb, et, rowdims)))
        return [H.dupdate(sb, x, newrow, [0] * r + [k, 0])]
    (x,) = H.fori(b, n, [H.zeros(b, et, dims)], step, "geev_vectors", consts=[t, w, smin])
    return x


def normalize(b, v):
    """Unit-norm columns whose largest component (the first, by |.|^2) is real positive."""
    dims, et = v.shape.dims, v.shape.element_type
    r, rt = len(dims) - 2, H.REAL_OF[et]
    mag = H.abs2(b, v)
    nrm = b.sqrt(H.reduce_dims(b, mag, [r]))
    top = H.reduce_dims(b, mag, [r], "maximum")
    first = H.cmp(b, mag, b.broadcast(top, dims, list(range(r)) + [r + 1]), "EQ")
    idx = H.reduce_dims(b, b.select(first, H.rows(b, dims), b.broadcast(
        H.const(b, dims[-2], "s32"), dims)), [r], "minimum")
    big = H.reduce_dims(b, b.select(H.cmp(b, H.rows(b, dims), b.broadcast(
        idx, dims, list(range(r)) + [r + 1]), "EQ"), v, H.zeros(b, et, dims)), [r])
    absb = b.abs(big)
    safe = b.select(H.cmp(b, absb, H.zeros(b, rt, absb.shape.dims), "GT"), absb,
                    b.broadcast(H.const(b, 1, rt), absb.shape.dims))
    phase = b.divide(H.conj(b, big), H.as_type(b, safe, et))
    phase = b.select(H.cmp(b, absb, H.zeros(b, rt, absb.shape.dims), "GT"), phase,
                     b.broadcast(H.const(b, 1, et), absb.shape.dims))
    scale = b.divide(phase, H.as_type(b, b.select(H.cmp(b, nrm, H.zeros(b, rt, nrm.shape.dims),
                                                         "GT"), nrm, b.broadcast(
        H.const(b, 1, rt), nrm.shape.dims)), et))
    return b.multiply(v, b.broadcast(scale, dims, list(range(r)) + [r + 1]))


def geev(b, a, *, compute_left=78, compute_right=86, **_):
    dims, et = a.shape.dims, a.shape.element_type
    batch, n, r = dims[:-2], dims[-1], len(dims) - 2
    ct, rt = COMPLEX[et], H.REAL_OF[et]
    x = a if et == ct else H.as_type(b, a, ct)
    finite = H.reduce_dims(b, H.cmp(b, b.abs(x), b.broadcast(H.const(b, np.inf, rt), dims),
                                    "LT"), [r, r + 1], "and")
    x = b.select(b.broadcast(finite, dims, range(r)), x, H.zeros(b, ct, dims))
    h, z = _hessenberg(b, x, H.eye(b, ct, dims))
    t, z, hi = _schur(b, h, z, max(30 * n, 1))
    eye = H.cmp(b, H.rows(b, dims), H.cols(b, dims), "EQ")
    w = H.reduce_dims(b, b.select(eye, t, H.zeros(b, ct, dims)), [r + 1])
    fb = b.broadcast(finite, dims, range(r))
    zero = H.zeros(b, ct, dims)
    vr = vl = zero
    if char(compute_right, "V") == "V":
        vr = b.select(fb, normalize(b, H.bmm(b, z, _eigvecs_of_triangular(b, t, w, True))), zero)
    if char(compute_left, "N") == "V":
        yc = _eigvecs_of_triangular(b, t, w, False)
        vl = b.select(fb, normalize(b, H.bmm(b, z, H.conj(b, yc))), zero)
    wdims = (*batch, n)
    w = b.select(b.broadcast(finite, wdims, range(r)), w,
                 H.as_type(b, b.broadcast(H.const(b, np.nan, rt), wdims), ct))
    info = b.select(finite, b.select(H.cmp(b, hi, H.zeros(b, "s32", batch), "GT"),
                                     b.add(hi, b.broadcast(H.const(b, 1, "s32"), batch)),
                                     H.zeros(b, "s32", batch)),
                    b.broadcast(H.const(b, -4, "s32"), batch))
    vals = (b.real(w), b.imag(w)) if et != ct else (w,)
    return b.tuple(*vals, vl, vr, info)


def canonical_geev(outputs):
    """(w, vl, vr, info) with the eigen-triples sorted by (real part to 4 digits of the
    largest |w|, imaginary part) and each vector's phase fixed (largest entry real > 0)."""
    from ._decomp_eigh import phase_fixed
    outs = [np.asarray(o) for o in outputs]
    w = outs[0] + 1j * outs[1] if len(outs) == 5 else outs[0]
    vl, vr, info = outs[-3:]
    scale = np.maximum(np.nanmax(np.abs(w), axis=-1, keepdims=True), 1e-30) \
        if w.size else np.ones(w.shape[:-1] + (1,))
    key_re = np.round(w.real / scale, 4)
    order = np.lexsort((w.imag, key_re), axis=-1)
    w = np.take_along_axis(w, order, -1)
    vl = np.take_along_axis(vl, order[..., None, :], -1)
    vr = np.take_along_axis(vr, order[..., None, :], -1)
    return [w, phase_fixed(vl, axis=-2), phase_fixed(vr, axis=-2), info]
