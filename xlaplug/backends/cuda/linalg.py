"""CUDA linear algebra: dot and convolution (numba.cuda).

Every value stays on the device; the host only computes index metadata from the shapes.

  * dot: a permute+convert kernel lays the operands out as [B,M,K] and [B,K,N] in the
    compute type, a tiled shared-memory matmul (TILE x TILE tiles) multiplies them, and a
    finishing kernel converts to the result type;
  * convolution: in cuda/convolution.py, on the same tiled matmul;
  * cholesky / triangular-solve: in cuda/factorization.py.

Types follow the CPU kernel (cpu/linalg.py): f16 accumulates in f32 and rounds once; f32
in f32, f64 in f64, complex dots as the CPU's four real sums (cuda/dot_complex.py); integer
dots and convolutions accumulate in int64 with wrap-around and are truncated to the result
width (bit-exact with the CPU kernel: arithmetic mod 2^64 agrees with exact arithmetic mod
the result width);
pred is `sum != 0`.  Floating-point results differ from the CPU kernel (BLAS) only by the
order of accumulation (and FMA contraction on a GPU).  bf16/f8 operands arrive as float32
values and accumulate in f32 (as XLA upcasts them); their results are rounded to the type
once, after the kernel (cuda/narrow.py), like f16's.
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from ..common.plans import dot_plan
from ..registry import kernel
from .dot_complex import complex_matmul_kernel
from .launch import cached_kernel, device_dtype, flat, launch_stride_loop, simulating

TILE = 16
# The simulator starts a Python thread per CUDA thread (launch.py) and polls them all at each
# syncthreads: a 16 x 16 block on a 4 x 3 product is 256 threads for 12 outputs.  There the
# tile follows the output (the same kernel, the same sums in the same order, whatever the
# tile): 4 x 4 for one of at most 4 x 4, 16 x 16 when both sides reach 16, else 8 x 8 --
# the cheapest of the three in simulated time on the suite's products.


def tile(m: int, n: int) -> int:
    """The matmul's tile edge for an m x n output: TILE on a GPU, 4, 8 or 16 simulated."""
    if not simulating():
        return TILE
    return 4 if max(m, n) <= 4 else TILE if min(m, n) >= TILE else 8


_MAX_GRID_YZ = 65535


def _nbt(dt):
    """The numba type of a numpy dtype."""
    from numba.np.numpy_support import from_dtype
    return from_dtype(np.dtype(dt))


def _empty(dims, dtype):
    return cuda.device_array(tuple(int(d) for d in dims), np.dtype(dtype))


def _size(dims) -> int:
    return int(np.prod(dims, dtype=np.int64)) if len(dims) else 1


def _c_strides(dims) -> list[int]:
    st, acc = [], 1
    for d in reversed(dims):
        st.append(acc)
        acc *= int(d)
    return st[::-1]


def _tup(xs, pad=1) -> tuple:
    """A non-empty int tuple (numba kernels take no empty tuples): pads with `pad`."""
    xs = tuple(int(x) for x in xs)
    return xs if xs else (pad,)


# ---- permute + convert ---------------------------------------------------------------------

def _permute_kernel(mode: str, out_dt, in_dt):
    """out[i] = CONVERT(inp[base + sum_d idx_d(i) * strides[d]]) with idx from `dims`
    (compiled once per mode and types).

    mode 'cast' converts with a numba cast (integers wrap, floats round), 'nonzero' gives
    `v != 0` (pred results), 'real' the real part (complex -> real)."""
    return cached_kernel(("permute", mode, np.dtype(out_dt), np.dtype(in_dt)),
                         lambda: _compile_permute(mode, _nbt(out_dt)))


def _compile_permute(mode: str, OT):  # OT: the result's numba type
    if mode == "nonzero":
        def conv(v):
            return v != 0
    elif mode == "real":
        def conv(v):
            return OT(v.real)
    else:
        def conv(v):
            return OT(v)
    conv_dev = cuda.jit(device=True)(conv)

    @cuda.jit
    def permute(out, inp, dims, strides, base):
        for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
            rem = i
            off = base
            for d in range(len(dims) - 1, -1, -1):
                q = rem // dims[d]
                off += (rem - q * dims[d]) * strides[d]
                rem = q
            out[i] = conv_dev(inp[off])
    return permute


def permute_convert(x, dims, strides, base, out_dtype, mode="cast", out=None):
    """A new contiguous device array of `dims`: element idx reads x.flat[base + idx.strides].

    Strides may be negative (reversal) or zero (broadcast); x must be C-contiguous."""
    dims = tuple(int(d) for d in dims)
    if out is None:
        out = _empty(dims, out_dtype)
    n = _size(dims)
    if n:
        k = _permute_kernel(mode, out.dtype, x.dtype)
        launch_stride_loop(k, n, flat(out), flat(x), _tup(dims), _tup(strides, 0), int(base))
    return out


def transpose_convert(x, perm, out_dtype):
    """x.transpose(perm) converted to out_dtype, as a contiguous device array (x itself when
    that is already so: kernels never write their operands)."""
    if list(perm) == list(range(len(x.shape))) and np.dtype(x.dtype) == np.dtype(out_dtype):
        return x
    st = _c_strides(x.shape)
    return permute_convert(x, [x.shape[p] for p in perm], [st[p] for p in perm], 0, out_dtype)


def convert(x, out_dtype, mode="cast"):
    """x converted elementwise (a copy, even when the dtype is the same)."""
    return permute_convert(x, x.shape, _c_strides(x.shape), 0, out_dtype, mode)


def finish(y, kind: str, out_dt, dims):
    """Compute-type result -> result type and dims (integers wrap; pred is `!= 0`)."""
    out_dt = np.dtype(out_dt)
    if kind == "int" and out_dt.kind == "b":
        mode = "nonzero"
    elif out_dt.kind != "c" and y.dtype.kind == "c":
        mode = "real"
    else:
        mode = "cast"
    if mode == "cast" and y.dtype == out_dt:
        return y.reshape(tuple(dims)) if tuple(y.shape) != tuple(dims) else y
    out = permute_convert(y, y.shape, _c_strides(y.shape), 0, out_dt, mode)
    return out.reshape(tuple(dims)) if tuple(out.shape) != tuple(dims) else out


# ---- tiled matmul --------------------------------------------------------------------------

@cuda.jit(device=True)
def load_tiles(sA, sB, A, Bm, ab, bb, row, col, k0, tx, ty, M, N, K, zero):
    """Thread (tx, ty)'s element of a step's shared tiles, from k0 on: sA[ty, tx] =
    A[ab, row, k0 + tx], sB[ty, tx] = Bm[bb, k0 + ty, col], `zero` past the edges (so the
    edge tiles add nothing).  Both tiled matmuls load so (the complex one: dot_complex.py)."""
    k = k0 + tx
    if row < M and k < K:
        sA[ty, tx] = A[ab, row, k]
    else:
        sA[ty, tx] = zero
    k = k0 + ty
    if k < K and col < N:
        sB[ty, tx] = Bm[bb, k, col]
    else:
        sB[ty, tx] = zero


def _matmul_kernel(dt, tile: int = TILE):
    """The tiled matmul of `dt` operands, tile x tile (compiled once per type and tile)."""
    dt = np.dtype(dt)
    return cached_kernel(("matmul", dt, tile), lambda: _compile_matmul(_nbt(dt), tile))


def _compile_matmul(T, tile: int):  # T: the elements' numba type
    TILE = tile  # noqa: N806 - a compile-time constant of the kernel

    @cuda.jit
    def matmul(A, Bm, C):
        """C[b] = A[b % A.shape[0]] @ Bm[b % Bm.shape[0]], TILE x TILE shared-memory tiles."""
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
                acc = T(0)
                for t in range(ktiles):
                    load_tiles(sA, sB, A, Bm, ab, bb, row, col, t * TILE, tx, ty, M, N, K, T(0))
                    cuda.syncthreads()
                    for j in range(TILE):
                        acc += sA[ty, j] * sB[j, tx]
                    cuda.syncthreads()
                if row < M and col < N:
                    C[b, row, col] = acc
    return matmul


def matmul(A, Bm, nbatch: int):
    """[nbatch, M, N] = A[b % A.shape[0]] @ Bm[b % Bm.shape[0]] (same dtype operands)."""
    M = A.shape[1]
    N = Bm.shape[2]
    C = _empty((nbatch, M, N), A.dtype)
    if nbatch and M and N:
        t = tile(M, N)
        grid = (-(-N // t), min(-(-M // t), _MAX_GRID_YZ), min(nbatch, _MAX_GRID_YZ))
        if np.dtype(A.dtype).kind == "c":  # XLA:CPU's four real sums (cuda/dot_complex.py)
            complex_matmul_kernel(A.dtype, t)[grid, (t, t)](A, Bm, C)
        else:
            _matmul_kernel(A.dtype, t)[grid, (t, t)](A, Bm, C)
    return C


def _device_compute(cdt, kind):
    if kind == "int":
        cdt = np.dtype(np.int64)  # wraps mod 2^64 on the device: exact mod the result width
    return cdt


# ---- dot -----------------------------------------------------------------------------------

@kernel("dot", device="cuda")
def _dot(ins, args, ctx):
    lhs, rhs = args[0], args[1]
    out_dt = device_dtype(ins.shape.element_type)
    p = dot_plan(ins, lhs.shape, rhs.shape, lhs.dtype, rhs.dtype, out_dt)
    cdt = _device_compute(p.compute_dtype, p.kind)
    L = transpose_convert(lhs, list(p.lhs_perm), cdt).reshape((p.batch, p.m, p.k))
    R = transpose_convert(rhs, list(p.rhs_perm), cdt).reshape((p.batch, p.k, p.n))
    y = matmul(L, R, p.batch)
    return finish(y, p.kind, out_dt, ins.shape.dims)


__all__ = ["TILE", "convert", "finish", "matmul", "permute_convert", "transpose_convert"]
