"""numba.cuda kernels for geqrf and orgqr/ungqr: _householder.py's algorithms on the device.

One thread per matrix, on logical C-contiguous `(batch, rows, cols)` device arrays.  The
reflectors are LAPACK's (xLARFG's sign convention and scaling, H(i) = I - tau v v^H with
v[0] = 1 implicit, beta real), generated and applied in xGEQR2's order, so jax's later
orgqr / ormqr calls and any direct reads of the factors see LAPACK's representation.
Like _householder.larfg, xLARFG's rescaling loop for |beta| < safmin is not reproduced.
Arithmetic is in the operand's precision (the CPU kernel runs f32/c64 geqrf in double
through numpy and rounds, so f32 results differ from it by f32 rounding).
`zero`/`one` are scalars of the operand dtype (see _cuda_factor.py); `.imag` of a real
value is 0, so the complex formulas serve real matrices unchanged.
"""
from __future__ import annotations

import math

from numba import cuda

from ._cuda_factor import copy_matrix


@cuda.jit(device=True)
def _xnorm(out, bi, r0, m, col, rzero):
    """||out[bi, r0:m, col]||_2 scaled by the largest magnitude, as dnrm2 (and
    _householder.nrm2): no overflow or underflow; NaN in, NaN out; inf in, inf out."""
    big = rzero
    bad = False
    for i in range(r0, m):
        mag = abs(out[bi, i, col])
        if math.isnan(mag):
            bad = True
        elif mag > big:
            big = mag
    if bad:
        return big * math.nan
    if big == 0 or math.isinf(big):
        return big
    ssq = rzero
    for i in range(r0, m):
        q = abs(out[bi, i, col]) / big
        ssq += q * q
    return big * math.sqrt(ssq)


@cuda.jit(device=True)
def _larfg(out, bi, r, col, m, zero, one):
    """xLARFG in place on alpha = out[bi, r, col], x = out[bi, r+1:m, col]: alpha becomes
    beta (real, -sign(re alpha) * ||(alpha, x)||), x becomes v = x / (alpha - beta), and
    tau = (beta - alpha) / beta is returned.  x = 0 with real alpha: H = I (tau = 0)."""
    alpha = out[bi, r, col]
    xnorm = _xnorm(out, bi, r + 1, m, col, zero.real)
    ar = alpha.real
    ai = alpha.imag
    if xnorm == 0 and ai == 0:
        return zero
    beta = -math.copysign(math.hypot(math.hypot(ar, ai), xnorm), ar)
    # complex / real: numba divides component by component when the divisor's imaginary
    # part is 0, which is the CPU kernel's ((beta - ar) / beta, -ai / beta).
    tau = (beta - alpha) / beta
    scale = one / (alpha - beta)
    for i in range(r + 1, m):
        out[bi, i, col] = out[bi, i, col] * scale
    out[bi, r, col] = beta
    return tau


@cuda.jit(device=True)
def _zero_column(out, bi, r0, r1, c, zero):
    """Are out[bi, r0:r1, c] all zero?  (NaN is not.)"""
    for r in range(r0, r1):
        if out[bi, r, c] != zero:
            return False
    return True


@cuda.jit
def geqrf_kernel(a, out, tau, zero, one):
    """xGEQR2 on a[bi] (m x n): for i < min(m, n), reflector i annihilates out[i+1:, i]
    and H(i)^H = I - conj(tau_i) v v^H is applied to out[i:, i+1:] as xLARF applies it.
    R on and above the diagonal, the v's below it, taus in tau[bi]."""
    bi = cuda.grid(1)
    if bi >= out.shape[0]:
        return
    m = out.shape[1]
    n = out.shape[2]
    copy_matrix(a, out, bi)
    k = m if m < n else n              # (min() of two ints fails to compile for CUDA)
    for i in range(k):
        t = _larfg(out, bi, i, i, m, zero, one)
        tau[bi, i] = t
        if t == zero:                               # H(i) = I: xLARF returns at once
            continue
        # xLARF works only on v's rows up to its last nonzero and on the columns up to the
        # last one nonzero in those rows (ILAxLR / ILAxLC).  Exact zeros elsewhere change
        # nothing, but a NaN or inf there would spread: this keeps LAPACK's NaN pattern.
        lastv = m - i
        while lastv > 1 and out[bi, i + lastv - 1, i] == zero:
            lastv -= 1
        lastc = n
        while lastc > i + 1 and _zero_column(out, bi, i, i + lastv, lastc - 1, zero):
            lastc -= 1
        ct = t.conjugate()
        for c in range(i + 1, lastc):
            w = out[bi, i, c]                       # v[0] = 1
            for r in range(i + 1, i + lastv):
                w += out[bi, r, i].conjugate() * out[bi, r, c]
            out[bi, i, c] = out[bi, i, c] - ct * w
            for r in range(i + 1, i + lastv):
                out[bi, r, c] = out[bi, r, c] - (ct * out[bi, r, i]) * w


@cuda.jit
def orgqr_kernel(a, tau, q, zero, one):
    """xORGQR / xUNGQR as _householder.householder_product: q = the first n columns of
    H(1) ... H(k), built by applying H(k), ..., H(1) to the m x n identity (each H(i) to
    rows i: of every column; H(i) = I - tau_i v v^H, v = [1; a[i+1:, i]])."""
    bi = cuda.grid(1)
    if bi >= q.shape[0]:
        return
    m = q.shape[1]
    n = q.shape[2]
    for i in range(m):
        for j in range(n):
            q[bi, i, j] = one if i == j else zero
    for s in range(tau.shape[1]):
        i = tau.shape[1] - 1 - s
        if i >= m or i >= n:
            continue
        t = tau[bi, i]
        for c in range(n):
            w = q[bi, i, c]
            for r in range(i + 1, m):
                w += a[bi, r, i].conjugate() * q[bi, r, c]
            q[bi, i, c] = q[bi, i, c] - t * w
            for r in range(i + 1, m):
                q[bi, r, c] = q[bi, r, c] - (t * a[bi, r, i]) * w
