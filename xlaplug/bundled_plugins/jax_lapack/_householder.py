"""Householder-based LAPACK routines in numpy, batched over a leading axis.

Every routine follows the reference LAPACK algorithm step by step (dlarfg's sign
convention, the order reflectors are generated and applied, which entries are left
alone), so the factors are LAPACK's representation, not just a valid one: jax feeds
them to orgqr/ormqr or reads them directly.  The blocked LAPACK drivers compute the
same reflectors; only rounding differs.

Arrays are logical matrices `(batch, rows, cols)`; all arithmetic stays in their dtype.
"""
from __future__ import annotations

import numpy as np


def nrm2(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """The 2-norm along `axis`, scaled like dnrm2 so that it neither overflows nor
    underflows."""
    mag = np.abs(x)
    if mag.shape[axis] == 0:
        return np.zeros(np.delete(mag.shape, axis % mag.ndim), mag.dtype)
    big = np.max(mag, axis=axis, keepdims=True)
    with np.errstate(all="ignore"):
        scaled = np.where(big > 0, mag / np.where(big > 0, big, 1), 0)
        out = np.squeeze(big, axis) * np.sqrt(np.sum(scaled * scaled, axis=axis))
    return np.where(np.isinf(np.squeeze(big, axis)), np.inf, out).astype(mag.dtype)


def larfg(alpha: np.ndarray, x: np.ndarray):
    """dlarfg / zlarfg on a batch: alpha (B,), x (B, r) -> (beta, tau, v).

    H = I - tau [1; v] [1; v]^H with H^H [alpha; x] = [beta; 0] and beta real.
    (LAPACK's rescaling loop for |beta| < safmin, ~1e-38 in f32, is not reproduced.)"""
    dt = x.dtype
    xnorm = nrm2(x) if x.shape[-1] else np.zeros(alpha.shape, np.finfo(dt).dtype)
    with np.errstate(all="ignore"):
        if np.iscomplexobj(x):
            ar, ai = alpha.real, alpha.imag
            trivial = (xnorm == 0) & (ai == 0)
            beta = -np.copysign(np.hypot(np.hypot(ar, ai), xnorm), ar)
            tau = ((beta - ar) / beta + 1j * (-ai / beta)).astype(dt)
        else:
            trivial = xnorm == 0
            beta = -np.copysign(np.hypot(alpha, xnorm), alpha)
            tau = ((beta - alpha) / beta).astype(dt)
        scale = (np.ones((), dt) / (alpha - beta)).astype(dt)
        v = x * scale[:, None]
    beta = np.where(trivial, alpha.real if np.iscomplexobj(x) else alpha, beta)
    tau = np.where(trivial, np.zeros((), dt), tau)
    v = np.where(trivial[:, None], x, v)
    return beta.astype(np.finfo(dt).dtype), tau, v


def _apply_left(c, v, tau):
    """c <- (I - tau v v^H) c ; c (B, r, k), v (B, r), tau (B,)."""
    w = np.einsum("br,brk->bk", v.conj(), c)
    c -= tau[:, None, None] * v[:, :, None] * w[:, None, :]


def _apply_right(c, v, tau):
    """c <- c (I - tau v v^H) ; c (B, k, r), v (B, r), tau (B,)."""
    w = np.einsum("bkr,br->bk", c, v)
    c -= tau[:, None, None] * w[:, :, None] * v.conj()[:, None, :]


def _reflector(a, i):
    """The i-th QR reflector's vector, rows i: of a (B, m, *): 1, then a[i+1:, i]."""
    v = a[:, i:, i].copy()
    v[:, 0] = 1
    return v


def geqrf(a: np.ndarray):
    """dgeqr2 on a batch (B, m, n): returns (a_out, tau)."""
    a = a.copy()
    b, m, n = a.shape
    k = min(m, n)
    tau = np.zeros((b, k), a.dtype)
    for i in range(k):
        beta, t, v = larfg(a[:, i, i], a[:, i + 1:, i])
        if i + 1 < n:
            vv = np.concatenate([np.ones((b, 1), a.dtype), v], axis=1)
            _apply_left(a[:, i:, i + 1:], vv, t.conj())
        a[:, i, i], a[:, i + 1:, i], tau[:, i] = beta, v, t
    return a, tau


def householder_product(a: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """orgqr / ungqr: the first n columns of Q = H(1) ... H(k)."""
    b, m, n = a.shape
    k = tau.shape[-1]
    q = np.zeros_like(a)
    q[:, np.arange(min(m, n)), np.arange(min(m, n))] = 1
    for i in range(k - 1, -1, -1):
        _apply_left(q[:, i:, :], _reflector(a, i), tau[:, i])
    return q


def apply_q(a, tau, c, left: bool, transpose: bool) -> np.ndarray:
    """ormqr / unmqr: Q c, Q^H c, c Q or c Q^H for Q = H(1) ... H(k) stored in (a, tau)."""
    c = c.copy()
    k = tau.shape[-1]
    taus = tau.conj() if transpose else tau
    forward = left == transpose       # Q^H c and c Q apply H(1) first
    order = range(k) if forward else range(k - 1, -1, -1)
    for i in order:
        v = _reflector(a, i)
        if left:
            _apply_left(c[:, i:, :], v, taus[:, i])
        else:
            _apply_right(c[:, :, i:], v, taus[:, i])
    return c


def gehrd(a: np.ndarray, ilo: int, ihi: int):
    """dgehd2: reduce to upper Hessenberg form; returns (a_out, tau)."""
    a = a.copy()
    b, n, _ = a.shape
    tau = np.zeros((b, max(n - 1, 0)), a.dtype)
    for i in range(ilo - 1, ihi - 1):
        beta, t, v = larfg(a[:, i + 1, i], a[:, i + 2:ihi, i])
        vv = np.concatenate([np.ones((b, 1), a.dtype), v], axis=1)
        _apply_right(a[:, :ihi, i + 1:ihi], vv, t)
        _apply_left(a[:, i + 1:ihi, i + 1:], vv, t.conj())
        a[:, i + 1, i] = beta
        a[:, i + 2:ihi, i] = v
        tau[:, i] = t
    return a, tau


def _hermitian_from(a, lower: bool):
    """The Hermitian matrix LAPACK sees when it reads only one triangle."""
    tri = np.tril(a) if lower else np.triu(a)
    full = tri + np.swapaxes(tri, -1, -2).conj()
    idx = np.arange(a.shape[-1])
    full[:, idx, idx] = a[:, idx, idx].real
    return full


def sytrd(a: np.ndarray, lower: bool):
    """dsytd2 / zhetd2: tridiagonal reduction; returns (a_out, d, e, tau)."""
    b, n, _ = a.shape
    h = _hermitian_from(a, lower)          # works on the full matrix, same arithmetic
    out = a.copy()
    rdt = np.finfo(a.dtype).dtype
    d = np.zeros((b, n), rdt)
    e = np.zeros((b, max(n - 1, 0)), rdt)
    tau = np.zeros((b, max(n - 1, 0)), a.dtype)
    half = np.asarray(0.5, rdt)
    steps = range(n - 1) if lower else range(n - 2, -1, -1)
    for i in steps:
        if lower:   # annihilate h[i+2:, i] with a reflector on rows/cols i+1:
            beta, t, v = larfg(h[:, i + 1, i], h[:, i + 2:, i])
            vv = np.concatenate([np.ones((b, 1), a.dtype), v], axis=1)
            sl = slice(i + 1, n)
        else:       # annihilate h[:i, i+1] with a reflector on rows/cols :i+1
            beta, t, v = larfg(h[:, i, i + 1], h[:, :i, i + 1])
            vv = np.concatenate([v, np.ones((b, 1), a.dtype)], axis=1)
            sl = slice(0, i + 1)
        sub = h[:, sl, sl]
        x = t[:, None] * np.einsum("brc,bc->br", sub, vv)
        alpha = -half * t * np.einsum("br,br->b", x.conj(), vv)
        w = x + alpha[:, None] * vv
        sub -= vv[:, :, None] * w.conj()[:, None, :] + w[:, :, None] * vv.conj()[:, None, :]
        idx = np.arange(sub.shape[-1])
        sub[:, idx, idx] = sub[:, idx, idx].real
        if lower:
            h[:, i + 1, i], h[:, i + 2:, i] = beta, v
            out[:, i + 1, i], out[:, i + 2:, i] = beta, v
            d[:, i] = h[:, i, i].real
        else:
            h[:, i, i + 1], h[:, :i, i + 1] = beta, v
            out[:, i, i + 1], out[:, :i, i + 1] = beta, v
            d[:, i + 1] = h[:, i + 1, i + 1].real
        e[:, i] = beta
        tau[:, i] = t
    last = n - 1 if lower else 0
    if n:
        d[:, last] = h[:, last, last].real
    idx = np.arange(n)
    out[:, idx, idx] = d
    return out, d, e, tau


def geqp3_one(a: np.ndarray, jpvt_in: np.ndarray):
    """dgeqp3 (with dlaqp2) on one matrix: returns (a_out, jpvt (1-based), tau)."""
    a = a.copy()
    m, n = a.shape
    k = min(m, n)
    rdt = np.finfo(a.dtype).dtype
    tau = np.zeros(k, a.dtype)
    jpvt = np.arange(1, n + 1, dtype=np.int32)
    nfxd = 0
    for j in range(n):                     # move the initial (fixed) columns to the front
        if jpvt_in[j] != 0:
            if j != nfxd:
                a[:, [j, nfxd]] = a[:, [nfxd, j]]
                jpvt[j], jpvt[nfxd] = jpvt[nfxd], j + 1
            nfxd += 1
    for i in range(min(nfxd, m)):          # plain QR of the fixed columns
        tau[i] = _qr_step(a, i, i)
    if nfxd >= k:
        return a, jpvt, tau
    vn1 = nrm2(a[nfxd:, nfxd:], axis=0).astype(rdt)
    vn1 = np.concatenate([np.zeros(nfxd, rdt), vn1])
    vn2 = vn1.copy()
    tol3z = np.sqrt(np.finfo(rdt).eps / 2).astype(rdt)
    for i in range(nfxd, k):               # dlaqp2 with offset = 0 in this layout
        cand = vn1[i:]
        safe = np.where(np.isnan(cand), -np.inf, cand)
        pvt = i + (0 if np.isnan(cand[0]) else int(np.argmax(safe)))
        if pvt != i:
            a[:, [pvt, i]] = a[:, [i, pvt]]
            jpvt[pvt], jpvt[i] = jpvt[i], jpvt[pvt]
            vn1[pvt], vn2[pvt] = vn1[i], vn2[i]
        tau[i] = _qr_step(a, i, i)
        # Downdate the partial norms of columns i+1:, recomputing those that cancelled.
        j = i + 1 + np.flatnonzero(vn1[i + 1:] != 0)
        with np.errstate(all="ignore"):
            temp = np.maximum(1 - (np.abs(a[i, j]).astype(rdt) / vn1[j]) ** 2, 0).astype(rdt)
            temp2 = temp * (vn1[j] / vn2[j]) ** 2
        redo = temp2 <= tol3z
        vn1[j[~redo]] = vn1[j[~redo]] * np.sqrt(temp[~redo])
        fresh = nrm2(a[i + 1:, j[redo]], axis=0).astype(rdt) if i + 1 < m else 0
        vn1[j[redo]] = fresh
        vn2[j[redo]] = fresh
    return a, jpvt, tau


def _qr_step(a, r, c):
    """One dgeqr2 step on a single matrix: reflector for a[r:, c], applied to a[r:, c+1:]."""
    beta, t, v = larfg(a[None, r, c], a[None, r + 1:, c])
    vv = np.concatenate([np.ones(1, a.dtype), v[0]])
    if c + 1 < a.shape[1]:
        blk = a[None, r:, c + 1:]
        _apply_left(blk, vv[None], t.conj())
    a[r, c], a[r + 1:, c] = beta[0], v[0]
    return t[0]
