"""Decompositions of the Householder family: geqrf, orgqr/ungqr, ormqr/unmqr.

The model is XLA's qr_expander.cc (one Householder reflector per column, applied to the
trailing columns with a dot), in LAPACK's representation, as dgeqr2 / dlarfg keep it:
H = I - tau v v^H with v = [1; a[j+1:, j]], beta = -sign(re alpha) |(alpha, x)| real on
the diagonal, tau = 0 (H = I) when there is nothing to annihilate.  orgqr and ormqr apply
the stored reflectors one per loop step in dorg2r's / dorm2r's order.  (dlarfg's rescaling
for |beta| < safmin, ~1e-38 in f32, is not reproduced, as in _householder.py.)
"""
from __future__ import annotations

from . import _hlo as H


def _reflector(sb, a, j):
    """v of reflector j (rows < j zero, 1 at j, then a[j+1:, j]) as a [..., m, 1] column."""
    c = H.column(sb, a, j)
    cd = c.shape.dims
    i, jj = H.rows(sb, cd), sb.broadcast(j, cd)
    one = sb.broadcast(H.const(sb, 1, c.shape.element_type), cd)
    return sb.select(H.cmp(sb, i, jj, "GT"), c,
                     sb.select(H.cmp(sb, i, jj, "EQ"), one, H.zeros(sb, c.shape.element_type, cd)))


def _apply_left(sb, v, tau, c):
    """(I - tau v v^H) c, tau per matrix [..., 1, 1]."""
    w = H.bmm(sb, H.adjoint(sb, v), c)                           # [..., 1, n]
    return sb.subtract(c, sb.multiply(H.expand(sb, tau, c.shape.dims), H.bmm(sb, v, w)))


def _apply_right(sb, v, tau, c):
    """c (I - tau v v^H)."""
    w = H.bmm(sb, c, v)                                          # [..., m, 1]
    return sb.subtract(c, sb.multiply(H.expand(sb, tau, c.shape.dims),
                                      H.bmm(sb, w, H.adjoint(sb, v))))


def _tau_at(sb, tau, j):
    """tau[..., j] as [..., 1, 1]."""
    batch = tau.shape.dims[:-1]
    t = H.dslice(sb, tau, [0] * len(batch) + [j], (*batch, 1))
    return sb.reshape(t, (*batch, 1, 1))


def larfg(sb, alpha, tail):
    """dlarfg / zlarfg: alpha [..., 1, 1] and the vector's tail x [..., m, 1] (zero outside
    it) -> (beta real, tau, v = the tail scaled; v = x and tau = 0 when there is nothing to
    annihilate).  H = I - tau [1; v] [1; v]^H has H^H [alpha; x] = [beta; 0]."""
    et = alpha.shape.element_type
    rt, r = H.REAL_OF[et], alpha.shape.rank - 2
    batch, cd = alpha.shape.dims[:-2], tail.shape.dims
    xnorm = sb.reshape(sb.sqrt(H.reduce_dims(sb, H.abs2(sb, tail), [r])), (*batch, 1, 1))
    ar = H.real(sb, alpha)
    zero = H.const(sb, 0, rt)
    trivial = H.cmp(sb, xnorm, sb.broadcast(zero, xnorm.shape.dims), "EQ")
    if H.is_complex(alpha):
        ai = sb.imag(alpha)
        trivial = sb.op("and", trivial, H.cmp(sb, ai, sb.broadcast(zero, ai.shape.dims), "EQ"))
    norm = sb.sqrt(sb.add(H.abs2(sb, alpha), sb.multiply(xnorm, xnorm)))
    neg = H.cmp(sb, ar, sb.broadcast(zero, ar.shape.dims), "LT")
    beta = sb.select(neg, norm, sb.negate(norm))                     # -copysign(norm, re)
    if H.is_complex(alpha):
        t = sb.complex(sb.divide(sb.subtract(beta, ar), beta), sb.divide(sb.negate(ai), beta))
    else:
        t = sb.divide(sb.subtract(beta, alpha), beta)
    t = sb.select(trivial, H.zeros(sb, et, t.shape.dims), t)
    beta = sb.select(trivial, ar, beta)
    scale = sb.divide(H.const(sb, 1, et), sb.subtract(alpha, H.as_type(sb, beta, et)))
    v = sb.select(H.expand(sb, trivial, cd), tail, sb.multiply(tail, H.expand(sb, scale, cd)))
    return beta, t, v


def between(sb, dims, dim: int, lo, hi):
    """iota along `dim` of `dims` in [lo, hi) (s32 scalars or ints)."""
    i = H.iota(sb, dims, dim)
    lo = sb.broadcast(lo if not isinstance(lo, int) else H.const(sb, lo, "s32"), dims)
    hi = sb.broadcast(hi if not isinstance(hi, int) else H.const(sb, hi, "s32"), dims)
    return sb.op("and", H.cmp(sb, i, lo, "GE"), H.cmp(sb, i, hi, "LT"))


def householder_step(sb, x, j):
    """dgeqr2's step j: the reflector of x[j:, j], applied to the columns after j and
    stored in column j (beta on the diagonal, v below).  Returns (x, tau [..., 1, 1])."""
    dims, et = x.shape.dims, x.shape.element_type
    r = len(dims) - 2
    c = H.column(sb, x, j)
    cd = c.shape.dims
    i, jj = H.rows(sb, cd), sb.broadcast(j, cd)
    tail = sb.select(H.cmp(sb, i, jj, "GT"), c, H.zeros(sb, et, cd))
    beta, t, v = larfg(sb, H.entry(sb, x, j, j), tail)
    one = sb.broadcast(H.const(sb, 1, et), cd)
    vfull = sb.select(H.cmp(sb, i, jj, "EQ"), one, v)
    applied = _apply_left(sb, vfull, H.conj(sb, t), x)
    later = H.cmp(sb, H.cols(sb, dims), sb.broadcast(j, dims), "GT")
    x = sb.select(later, applied, x)
    newcol = sb.select(H.cmp(sb, i, jj, "EQ"), H.expand(sb, H.as_type(sb, beta, et), cd),
                       sb.select(H.cmp(sb, i, jj, "GT"), v, c))
    return H.dupdate(sb, x, newcol, [0] * (r + 1) + [j]), t


def geqrf(b, a, **_):
    dims, et = a.shape.dims, a.shape.element_type
    batch, (m, n), r = dims[:-2], dims[-2:], len(dims) - 2

    def step(sb, j, state, consts):
        x, tau = state
        x, t = householder_step(sb, x, j)
        return [x, H.dupdate(sb, tau, sb.reshape(t, (*batch, 1)), [0] * r + [j])]

    x, tau = H.fori(b, min(m, n), [a, H.zeros(b, et, (*batch, min(m, n)))], step, "geqrf")
    return b.tuple(x, tau)


def orgqr(b, a, tau, **_):
    """The first n columns of Q = H(1) ... H(k), built from I by H(k) first (dorg2r)."""
    dims, et = a.shape.dims, a.shape.element_type
    k = tau.shape.dims[-1]

    def step(sb, s, state, consts):
        (q,) = state
        x, t = consts
        j = sb.subtract(H.const(sb, k - 1, "s32"), s)
        return [_apply_left(sb, _reflector(sb, x, j), _tau_at(sb, t, j), q)]
    (q,) = H.fori(b, k, [H.eye(b, et, dims)], step, "orgqr", consts=[a, tau])
    return q


def ormqr(b, a, tau, c, *, left=True, transpose=False, **_):
    """Q c, Q^H c, c Q or c Q^H for Q = H(1) ... H(k) (dorm2r's order)."""
    k = tau.shape.dims[-1]
    left, transpose = bool(left), bool(transpose)
    forward = left == transpose                    # Q^H c and c Q apply H(1) first

    def step(sb, s, state, consts):
        (y,) = state
        x, t = consts
        j = s if forward else sb.subtract(H.const(sb, k - 1, "s32"), s)
        tj = _tau_at(sb, t, j)
        if transpose:
            tj = H.conj(sb, tj)
        v = _reflector(sb, x, j)
        return [_apply_left(sb, v, tj, y) if left else _apply_right(sb, v, tj, y)]
    (y,) = H.fori(b, k, [c], step, "ormqr", consts=[a, tau])
    return y
