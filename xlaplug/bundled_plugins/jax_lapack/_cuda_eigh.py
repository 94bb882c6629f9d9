"""syevd / heevd on the device: cyclic Jacobi, one thread per matrix.

Not LAPACK's algorithm (xSYEVD reduces to tridiagonal form and runs divide and conquer),
so the results are LAPACK's only where they are unique:

* eigenvalues: ascending, as LAPACK's, up to rounding (Jacobi is at least as accurate);
* eigenvectors: orthonormal columns in the eigenvalues' order, but each column may differ
  from LAPACK's by a sign (real) or a unit phase (complex); for repeated eigenvalues the
  basis of their eigenspace may differ too.  V diag(w) V^H reconstructs A either way.
* info: 0; a matrix with a NaN in the triangle read gives all-NaN w and V and info = 1,
  as the CPU kernel does (numpy's wrapper reports LAPACK's failure that way).
* mode 'N' (values only): v_out is a copy of A (xSYEVD destroys A; jax ignores it), as
  the CPU kernel writes it.

Only the `uplo` triangle is read; the diagonal's imaginary part is ignored (as zheevd).
Rotations: for the pair (p, q), with a_pq = g e (g = |a_pq|, |e| = 1), the unitary
U = [[c, s e], [-s conj(e), c]] on columns p, q, with (c, s) the classic symmetric Jacobi
rotation of [[a_pp, g], [g, a_qq]], zeroes a_pq: A <- U^H A U, V <- V U.  Sweeps stop when
the off-diagonal Frobenius norm is below eps times A's, or after MAX_SWEEPS.
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda

MAX_SWEEPS = 40


@cuda.jit
def jacobi_kernel(a, work, v, w, info, lower, vectors, zero, one, eps):
    bi = cuda.grid(1)
    if bi >= work.shape[0]:
        return
    n = work.shape[1]
    bad = False
    for i in range(n):                  # the Hermitian matrix the `uplo` triangle defines
        for j in range(n):
            if i == j:
                e = zero + a[bi, i, i].real
            elif (i > j) == lower:
                e = a[bi, i, j]
            else:
                e = a[bi, j, i].conjugate()
            if math.isnan(e.real) or math.isnan(e.imag):
                bad = True
            work[bi, i, j] = e
            v[bi, i, j] = a[bi, i, j] if not vectors else (one if i == j else zero)
    if bad:
        for i in range(n):
            w[bi, i] = math.nan
            if vectors:
                for j in range(n):
                    v[bi, i, j] = zero + math.nan
        info[bi] = 1
        return
    fro = zero.real
    for i in range(n):
        for j in range(n):
            fro += abs(work[bi, i, j]) ** 2
    for _sweep in range(MAX_SWEEPS):
        off = zero.real
        for p in range(n):
            for q in range(p + 1, n):
                off += abs(work[bi, p, q]) ** 2
        if not off > eps * eps * fro:
            break
        for p in range(n):
            for q in range(p + 1, n):
                apq = work[bi, p, q]
                g = abs(apq)
                if g == 0:
                    continue
                ph = apq / g
                app = work[bi, p, p].real
                aqq = work[bi, q, q].real
                theta = (aqq - app) / (2 * g)
                t = 1 / (abs(theta) + math.hypot(theta, 1))   # hypot: no overflow
                if theta < 0:
                    t = -t
                c = 1 / math.hypot(t, 1)
                s = t * c
                for k in range(n):      # A <- A U
                    akp = work[bi, k, p]
                    akq = work[bi, k, q]
                    work[bi, k, p] = c * akp - s * ph.conjugate() * akq
                    work[bi, k, q] = s * ph * akp + c * akq
                for k in range(n):      # A <- U^H A
                    apk = work[bi, p, k]
                    aqk = work[bi, q, k]
                    work[bi, p, k] = c * apk - s * ph * aqk
                    work[bi, q, k] = s * ph.conjugate() * apk + c * aqk
                work[bi, p, q] = zero
                work[bi, q, p] = zero
                work[bi, p, p] = zero + work[bi, p, p].real
                work[bi, q, q] = zero + work[bi, q, q].real
                if vectors:
                    for k in range(n):  # V <- V U
                        vkp = v[bi, k, p]
                        vkq = v[bi, k, q]
                        v[bi, k, p] = c * vkp - s * ph.conjugate() * vkq
                        v[bi, k, q] = s * ph * vkp + c * vkq
    for i in range(n):
        w[bi, i] = work[bi, i, i].real
    for i in range(n):                  # selection sort, ascending; columns of V follow
        k = i
        for j in range(i + 1, n):
            if w[bi, j] < w[bi, k]:
                k = j
        if k != i:
            tmp = w[bi, i]
            w[bi, i] = w[bi, k]
            w[bi, k] = tmp
            if vectors:
                for r in range(n):
                    tv = v[bi, r, i]
                    v[bi, r, i] = v[bi, r, k]
                    v[bi, r, k] = tv
    info[bi] = 0


def syevd(a, v_out, w_out, info, *, lower: bool, vectors: bool) -> None:
    from . import _cuda as C
    x, nb = C._mats(a)
    n = x.shape[1]
    dt = np.dtype(a.dtype)
    work = cuda.device_array((nb, n, n), dt)      # device scratch: the rotated matrix
    eps = np.finfo(dt).eps
    C._launch(jacobi_kernel, nb, x, work, C._mats(v_out)[0], C._vecs(w_out, nb),
              C._flat(info), lower, vectors, dt.type(0), dt.type(1), np.finfo(dt).dtype.type(eps))
