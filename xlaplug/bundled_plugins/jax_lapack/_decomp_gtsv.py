"""Decomposition of gtsv (tridiagonal solve), as dgtsv / zgtsv and _solvers.gtsv_one.

Gaussian elimination with partial pivoting down the band: at step i rows i and i+1 are
swapped when |low[i]| > |d[i]| (|re| + |im| for complex), which fills the second
superdiagonal into dl's slot; then back substitution.  LAPACK returns at the first zero
pivot with info = its 1-based row and the arrays as they stand; here each matrix of the
batch freezes its state once its info is set (every step is a select on `info == 0`).
Vectors are jax's: dl[0] and du[n-1] unused, so LAPACK's DL(i) is dl[i+1].
"""
from __future__ import annotations

from . import _hlo as H


def _at(sb, v, i, vec: bool):
    dims = v.shape.dims
    if vec:
        return H.dslice(sb, v, [0] * (len(dims) - 1) + [i], (*dims[:-1], 1))
    return H.row(sb, v, i)


def _put(sb, v, i, value, active, vec: bool):
    """v with entry (row) i set to `value` where `active` (per matrix, [..., 1])."""
    old = _at(sb, v, i, vec)
    keep = H.expand(sb, active if vec else sb.reshape(active, (*active.shape.dims, 1)),
                    old.shape.dims)
    new = sb.select(keep, value, old)
    starts = [0] * (v.shape.rank - 1) + [i] if vec else [0] * (v.shape.rank - 2) + [i, 0]
    return H.dupdate(sb, v, new, starts)


def _cabs1(sb, x):
    return sb.add(sb.abs(sb.real(x)), sb.abs(sb.imag(x))) if H.is_complex(x) else sb.abs(x)


def gtsv(b, dl, d, du, rhs, **_):
    et = d.shape.element_type
    batch, n = d.shape.dims[:-1], d.shape.dims[-1]
    one_b = (*batch, 1)
    zero = H.zeros(b, et, one_b)

    def c(sb, k):
        return H.const(sb, k, "s32")

    def step(sb, i, state, consts):
        dl, d, du, x, info = state
        z = H.zeros(sb, et, one_b)
        active = H.cmp(sb, sb.reshape(info, one_b), H.zeros(sb, "s32", one_b), "EQ")
        i1 = sb.add(i, c(sb, 1))
        low, di, di1, dui = (_at(sb, dl, i1, True), _at(sb, d, i, True), _at(sb, d, i1, True),
                             _at(sb, du, i, True))
        dui1 = _at(sb, du, sb.add(i, c(sb, 1)), True)
        not_last = sb.broadcast(H.cmp(sb, i, c(sb, n - 2), "LT"), one_b)
        skip = H.cmp(sb, low, z, "EQ") if H.is_complex(d) else sb.broadcast(
            H.const(sb, False, "pred"), one_b)
        keep = H.cmp(sb, _cabs1(sb, di), _cabs1(sb, low), "GE")
        fail = sb.op("and", H.cmp(sb, di, z, "EQ"), sb.op("or", skip, keep))
        go = sb.op("and", active, sb.op("not", sb.op("or", skip, fail)))
        ok_swap = sb.op("and", go, sb.op("not", keep))
        info = sb.select(sb.reshape(sb.op("and", active, fail), batch),
                         sb.broadcast(i1, batch), info)
        xi, xi1 = _at(sb, x, i, False), _at(sb, x, i1, False)
        # no interchange: eliminate low[i] with row i
        f1 = sb.divide(low, di)
        d1_keep = sb.subtract(di1, sb.multiply(f1, dui))
        x1_keep = sb.subtract(xi1, sb.multiply(H.expand(sb, sb.reshape(f1, (*one_b, 1)),
                                                        xi.shape.dims), xi))
        # interchange rows i and i+1
        f2 = sb.divide(di, low)
        d1_swap = sb.subtract(dui, sb.multiply(f2, di1))
        x1_swap = sb.subtract(xi, sb.multiply(H.expand(sb, sb.reshape(f2, (*one_b, 1)),
                                                       xi.shape.dims), xi1))
        d = _put(sb, d, i, low, ok_swap, True)
        d = _put(sb, d, i1, sb.select(keep, d1_keep, d1_swap), go, True)
        new_low = sb.select(keep, z, dui1)
        dl = _put(sb, dl, i1, new_low, sb.op("and", go, not_last), True)
        du = _put(sb, du, i1, sb.negate(sb.multiply(f2, dui1)),
                  sb.op("and", ok_swap, not_last), True)
        du = _put(sb, du, i, di1, ok_swap, True)
        x = _put(sb, x, i, xi1, ok_swap, False)
        x = _put(sb, x, i1, sb.select(H.expand(sb, sb.reshape(keep, (*one_b, 1)), xi.shape.dims),
                                      x1_keep, x1_swap), go, False)
        return [dl, d, du, x, info]

    info0 = H.zeros(b, "s32", batch)
    dl, d, du, x, info = H.fori(b, max(n - 1, 0), [dl, d, du, rhs, info0], step, "gtsv")
    if n == 0:
        return b.tuple(dl, d, du, x, info)
    dn = _at(b, d, n - 1, True)
    active = H.cmp(b, b.reshape(info, one_b), H.zeros(b, "s32", one_b), "EQ")
    info = b.select(b.reshape(b.op("and", active, H.cmp(b, dn, zero, "EQ")), batch),
                    b.broadcast(H.const(b, n, "s32"), batch), info)
    solve = H.cmp(b, b.reshape(info, one_b), H.zeros(b, "s32", one_b), "EQ")

    def back(sb, s, state, consts):
        (x,) = state
        dl, d, du, ok = consts
        i = sb.subtract(c(sb, n - 1), s)
        xi = _at(sb, x, i, False)
        at1 = sb.add(i, c(sb, 1))
        at2 = sb.add(i, c(sb, 2))
        # terms past the end read clamped slices: weight them by 0 via masks
        has1 = sb.broadcast(H.cmp(sb, at1, c(sb, n), "LT"), xi.shape.dims)
        has2 = sb.broadcast(H.cmp(sb, at2, c(sb, n), "LT"), xi.shape.dims)
        zx = H.zeros(sb, et, xi.shape.dims)

        def coef(v, k):
            return H.expand(sb, sb.reshape(_at(sb, v, k, True), (*one_b, 1)), xi.shape.dims)
        t1 = sb.select(has1, sb.multiply(coef(du, i), _at(sb, x, at1, False)), zx)
        t2 = sb.select(has2, sb.multiply(coef(dl, at1), _at(sb, x, at2, False)), zx)
        val = sb.divide(sb.subtract(sb.subtract(xi, t1), t2), coef(d, i))
        return [_put(sb, x, i, val, ok, False)]

    (x,) = H.fori(b, n, [x], back, "gtsv_back", consts=[dl, d, du, solve])
    return b.tuple(dl, d, du, x, info)
