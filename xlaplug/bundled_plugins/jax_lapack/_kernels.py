"""The kernels: one per LAPACK routine, shared by its s/d/c/z targets.

A kernel gets the operands as numpy arrays holding the logical values (the column-major
`{0,1}` layouts JAX asks for only describe how XLA stores them; LAPACK's column-major
view of that storage is exactly the logical matrix), then one preallocated output per
result leaf, then the backend_config attributes.  Leading dimensions are batch
dimensions.  Where numpy wraps the very LAPACK routine XLA:CPU calls (potrf, syevd /
heevd, gesdd, geev, geqrf), the kernel uses it, through numpy's gufuncs in the operand's
own precision when numpy has that loop; the others follow LAPACK's reference algorithm.
"""
from __future__ import annotations

import numpy as np

from . import _householder as hh
from . import _solvers as sv
from ._common import _bad, _gufunc, _mats, _put, _rows, char


# ---- potrf ------------------------------------------------------------------------------

def _potrf_info(h: np.ndarray) -> int:
    """dpotf2's INFO for one Hermitian matrix: the first leading minor not positive."""
    L = np.zeros_like(h)
    for j in range(h.shape[0]):
        ajj = (h[j, j] - np.vdot(L[j, :j], L[j, :j])).real
        if not ajj > 0:
            return j + 1
        L[j, j] = np.sqrt(ajj)
        L[j + 1:, j] = (h[j + 1:, j] - L[j + 1:, :j] @ L[j, :j].conj()) / L[j, j]
    return 0


def potrf(a, a_out, info, *, uplo=76, **_):
    x = _mats(a)
    lower = char(uplo, "L") == "L"
    src = x if lower else np.swapaxes(x, -1, -2).conj()     # U = chol_lower(A^H)^H
    with np.errstate(all="ignore"):
        fac = _gufunc("cholesky_lo", np.ascontiguousarray(src), np.linalg.cholesky)
    if fac is None:
        fac = np.full_like(src, np.nan)
    fac = fac.astype(x.dtype)
    failed = _bad(fac)
    inf = np.zeros(x.shape[0], np.int32)
    for i in np.flatnonzero(failed):
        h = np.tril(src[i]) + np.tril(src[i], -1).conj().T
        inf[i] = _potrf_info(h.astype(np.complex128 if x.dtype.kind == "c" else np.float64)) or 1
    tri = np.tril(np.ones(x.shape[-2:], bool))
    if not lower:
        fac, tri = np.swapaxes(fac, -1, -2).conj(), tri.T
    _put(a_out, np.where(tri, fac, x))    # LAPACK leaves the other triangle alone
    _put(info, inf)


# ---- getrf / trsm -----------------------------------------------------------------------

def getrf(a, a_out, ipiv, info, **_):
    lu, piv, inf = sv.getrf(_mats(a))
    _put(a_out, lu)
    _put(ipiv, piv)
    _put(info, inf)


def trsm(a, b, *rest, side=76, uplo=76, trans_x=78, diag=78, **_):
    """Operands (a, b) or (a, b, alpha); one result."""
    alpha = np.asarray(rest[0]) if len(rest) == 2 else None
    out = rest[-1]
    x = sv.trsm(_mats(a), _mats(b), char(side, "L"), char(uplo, "L"), char(trans_x, "N"),
                char(diag, "N"), alpha)
    _put(out, x)


# ---- syevd / heevd ----------------------------------------------------------------------

def syevd(a, v_out, w_out, info, *, uplo=76, mode=86, **_):
    x = _mats(a)
    tag = "lo" if char(uplo, "L") == "L" else "up"
    vectors = char(mode, "V") == "V"
    if vectors:
        res = _gufunc(f"eigh_{tag}", x, lambda y: np.linalg.eigh(y, UPLO=tag[0].upper()))
        w, v = res if res is not None else (None, None)
    else:
        w = _gufunc(f"eigvalsh_{tag}", x, lambda y: np.linalg.eigvalsh(y, UPLO=tag[0].upper()))
        v = x                              # jobz = 'N' destroys A; jax ignores it
    if w is None:
        w = np.full(x.shape[:-1], np.nan)
        v = np.full_like(x, np.nan)
    _put(v_out, np.asarray(v).astype(v_out.dtype))
    _put(w_out, np.asarray(w).astype(w_out.dtype))
    _put(info, (_bad(np.asarray(w), np.asarray(v)) if vectors else _bad(np.asarray(w)))
         .astype(np.int32))


# ---- QR family --------------------------------------------------------------------------

def geqrf(a, a_out, tau, *extra, **_):
    """Householder QR in LAPACK's representation (numpy's raw mode calls ?geqrf)."""
    x = _mats(a)
    wide = x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)
    try:
        if min(x.shape[-2:]) == 0:
            raise np.linalg.LinAlgError("empty")
        with np.errstate(all="ignore"):
            h, t = np.linalg.qr(wide, mode="raw")
        h = np.swapaxes(h, -1, -2)
    except np.linalg.LinAlgError:          # the same algorithm, unblocked, in numpy
        h, t = hh.geqrf(x)
    _put(a_out, h.astype(a_out.dtype))
    _put(tau, t.astype(tau.dtype))
    for e in extra:                        # an info result, if the call declares one
        e[...] = 0


def orgqr(a, tau, q_out, *extra, **_):
    x = _mats(a)
    t = _rows(tau, x.shape[0])
    _put(q_out, hh.householder_product(x, t))
    for e in extra:
        e[...] = 0


def ormqr(a, tau, c, c_out, *extra, left=True, transpose=False, **_):
    x = _mats(a)
    t = _rows(tau, x.shape[0])
    _put(c_out, hh.apply_q(x, t, _mats(c), bool(left), bool(transpose)))
    for e in extra:
        e[...] = 0


def geqp3(a, jpvt, a_out, jpvt_out, tau, *extra, **_):
    x = _mats(a)
    jp = _rows(jpvt, x.shape[0])
    res = [hh.geqp3_one(x[i], jp[i]) for i in range(x.shape[0])]
    _put(a_out, np.stack([r[0] for r in res]) if res else x)
    _put(jpvt_out, np.stack([r[1] for r in res]) if res else jp)
    _put(tau, np.stack([r[2] for r in res]) if res else np.zeros(tau.shape, tau.dtype))
    for e in extra:
        e[...] = 0


# ---- SVD --------------------------------------------------------------------------------

def gesdd(a, a_out, s, u, vt, info, *, mode=65, **_):
    """?gesdd through numpy (which calls ?gesdd).  Also serves ?gesvd: the singular
    values agree; singular vectors agree up to the usual sign/phase freedom."""
    x = _mats(a)
    job = char(mode, "A")
    if job not in "ASN":
        raise NotImplementedError(f"SVD computation mode '{job}' is not supported "
                                  "(XLA:CPU's kernel refuses it too)")
    has_nan = np.isnan(x).any(axis=(-2, -1))   # ?gesdd's INFO = -4
    if job == "N":
        sv_ = _gufunc("svd", x, lambda y: np.linalg.svd(y, compute_uv=False))
        uu = vv = None
    else:
        res = _gufunc(f"svd_{'f' if job == 'A' else 's'}", x,
                      lambda y: np.linalg.svd(y, full_matrices=job == "A"))
        uu, sv_, vv = res if res is not None else (None, None, None)
    if sv_ is None:
        sv_ = np.full(x.shape[:1] + (min(x.shape[-2:]),), np.nan)
    sv_ = np.asarray(sv_)
    _put(a_out, x)                         # ?gesdd destroys A; jax ignores it
    _put(s, sv_.astype(s.dtype))
    _put(u, np.zeros(u.shape, u.dtype) if uu is None else np.asarray(uu).astype(u.dtype))
    _put(vt, np.zeros(vt.shape, vt.dtype) if vv is None else np.asarray(vv).astype(vt.dtype))
    failed = _bad(sv_) if uu is None else _bad(sv_, uu, vv)
    _put(info, np.where(has_nan, -4, failed.astype(np.int32)))


# ---- Hessenberg, tridiagonal ------------------------------------------------------------

def gehrd(a, a_out, tau, info, *, low=1, high=None, **_):
    x = _mats(a)
    n = x.shape[-1]
    ilo = max(int(low), 1) if n else 1
    ihi = min(int(high), n) if high is not None else n
    h, t = hh.gehrd(x, ilo, ihi)
    _put(a_out, h)
    _put(tau, t)
    _put(info, np.zeros(info.shape, np.int32))


def sytrd(a, a_out, d, e, tau, info, *, uplo=76, **_):
    out, dd, ee, tt = hh.sytrd(_mats(a), char(uplo, "L") == "L")
    _put(a_out, out)
    _put(d, dd)
    _put(e, ee)
    _put(tau, tt)
    _put(info, np.zeros(info.shape, np.int32))


def gtsv(dl, d, du, b, dl_out, d_out, du_out, b_out, info, **_):
    bb = _mats(b)
    nb, n = bb.shape[0], bb.shape[-2]
    parts = [np.asarray(v).reshape(nb, n) for v in (dl, d, du)]
    inf = np.zeros(nb, np.int32)
    outs = [np.array(p) for p in parts] + [bb.copy()]
    for i in range(nb):
        *vals, code = sv.gtsv_one(parts[0][i], parts[1][i], parts[2][i], bb[i])
        for o, v in zip(outs, vals):
            o[i] = v
        inf[i] = code
    for o, v in zip((dl_out, d_out, du_out, b_out), outs):
        _put(o, v)
    _put(info, inf)
