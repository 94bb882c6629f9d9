"""Complex dot in XLA:CPU's order.

XLA:CPU runs a complex dot through Eigen's contraction, whose complex kernel keeps the real
and imaginary parts apart: per output element it accumulates four real sums over k,
  rr = sum a.re*b.re   ii = sum a.im*b.im   ir = sum a.im*b.re   ri = sum a.re*b.im
each in ascending k, with no fused multiply-add, and only at the end forms
(rr - ii) + i(ir + ri), which it scales by alpha = 1 and adds to the zeroed output.
Multiplying complex numbers inside the loop (what BLAS's cgemm and
a plain `acc += a * b` do) rounds differently -- 1-500 ULP apart on real-by-complex dots
(tests/test_linalg.py compares with XLA through jax).

That is Eigen's order where its packet kernel adds k in sequence: contractions shorter than
its 8-step unrolling and the rows past the last full packet; where Eigen unrolls k over
several accumulators the bits can still differ (within the same rounding error).
The loop runs k outside n, so each output's sums still go k = 0, 1, ... while the inner
loop vectorises across n.
"""
from __future__ import annotations

import numpy as np
from .jit_store import cached_njit


@cached_njit(nogil=True)  # on disk in xlaplug's cache, or in memory
def _four_sums(ar, ai, br, bi, re, im):
    nb, m_, k_ = ar.shape
    n_ = br.shape[2]
    rr = np.empty(n_, ar.dtype)
    ii = np.empty(n_, ar.dtype)
    ir = np.empty(n_, ar.dtype)
    ri = np.empty(n_, ar.dtype)
    one = ar.dtype.type(1)
    zero = ar.dtype.type(0)
    for b in range(nb):
        for m in range(m_):
            rr[:] = 0
            ii[:] = 0
            ir[:] = 0
            ri[:] = 0
            for k in range(k_):
                x = ar[b, m, k]
                y = ai[b, m, k]
                for n in range(n_):
                    rr[n] += x * br[b, k, n]
                    ii[n] += y * bi[b, k, n]
                    ir[n] += y * br[b, k, n]
                    ri[n] += x * bi[b, k, n]
            for n in range(n_):
                t_re = rr[n] - ii[n]
                t_im = ir[n] + ri[n]
                # Eigen then adds alpha * t to the zeroed output, alpha = 1 + 0i as a
                # complex product: an infinite part makes the other part NaN, -0 becomes +0.
                re[b, m, n] = (t_re * one - t_im * zero) + zero
                im[b, m, n] = (t_re * zero + t_im * one) + zero


def complex_matmul(L: np.ndarray, R: np.ndarray) -> np.ndarray:
    """[B, M, N] = L[B, M, K] @ R[B, K, N] for complex L and R of one dtype, in XLA's order."""
    rt = L.real.dtype
    B, M, _ = L.shape
    N = R.shape[2]
    re = np.empty((B, M, N), rt)
    im = np.empty((B, M, N), rt)
    part = np.ascontiguousarray
    _four_sums(part(L.real), part(L.imag), part(R.real), part(R.imag), re, im)
    out = np.empty((B, M, N), L.dtype)
    out.real, out.imag = re, im
    return out
