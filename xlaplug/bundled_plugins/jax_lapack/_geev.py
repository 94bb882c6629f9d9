"""geev: eigenvalues and right / left eigenvectors of a general matrix.

Right eigenvectors and eigenvalues come from numpy's wrapper of ?geev itself.  numpy has
no left-eigenvector option, so VL is built from the right eigenvectors of A^H, matched to
A's eigenvalues and normalised as ?geev normalises VL (see _left_vectors).
"""
from __future__ import annotations

import numpy as np

from ._common import _bad, _gufunc, _mats, _put, char


def _normalize_like_geev(v: np.ndarray) -> np.ndarray:
    """Unit 2-norm columns whose largest component (first, by re^2 + im^2) is real."""
    with np.errstate(all="ignore"):
        v = v / np.linalg.norm(v, axis=-2, keepdims=True)
        mag = (v * v.conj()).real
        k = np.argmax(mag, axis=-2)
        big = np.take_along_axis(v, k[..., None, :], axis=-2)
        phase = big.conj() / np.abs(big)
        return np.where(np.abs(big) > 0, v * phase, v)


def _pair(w: np.ndarray, w2: np.ndarray) -> np.ndarray:
    """perm with w2[perm] ~ w: greedy nearest matching, closest pairs first."""
    dist = np.abs(w[:, None] - w2[None, :])
    dist = np.where(np.isnan(dist), np.inf, dist)
    perm = -np.ones(len(w), int)
    used = np.zeros(len(w2), bool)
    for flat in np.argsort(dist, axis=None, kind="stable"):
        i, j = divmod(int(flat), len(w2))
        if perm[i] < 0 and not used[j]:
            perm[i], used[j] = j, True
    return perm


def _left_vectors(x, w, vr, real: bool):
    """geev's VL: right eigenvectors of A^H matched to w, normalised as dgeev/zgeev do.

    Complex data: unit norm, largest component real positive (unique).  Real data, real
    eigenvalue: unit norm with u^T v > 0, the sign dtrevc's back-substitution gives
    (x(k) = y(k) = 1 in the Schur basis).  Real data, complex pair: unit norm, largest
    component real; its sign is dlartg's on LAPACK's own intermediate, not reproduced."""
    wl, vvl = _eig(x.T.conj()[None], True)
    vl = vvl[0][:, _pair(w, wl[0].conj())]
    if not real:
        return _normalize_like_geev(vl)
    for c in range(len(w)):
        if w[c].imag == 0:
            if np.vdot(vl[:, c], vr[:, c]).real < 0:
                vl[:, c] = -vl[:, c]
        elif w[c].imag > 0 and c + 1 < len(w):   # LAPACK's conjugate-pair layout
            vl[:, c + 1] = vl[:, c].conj()
    return vl


def _eig(x: np.ndarray, vectors: bool):
    cdt = np.complex128 if x.dtype in (np.float64, np.complex128) else np.complex64
    if vectors:
        res = _gufunc("eig", x, np.linalg.eig)
        if res is None:
            return None, None
        w, v = res
        return np.asarray(w).astype(cdt), np.asarray(v).astype(cdt)
    w = _gufunc("eigvals", x, np.linalg.eigvals)
    return (None, None) if w is None else (np.asarray(w).astype(cdt), None)


def geev(a, *outs, compute_left=78, compute_right=86, **_):
    """Real targets: (wr, wi, vl, vr, info); complex targets: (w, vl, vr, info)."""
    x = _mats(a)
    real = x.dtype.kind == "f"
    left, right = char(compute_left, "N") == "V", char(compute_right, "V") == "V"
    nb, n = x.shape[0], x.shape[-1]
    cdt = outs[-2].dtype
    w = np.full((nb, n), np.nan, cdt)
    vl = np.zeros((nb, n, n), cdt)
    vr = np.zeros((nb, n, n), cdt)
    info = np.zeros(nb, np.int32)
    finite = np.isfinite(x).all(axis=(-2, -1))
    info[~finite] = -4                     # XLA's kernel refuses non-finite input
    ok = np.flatnonzero(finite)
    if ok.size:
        ww, vv = _eig(x[ok], right or left)
        if ww is None:
            info[ok] = 1
        else:
            w[ok] = ww
            if right:
                vr[ok] = vv
            if left:
                for j, i in enumerate(ok):
                    vl[i] = _left_vectors(x[i], w[i], vv[j], real)
            info[ok] = np.where(_bad(w[ok], vr[ok]) if right else _bad(w[ok]), 1, 0)
    if real:
        wr, wi, vl_out, vr_out, info_out = outs
        _put(wr, w.real.astype(wr.dtype))
        _put(wi, w.imag.astype(wi.dtype))
    else:
        w_out, vl_out, vr_out, info_out = outs
        _put(w_out, w)
    _put(vl_out, vl)
    _put(vr_out, vr)
    _put(info_out, info)
