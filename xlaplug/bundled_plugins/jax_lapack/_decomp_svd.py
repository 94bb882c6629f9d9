"""Decomposition of gesdd / gesvd: one-sided (Hestenes) Jacobi, as XLA's Jacobi SVD.

On X = A (m >= n) or X = A^H (m < n), so that X is M x N with M >= N: each sweep rotates
every column pair (p, q) by the Jacobi rotation of their Gram block [[|x_p|^2, x_p^H x_q],
[.., |x_q|^2]] (the eigh rotation, _decomp_eigh.rotation), until every pair is orthogonal
to eps relative to its norms.  Then sigma_j = |x_j|, U1 = X / sigma, V the accumulated
rotations, sorted by sigma descending.  The orthonormal completion (U's columns past
N in mode 'A', and any column whose sigma is 0) comes from the Householder QR of U1
(_decomp_qr): Q = H(1)...H(N) I keeps U1's span in its first columns and is orthogonal.
Singular vectors are LAPACK's up to a phase per singular pair, and the completion up to
a basis of its span: `canonical_svd` takes both out for check-plugins.
"""
from __future__ import annotations

import numpy as np

from . import _decomp_eigh as E
from . import _decomp_qr as Q
from . import _hlo as H
from ._common import char

MAX_SWEEPS = 30


def _gram_entries(sb, x, p, q):
    xp, xq = H.column(sb, x, p), H.column(sb, x, q)

    def dotc(u, v):  # [..., 1, 1]
        return H.bmm(sb, H.adjoint(sb, u), v)
    app, aqq = H.real(sb, dotc(xp, xp)), H.real(sb, dotc(xq, xq))
    return app, aqq, dotc(xp, xq)


def hestenes(b, x):
    """(sigma [..., N] descending, U1 [..., M, N], V [..., N, N]) with x = U1 diag(sigma) V^H."""
    dims, et = x.shape.dims, x.shape.element_type
    n, r, rt = dims[-1], len(dims) - 2, H.REAL_OF[et]
    vdims = (*dims[:-2], n, n)
    pairs = [(p, q) for p in range(n) for q in range(p + 1, n)]
    P = b.constant(np.array([p for p, _ in pairs] or [0], np.int32), "s32")
    Qs = b.constant(np.array([q for _, q in pairs] or [0], np.int32), "s32")
    eps2 = float(np.finfo(np.float32 if rt == "f32" else np.float64).eps) ** 2

    def rotate(sb, k, state, consts):
        xx, v = state
        pp, qq = consts
        p = sb.reshape(H.dslice(sb, pp, [k], (1,)), ())
        q = sb.reshape(H.dslice(sb, qq, [k], (1,)), ())
        G = E.rotation(sb, *_gram_entries(sb, xx, p, q), p, q, vdims)
        return [H.bmm(sb, xx, G), H.bmm(sb, v, G)]

    def cond(cb, vals):
        sweep, xx = vals[0], vals[1]
        g = H.bmm(cb, H.adjoint(cb, xx), xx)
        sq = H.abs2(cb, g)
        i, j = H.rows(cb, vdims), H.cols(cb, vdims)
        d = H.real(cb, cb.select(H.cmp(cb, i, j, "EQ"), g, H.zeros(cb, et, vdims)))
        dd = H.reduce_dims(cb, d, [r + 1])                            # [..., N]
        norms = cb.multiply(cb.broadcast(dd, vdims, list(range(r)) + [r]),
                            cb.broadcast(dd, vdims, list(range(r)) + [r + 1]))
        off = cb.select(H.cmp(cb, i, j, "NE"), sq, H.zeros(cb, rt, vdims))
        worst = H.reduce_dims(cb, cb.subtract(off, cb.multiply(norms, H.const(cb, eps2, rt))),
                              list(range(r + 2)), "maximum")
        more = H.cmp(cb, worst, H.const(cb, 0, rt), "GT")
        return cb.op("and", H.cmp(cb, sweep, H.const(cb, MAX_SWEEPS, "s32"), "LT"), more)

    def sweep(sb, vals):
        s, xx, v, pp, qq = vals
        xx, v = H.fori(sb, len(pairs), [xx, v], rotate, "svd_pairs", consts=[pp, qq])
        return [sb.add(s, H.const(sb, 1, "s32")), xx, v, pp, qq]

    _, x, v, _, _ = H.while_loop(b, [H.const(b, 0, "s32"), x, H.eye(b, et, vdims), P, Qs],
                                 cond, sweep, "svd_sweeps")
    sigma = b.sqrt(H.reduce_dims(b, H.abs2(b, x), [r]))             # [..., N]
    neg, perm_v = E.sort_ascending(b, b.negate(sigma), v)            # descending sigma
    _, u1 = E.sort_ascending(b, b.negate(sigma), x)
    sigma = b.negate(neg)
    sb_ = b.broadcast(sigma, dims, list(range(r)) + [r + 1])
    pos = H.cmp(b, sb_, H.zeros(b, rt, dims), "GT")
    safe = b.select(pos, sb_, b.broadcast(H.const(b, 1, rt), dims))
    u1 = b.select(pos, b.divide(u1, H.as_type(b, safe, et)), H.zeros(b, et, dims))
    return sigma, u1, perm_v


def complete(b, u1, full: bool):
    """u1 [..., M, N] (orthonormal columns, or zero where sigma is 0) as an orthonormal
    M x N (full: M x M) matrix keeping u1's nonzero columns."""
    dims, et = u1.shape.dims, u1.shape.element_type
    (m, n), r = dims[-2:], len(dims) - 2
    qr = Q.geqrf(b, u1)
    h, tau = b.get_tuple_element(qr, 0), b.get_tuple_element(qr, 1)
    if m > n:
        h = b.concatenate(h, H.zeros(b, et, (*dims[:-2], m, m - n)), dimensions=(r + 1,))
    q = Q.orgqr(b, h, tau)                                           # [..., M, M]
    lead = H.dslice(b, q, [0] * (r + 2), dims) if m > n else q
    zero_col = H.reduce_dims(b, H.cmp(b, H.abs2(b, u1), H.zeros(b, H.REAL_OF[et], dims), "EQ"),
                             [r], "and")
    econ = b.select(b.broadcast(zero_col, dims, list(range(r)) + [r + 1]), lead, u1)
    if not full or m == n:
        return econ
    rest = H.dslice(b, q, [0] * (r + 1) + [n], (*dims[:-2], m, m - n))
    return b.concatenate(econ, rest, dimensions=(r + 1,))


def gesdd(b, a, *, mode=65, result_shape=None, **_):
    """`result_shape`: the call's declared shape, which says (mode 'N' only) whether jax
    declared u and vt full or economy; without it, full."""
    dims, et = a.shape.dims, a.shape.element_type
    batch, (m, n), r = dims[:-2], dims[-2:], len(dims) - 2
    job = char(mode, "A")
    nan = H.reduce_dims(b, H.cmp(b, a, a, "NE"), [r, r + 1], "or")
    info = b.select(nan, b.broadcast(H.const(b, -4, "s32"), batch), H.zeros(b, "s32", batch))
    tall = m >= n
    sigma, u1, v = hestenes(b, a if tall else H.adjoint(b, a))
    if job == "N":
        full = (*batch, m, m), (*batch, n, n)
        declared = result_shape.tuple_shapes[2:4] if result_shape is not None else ()
        u_dims, vt_dims = (tuple(s.dims) for s in declared) if declared else full
        u, vt = H.zeros(b, et, u_dims), H.zeros(b, et, vt_dims)
    else:
        full = job == "A"
        if tall:
            u, vt = complete(b, u1, full), H.adjoint(b, v)
        else:
            u, vt = v, H.adjoint(b, complete(b, u1, full))
    return b.tuple(a, sigma, u, vt, info)


def canonical_svd(outputs):
    """(a, s, u, vt, info) with each singular pair's phase fixed by u's column (its
    largest entry real, positive; vt's row takes the inverse phase), and the columns of u
    (rows of vt) past min(m, n) replaced by the projector onto their span."""
    a, s, u, vt, info = (np.asarray(o) for o in outputs)
    k = s.shape[-1]
    uk, vk = u[..., :, :k], vt[..., :k, :]
    if uk.size and not np.all(uk == 0):
        top = np.take_along_axis(uk, np.argmax(np.abs(uk), axis=-2)[..., None, :], -2)
        with np.errstate(all="ignore"):
            ph = np.where(top == 0, 1, top / np.abs(top))
        uk, vk = uk / ph, vk * np.swapaxes(ph, -1, -2)
    u2, v2 = u[..., :, k:], vt[..., k:, :]
    pu = u2 @ np.conj(np.swapaxes(u2, -1, -2))
    pv = np.conj(np.swapaxes(v2, -1, -2)) @ v2
    return [a, s, uk, pu, vk, pv, info]
