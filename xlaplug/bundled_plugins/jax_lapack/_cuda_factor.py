"""numba.cuda kernels for potrf, getrf and trsm: the CPU kernels' algorithms, on the device.

One thread per matrix (trsm: per right-hand-side vector).  Arrays arrive as logical,
C-contiguous `(batch, rows, cols)` device arrays, exactly what the CPU kernels see as
numpy arrays, so the index arithmetic is the CPU code's.  One kernel serves all four
precisions: numba compiles it per dtype, and `zero`/`one`/`nan` arrive as scalars of the
operand dtype so that arithmetic stays in that dtype (a Python literal would promote
float32 to float64).  `.real`, `.imag` and `.conjugate()` are no-ops on real types, so
the complex formulas serve real matrices unchanged.

This module imports numba.cuda at module level on purpose: the simulator swaps only
module globals (docs/plugins.md).  _cuda.py imports it on first use, so loading the
plugin needs neither numba.cuda nor a GPU.
"""
from __future__ import annotations

import math

from numba import cuda


@cuda.jit(device=True)
def copy_matrix(a, out, bi):
    """out[bi] = a[bi]: LAPACK factors in place, these kernels into a fresh output."""
    for i in range(out.shape[1]):
        for j in range(out.shape[2]):
            out[bi, i, j] = a[bi, i, j]


@cuda.jit(device=True)
def _cabs1(z):
    """|re| + |im|: how LAPACK's i?amax measures complex entries (izamax)."""
    return abs(z.real) + abs(z.imag)


@cuda.jit
def potrf_kernel(a, out, info, lower, zero, nan):
    """xPOTF2 on a[bi] (lower: A = L L^H, else A = U^H U), reading only the `lower`/upper
    triangle and leaving the other one as it was (LAPACK never touches it).  The diagonal
    is A's real part, as zpotf2 reads it.  On failure (a leading minor not positive
    definite, or NaN) info = that minor's 1-based order and the whole referenced triangle
    is NaN: the CPU kernel's numpy/LAPACK path gives NaNs there, and jax masks the result
    with NaN whenever info != 0 anyway."""
    bi = cuda.grid(1)
    if bi >= out.shape[0]:
        return
    n = out.shape[1]
    copy_matrix(a, out, bi)
    code = 0
    for j in range(n):
        s = a[bi, j, j].real
        for k in range(j):
            v = out[bi, j, k] if lower else out[bi, k, j]
            s -= (v * v.conjugate()).real
        if s <= 0:                        # NaN goes on: see the docstring
            code = j + 1
            break
        d = math.sqrt(s)
        out[bi, j, j] = d
        for i in range(j + 1, n):
            acc = zero
            for k in range(j):
                if lower:
                    acc += out[bi, i, k] * out[bi, j, k].conjugate()
                else:
                    acc += out[bi, k, j].conjugate() * out[bi, k, i]
            if lower:
                out[bi, i, j] = (a[bi, i, j] - acc) / d
            else:
                out[bi, j, i] = (a[bi, j, i] - acc) / d
    info[bi] = code
    if code:
        for i in range(n):
            for j in range(n):
                if (i >= j) == lower or i == j:
                    out[bi, i, j] = nan


@cuda.jit
def getrf_kernel(a, out, ipiv, info, one, sfmin):
    """xGETF2 on a[bi] (m x n): partial pivoting by |re| + |im|, first maximum wins and a
    NaN wins only in the pivot position itself (as _solvers.iamax); ipiv is 1-based; a
    zero pivot sets info (the first one) and leaves its column unscaled, but the trailing
    update still runs, as in dgetf2; the column is scaled by 1/pivot unless |pivot| <
    sfmin, where it is divided instead."""
    bi = cuda.grid(1)
    if bi >= out.shape[0]:
        return
    m = out.shape[1]
    n = out.shape[2]
    copy_matrix(a, out, bi)
    code = 0
    k = m if m < n else n              # (min() of two ints fails to compile for CUDA)
    for j in range(k):
        p = j
        best = _cabs1(out[bi, j, j])
        if not math.isnan(best):
            for i in range(j + 1, m):
                v = _cabs1(out[bi, i, j])
                if v > best:
                    best = v
                    p = i
        ipiv[bi, j] = p + 1
        if p != j:
            for c in range(n):
                t = out[bi, j, c]
                out[bi, j, c] = out[bi, p, c]
                out[bi, p, c] = t
        piv = out[bi, j, j]
        if piv == 0:
            if code == 0:
                code = j + 1
        elif abs(piv) >= sfmin:
            r = one / piv
            for i in range(j + 1, m):
                out[bi, i, j] = out[bi, i, j] * r
        else:
            for i in range(j + 1, m):
                out[bi, i, j] = out[bi, i, j] / piv
        for i in range(j + 1, m):
            lij = out[bi, i, j]
            for c in range(j + 1, n):
                out[bi, i, c] = out[bi, i, c] - lij * out[bi, j, c]
    info[bi] = code


@cuda.jit(device=True)
def _tri(a, ai, i, j, swap, conj):
    """Entry (i, j) of the effective triangular matrix: a's, transposed when `swap`,
    conjugated when `conj` (trans_x = 'C')."""
    e = a[ai, j, i] if swap else a[ai, i, j]
    return e.conjugate() if conj else e


@cuda.jit
def trsm_kernel(a, b, alpha, out, right, eff_lower, swap, conj, unit):
    """xTRSM for one (batch, vector): op(A) x = alpha b (left) or x op(A) = alpha b
    (right: a row of b).  The caller folds side and trans_x into one effective triangle
    (`swap`, `eff_lower`), as _solvers.trsm does; the substitution is the CPU kernel's
    column-oriented one (divide x_j by the diagonal unless unit, then eliminate x_j from
    the rest), and only the referenced triangle (and its diagonal unless unit) is read."""
    t = cuda.grid(1)
    nb = out.shape[0]
    nv = out.shape[1] if right else out.shape[2]
    if t >= nb * nv:
        return
    bi = t // nv
    v = t - bi * nv
    ai = bi % a.shape[0]                 # a batch of one serves every b
    k = a.shape[1]
    al = alpha[0]
    for i in range(k):
        if right:
            out[bi, v, i] = b[bi, v, i] * al
        else:
            out[bi, i, v] = b[bi, i, v] * al
    for s in range(k):
        j = s if eff_lower else k - 1 - s
        xj = out[bi, v, j] if right else out[bi, j, v]
        if not unit:
            xj = xj / _tri(a, ai, j, j, swap, conj)
            if right:
                out[bi, v, j] = xj
            else:
                out[bi, j, v] = xj
        lo = j + 1 if eff_lower else 0
        hi = k if eff_lower else j
        for i in range(lo, hi):
            e = _tri(a, ai, i, j, swap, conj)
            if right:
                out[bi, v, i] = out[bi, v, i] - e * xj
            else:
                out[bi, i, v] = out[bi, i, v] - e * xj


@cuda.jit
def zero_kernel(flat, zero):
    """flat[:] = zero (info results of routines that cannot fail)."""
    i = cuda.grid(1)
    if i < flat.shape[0]:
        flat[i] = zero
