"""Decomposition of syevd / heevd: cyclic Jacobi, as XLA's eigh_expander.cc.

The Hermitian matrix is rebuilt from the triangle `uplo` names (its diagonal's real part,
as LAPACK reads it).  Each sweep rotates every pair (p, q), p < q, in row-cyclic order:
with apq = |apq| e, the rotation G = [[c, s e], [-s conj(e), c]] (Golub & Van Loan's
symmetric Schur 2x2, after a phase that makes apq real) zeroes h[p, q] in G^H h G, and
V accumulates V G.  Sweeps stop when the off-diagonal mass is below eps^2 of the whole
(every matrix of the batch) or after MAX_SWEEPS.  Eigenvalues come out ascending, as
LAPACK's, with their vectors; each vector is LAPACK's up to a sign (a phase, complex),
which `canonical_eigh` takes out when check-plugins compares the two.
"""
from __future__ import annotations

import numpy as np

from xlaplug.hlo.ir import Computation, Instruction, Shape

from . import _hlo as H
from ._common import char

MAX_SWEEPS = 30  # quadratic convergence: ~6-10 sweeps suffice for n <= 100


def hermitian_from(b, a, lower: bool):
    dims, et = a.shape.dims, a.shape.element_type
    i, j = H.rows(b, dims), H.cols(b, dims)
    t = b.select(H.cmp(b, i, j, "GT" if lower else "LT"), a, H.zeros(b, et, dims))
    d = b.select(H.cmp(b, i, j, "EQ"), H.as_type(b, H.real(b, a), et), H.zeros(b, et, dims))
    return b.add(b.add(t, H.adjoint(b, t)), d)


def _rotation(sb, h, p, q):
    """G (as a full matrix) that zeroes h[p, q] in G^H h G."""
    app, aqq = H.real(sb, H.entry(sb, h, p, p)), H.real(sb, H.entry(sb, h, q, q))
    return rotation(sb, app, aqq, H.entry(sb, h, p, q), p, q, h.shape.dims)


def rotation(sb, app, aqq, apq, p, q, dims):
    """The Jacobi rotation of the 2x2 Hermitian [[app, apq], [conj(apq), aqq]] (real
    app, aqq; [..., 1, 1] each) placed at rows and columns p, q of an identity `dims`."""
    et = apq.shape.element_type
    rt = H.REAL_OF[et]
    g = sb.abs(apq)
    one, zero_r = H.const(sb, 1, rt), H.const(sb, 0, rt)
    zero = H.cmp(sb, g, sb.broadcast(zero_r, g.shape.dims), "EQ")
    gs = sb.select(zero, sb.broadcast(one, g.shape.dims), g)
    tau = sb.divide(sb.subtract(aqq, app), sb.multiply(gs, H.const(sb, 2, rt)))
    gd = g.shape.dims
    sign = sb.select(H.cmp(sb, tau, sb.broadcast(zero_r, gd), "GE"), sb.broadcast(one, gd),
                     sb.broadcast(H.const(sb, -1, rt), gd))
    t = sb.divide(sign, sb.add(sb.abs(tau), sb.sqrt(sb.add(sb.multiply(tau, tau), one))))
    c = sb.rsqrt(sb.add(sb.multiply(t, t), one))
    s = sb.multiply(t, c)
    c = sb.select(zero, sb.broadcast(one, g.shape.dims), c)
    s = sb.select(zero, sb.broadcast(zero_r, g.shape.dims), s)
    e = sb.divide(apq, H.as_type(sb, gs, et))
    se = sb.multiply(H.as_type(sb, s, et), e)
    i, j = H.rows(sb, dims), H.cols(sb, dims)
    pb, qb = sb.broadcast(p, dims), sb.broadcast(q, dims)

    def at(x, y):
        return sb.op("and", H.cmp(sb, i, x, "EQ"), H.cmp(sb, j, y, "EQ"))
    diag = sb.op("or", at(pb, pb), at(qb, qb))
    G = sb.select(diag, H.expand(sb, H.as_type(sb, c, et), dims), H.eye(sb, et, dims))
    G = sb.select(at(pb, qb), H.expand(sb, se, dims), G)
    return sb.select(at(qb, pb), H.expand(sb, sb.negate(H.conj(sb, se)), dims), G)


def _off_and_total(sb, h):
    """Sum of |h_ij|^2 off the diagonal and over all, across the batch: two scalars."""
    dims = h.shape.dims
    sq = H.abs2(sb, h)
    off = sb.select(H.cmp(sb, H.rows(sb, dims), H.cols(sb, dims), "NE"), sq,
                    H.zeros(sb, sq.shape.element_type, dims))
    every = list(range(len(dims)))
    return H.reduce_dims(sb, off, every), H.reduce_dims(sb, sq, every)


def jacobi(b, h):
    """(eigenvalues in h's diagonal order [..., n] real, eigenvectors V [..., n, n])."""
    dims, et = h.shape.dims, h.shape.element_type
    n, r, rt = dims[-1], len(dims) - 2, H.REAL_OF[et]
    pairs = [(p, q) for p in range(n) for q in range(p + 1, n)]
    P = b.constant(np.array([p for p, _ in pairs] or [0], np.int32), "s32")
    Q = b.constant(np.array([q for _, q in pairs] or [0], np.int32), "s32")
    eps2 = float(np.finfo(np.float32 if rt == "f32" else np.float64).eps) ** 2

    def rotate(sb, k, state, consts):
        hh, v = state
        pp, qq = consts
        p = sb.reshape(H.dslice(sb, pp, [k], (1,)), ())
        q = sb.reshape(H.dslice(sb, qq, [k], (1,)), ())
        G = _rotation(sb, hh, p, q)
        hh = H.bmm(sb, H.adjoint(sb, G), H.bmm(sb, hh, G))
        return [hh, H.bmm(sb, v, G)]

    def cond(cb, vals):
        sweep, hh = vals[0], vals[1]
        off, tot = _off_and_total(cb, hh)
        more = H.cmp(cb, off, cb.multiply(tot, H.const(cb, eps2, rt)), "GT")
        return cb.op("and", H.cmp(cb, sweep, H.const(cb, MAX_SWEEPS, "s32"), "LT"), more)

    def sweep(sb, vals):
        s, hh, v, pp, qq = vals
        hh, v = H.fori(sb, len(pairs), [hh, v], rotate, "jacobi_pairs", consts=[pp, qq])
        return [sb.add(s, H.const(sb, 1, "s32")), hh, v, pp, qq]

    _, h, v, _, _ = H.while_loop(b, [H.const(b, 0, "s32"), h, H.eye(b, et, dims), P, Q],
                                 cond, sweep, "jacobi_sweeps")
    w = H.reduce_dims(b, b.select(H.cmp(b, H.rows(b, dims), H.cols(b, dims), "EQ"), H.real(b, h),
                                  H.zeros(b, rt, dims)), [r + 1])
    return w, v


def _less_than(b, etype: str) -> Computation:
    """sort's comparator on (key, index) pairs: by key, ascending."""
    ps = [Instruction(f"lt.p{k}", "parameter", Shape.array(t, ()), parameter_number=k)
          for k, t in enumerate((etype, etype, "s32", "s32"))]
    root = Instruction("lt.r", "compare", Shape.array("pred", ()), [ps[0], ps[1]],
                       {"direction": H.Word("LT")})
    comp = Computation(b._uniq("eigh_less_than") if b._uniq else b._name("eigh_less_than"),
                       [*ps, root], root)
    b.computations.append(comp)
    return comp


def sort_ascending(b, w, v):
    """w ascending along its last dimension, v's columns in the same order."""
    r = v.shape.rank - 2
    dims = (*w.shape.dims, w.shape.dims[-1])                 # the permutation matrix's
    idx = H.iota(b, w.shape.dims, r)
    s = b.op("sort", w, idx, dimensions=(r,), is_stable=True,
             to_apply=_less_than(b, w.shape.element_type))
    ws, perm = b.get_tuple_element(s, 0), b.get_tuple_element(s, 1)
    pick = H.cmp(b, H.rows(b, dims), b.broadcast(perm, dims, list(range(r)) + [r + 1]), "EQ")
    pm = H.as_type(b, b.convert(pick, H.REAL_OF[v.shape.element_type]), v.shape.element_type)
    return ws, H.bmm(b, v, pm)


def _all_nan(b, x, from_dim: int):
    """Per matrix: is every entry NaN (numpy's mark of a failed LAPACK call)?  An empty
    result has not failed."""
    dims = x.shape.dims
    if not int(np.prod(dims[from_dim:], dtype=np.int64)):
        return b.broadcast(H.const(b, False, "pred"), dims[:from_dim])
    nan = H.cmp(b, x, x, "NE")
    return H.reduce_dims(b, nan, list(range(from_dim, len(dims))), "and")


def syevd(b, a, *, uplo=76, mode=86, **_):
    r = a.shape.rank - 2
    h = hermitian_from(b, a, char(uplo, "L") == "L")
    w, v = sort_ascending(b, *jacobi(b, h))
    bad = _all_nan(b, w, r)
    vectors = char(mode, "V") == "V"
    if vectors:
        bad = b.op("and", bad, _all_nan(b, v, r))
    return b.tuple(v if vectors else a, w, b.convert(bad, "s32"))


def canonical_eigh(outputs):
    """(v, w, info) with each eigenvector column scaled so its largest entry is real and
    positive: the vectors LAPACK and the decomposition give then agree."""
    v, w, info = (np.asarray(o) for o in outputs)
    return [phase_fixed(v, axis=-2), w, info]


def phase_fixed(v, axis):
    """v divided, along `axis`, by the phase of its largest-magnitude entry there."""
    if v.size == 0:
        return v
    k = np.argmax(np.abs(v), axis=axis)
    top = np.take_along_axis(v, np.expand_dims(k, axis), axis)
    with np.errstate(all="ignore"):
        ph = np.where(top == 0, 1, top / np.abs(top))
    return v / ph
