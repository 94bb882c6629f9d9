"""The complex matmul on CUDA, in XLA:CPU's order (cpu/dot_complex.py): four real sums per
output element -- re*re, im*im, im*re, re*im -- each over k in ascending order, combined
as (rr - ii) + i(ir + ri) at the end and scaled by alpha = 1 + 0i; the same bits as the CPU kernel under the simulator.
Tiled like the real matmul (cuda/linalg.py): TILE x TILE shared-memory tiles of A and B."""
from __future__ import annotations

import numpy as np
from numba import cuda

from .launch import cached_kernel


def complex_matmul_kernel(dt, tile: int):
    """The kernel for `dt` (complex64 or complex128) operands in tile x tile tiles (compiled
    once)."""
    dt = np.dtype(dt)
    return cached_kernel(("complex_matmul", dt, tile), lambda: _compile(dt, tile))


def _compile(dt, tile: int):
    from numba.np.numpy_support import from_dtype

    from .linalg import load_tiles  # (linalg imports this module)
    T = from_dtype(dt)
    R = from_dtype(np.dtype(np.float32 if dt == np.complex64 else np.float64))
    TILE = tile

    @cuda.jit
    def matmul(A, Bm, C):
        """C[b] = A[b % A.shape[0]] @ Bm[b % Bm.shape[0]] as four real sums."""
        sA = cuda.shared.array((TILE, TILE), dtype=T)
        sB = cuda.shared.array((TILE, TILE), dtype=T)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        nb = C.shape[0]
        M = C.shape[1]
        N = C.shape[2]
        K = A.shape[2]
        ktiles = (K + TILE - 1) // TILE
        mtiles = (M + TILE - 1) // TILE
        col = cuda.blockIdx.x * TILE + tx
        for b in range(cuda.blockIdx.z, nb, cuda.gridDim.z):
            ab = b % A.shape[0]
            bb = b % Bm.shape[0]
            for mt in range(cuda.blockIdx.y, mtiles, cuda.gridDim.y):
                row = mt * TILE + ty
                rr = R(0)
                ii = R(0)
                ir = R(0)
                ri = R(0)
                for t in range(ktiles):
                    load_tiles(sA, sB, A, Bm, ab, bb, row, col, t * TILE, tx, ty, M, N, K, T(0))
                    cuda.syncthreads()
                    # Only the k < K steps: a padded zero would turn -0 sums into +0.
                    # (Not min(): numba's CUDA target cannot compile its varargs form.)
                    steps = K - t * TILE
                    if steps > TILE:
                        steps = TILE
                    for j in range(steps):
                        a = sA[ty, j]
                        c = sB[j, tx]
                        rr += a.real * c.real
                        ii += a.imag * c.imag
                        ir += a.imag * c.real
                        ri += a.real * c.imag
                    cuda.syncthreads()
                if row < M and col < N:
                    t_re = rr - ii
                    t_im = ir + ri
                    # alpha = 1 + 0i times t, added to a zeroed output (cpu/dot_complex.py)
                    C[b, row, col] = T(complex((t_re * R(1) - t_im * R(0)) + R(0),
                                               (t_re * R(0) + t_im * R(1)) + R(0)))
    return matmul
