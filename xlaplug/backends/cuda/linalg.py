"""CUDA linear algebra: dot, convolution, cholesky, triangular-solve (numba.cuda).

Every value stays on the device; the host only computes index metadata from the shapes.

  * dot: a permute+convert kernel lays the operands out as [B,M,K] and [B,K,N] in the
    compute type, a tiled shared-memory matmul (TILE x TILE tiles) multiplies them, and a
    finishing kernel converts to the result type;
  * convolution: an im2col kernel reads the input in its own dim_labels order (padding,
    lhs/rhs dilation and strides are index arithmetic, nothing is materialized), the kernel
    is laid out as [O, I*window] (with rhs_reversal), the tiled matmul multiplies them per
    batch (feature and batch groups map to matmul batches), and a final kernel writes the
    output dim order and type;
  * cholesky / triangular-solve: one thread per matrix (per right-hand-side vector for
    triangular-solve), batched, following XLA's expanders as the CPU kernel does.

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

import math

import numpy as np
from numba import cuda

from ..common.errors import ExecutionError
from ..common.plans import conv_plan, dot_plan
from ..registry import kernel
from .dot_complex import complex_matmul_kernel
from .launch import device_dtype, flat, launch_1d, launch_stride_loop, simulating

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

_PERMUTE: dict = {}


def _permute_kernel(mode: str, out_dt, in_dt):
    """out[i] = CONVERT(inp[base + sum_d idx_d(i) * strides[d]]) with idx from `dims`.

    mode 'cast' converts with a numba cast (integers wrap, floats round), 'nonzero' gives
    `v != 0` (pred results), 'real' the real part (complex -> real)."""
    key = (mode, np.dtype(out_dt), np.dtype(in_dt))
    k = _PERMUTE.get(key)
    if k is not None:
        return k
    OT = _nbt(out_dt)
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

    _PERMUTE[key] = permute
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

_MATMUL: dict = {}


def _matmul_kernel(dt, tile: int = TILE):
    dt = np.dtype(dt)
    k = _MATMUL.get((dt, tile))
    if k is not None:
        return k
    T = _nbt(dt)
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
                    k = t * TILE + tx
                    if row < M and k < K:
                        sA[ty, tx] = A[ab, row, k]
                    else:
                        sA[ty, tx] = T(0)
                    k = t * TILE + ty
                    if k < K and col < N:
                        sB[ty, tx] = Bm[bb, k, col]
                    else:
                        sB[ty, tx] = T(0)
                    cuda.syncthreads()
                    for j in range(TILE):
                        acc += sA[ty, j] * sB[j, tx]
                    cuda.syncthreads()
                if row < M and col < N:
                    C[b, row, col] = acc

    _MATMUL[(dt, tile)] = matmul
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


# ---- convolution ---------------------------------------------------------------------------

_IM2COL: dict = {}


def _im2col_kernel(out_dt, in_dt):
    key = (np.dtype(out_dt), np.dtype(in_dt))
    k = _IM2COL.get(key)
    if k is not None:
        return k
    T = _nbt(out_dt)

    @cuda.jit
    def im2col(cols, x, R, P, KK, G, BG, Nb, Cg, sN, sC, ksz, osz, isz, sS, stride, rdil,
               ldil, padlo):
        """cols[b, c*KK + kk, p] = x[n(b), c0(b) + c, p*stride + k*rdil - padlo (/ ldil)]."""
        for i in range(cuda.grid(1), cols.size, cuda.gridsize(1)):
            p = i % P
            r = (i // P) % R
            b = i // (P * R)
            c = r // KK
            kk = r - c * KK
            g = b % G
            nq = b // G
            if BG > 1:
                n = (nq % BG) * Nb + nq // BG
            else:
                n = nq
            off = n * sN + (g * Cg + c) * sC
            ok = True
            for d in range(len(ksz) - 1, -1, -1):
                kd = kk % ksz[d]
                kk = kk // ksz[d]
                od = p % osz[d]
                p = p // osz[d]
                j = od * stride[d] + kd * rdil[d] - padlo[d]
                if j < 0:
                    ok = False
                else:
                    q = j // ldil[d]
                    if q * ldil[d] != j or q >= isz[d]:
                        ok = False
                    else:
                        off += q * sS[d]
            if ok:
                cols[i] = T(x[off])
            else:
                cols[i] = T(0)

    _IM2COL[key] = im2col
    return im2col


@kernel("convolution", device="cuda")
def _convolution(ins, args, ctx):
    lhs, rhs = args[0], args[1]
    out_dt = device_dtype(ins.shape.element_type)
    ls, rs = tuple(lhs.shape), tuple(rhs.shape)
    cp = conv_plan(ins, ls, rs, lhs.dtype, rhs.dtype, out_dt)
    dn, wdims, G, BG = cp.dims, cp.window, cp.groups, cp.batch_groups
    N, C, O, I, KK, P = cp.n, cp.c, cp.o, cp.i, cp.kk, cp.p
    ksz, s_out = list(cp.kernel_spatial), list(cp.out_spatial)
    if G > 1 and BG > 1:  # (the im2col kernel indexes one kind of group)
        raise ExecutionError(f"convolution '{ins.name}': inconsistent shapes for "
                             f"feature_group_count={G}, batch_group_count={BG}")
    cdt, kind = _device_compute(cp.compute_dtype, cp.kind), cp.kind
    lst, rst = _c_strides(ls), _c_strides(rs)
    out_dims = tuple(ins.shape.dims)
    isz = [ls[d] for d in dn.input_spatial]

    # The kernel as [O, I, window...] in the compute type, reversed where asked.
    kstrides = [rst[dn.kernel_output_feature], rst[dn.kernel_input_feature]]
    base = 0
    for d, wd in zip(dn.kernel_spatial, wdims):
        if wd.reversal:
            base += (rs[d] - 1) * rst[d]
            kstrides.append(-rst[d])
        else:
            kstrides.append(rst[d])
    w = permute_convert(rhs, [O, I] + ksz, kstrides, base, cdt)

    # Matmul batches: b = n*G + g (feature groups), b = nb*BG + g (batch groups), b = n.
    if G > 1:
        nbatch, Mo, Cg = N * G, O // G, I
        A = w.reshape((G, Mo, I * KK))
    elif BG > 1:
        nbatch, Mo, Cg = N, O // BG, C
        A = w.reshape((BG, Mo, C * KK))
    else:
        nbatch, Mo, Cg = N, O, C
        A = w.reshape((1, O, C * KK))
    R = Cg * KK
    cols = _empty((nbatch, R, P), cdt)
    if cols.size:
        k = _im2col_kernel(cdt, lhs.dtype)
        windows = (_tup([wd.stride for wd in wdims]), _tup([wd.rhs_dilate for wd in wdims]),
                   _tup([wd.lhs_dilate for wd in wdims]), _tup([wd.pad_lo for wd in wdims], 0))
        launch_stride_loop(k, cols.size, flat(cols), flat(lhs), R, P, KK, G, BG, N // BG, Cg,
                           lst[dn.input_batch], lst[dn.input_feature], _tup(ksz), _tup(s_out),
                           _tup(isz), _tup([lst[d] for d in dn.input_spatial], 0), *windows)
    y = matmul(A, cols, nbatch)  # [n_out, O, P] in every case

    # [n_out, O, spatial...] -> the output's dim order and type.
    ystr = {dn.output_batch: O * P, dn.output_feature: P}
    sp = _c_strides(s_out)
    for d, s in zip(dn.output_spatial, sp):
        ystr[d] = s
    if kind == "int" and np.dtype(out_dt).kind == "b":
        mode = "nonzero"
    elif np.dtype(out_dt).kind != "c" and np.dtype(cdt).kind == "c":
        mode = "real"
    else:
        mode = "cast"
    return permute_convert(y, out_dims, [ystr[d] for d in range(len(out_dims))], 0, out_dt,
                           mode)


# ---- cholesky ------------------------------------------------------------------------------

def _work_dtype(dt) -> np.dtype:
    dt = np.dtype(dt)
    if dt.kind == "c" or dt == np.float64:
        return dt
    return np.dtype(np.float32)


_CHOL: dict = {}


def _cholesky_kernel(wdt, in_dt):
    key = (np.dtype(wdt), np.dtype(in_dt))
    k = _CHOL.get(key)
    if k is not None:
        return k
    W = _nbt(wdt)

    @cuda.jit
    def chol(L, a, lower):
        """One thread per matrix: L (= out, work type) from the `lower` (or upper) triangle
        of a; the other triangle is zero; all-NaN when a square root met a NaN."""
        bi = cuda.grid(1)
        nbat = L.shape[0]
        n = L.shape[1]
        if bi < nbat:
            err = False
            for j in range(n):
                for i in range(n):  # zero the other triangle and the diagonal
                    if i <= j:
                        if lower:
                            L[bi, i, j] = W(0)
                        else:
                            L[bi, j, i] = W(0)
            for j in range(n):
                s = W(0)
                for k in range(j):
                    v = L[bi, j, k] if lower else L[bi, k, j]
                    s += v * v.conjugate()
                ajj = W(a[bi, j, j])
                sr = (ajj - s).real
                if sr >= 0:
                    r = math.sqrt(sr)
                else:
                    r = math.nan
                    err = True
                if math.isnan(r):
                    err = True
                ljj = W(r)
                L[bi, j, j] = ljj
                for i in range(j + 1, n):
                    acc = W(0)
                    for k in range(j):
                        if lower:
                            acc += L[bi, i, k] * L[bi, j, k].conjugate()
                        else:
                            acc += L[bi, k, i] * L[bi, k, j].conjugate()
                    if lower:
                        L[bi, i, j] = (W(a[bi, i, j]) - acc) / ljj
                    else:
                        L[bi, j, i] = (W(a[bi, j, i]) - acc) / ljj
            if err:
                for i in range(n):
                    for j in range(n):
                        L[bi, i, j] = W(math.nan)

    _CHOL[key] = chol
    return chol


@kernel("cholesky", device="cuda")
def _cholesky(ins, args, ctx):
    a = args[0]
    lower = bool(ins.attrs.get("lower", False))
    dims = tuple(a.shape)
    n = dims[-1]
    nb = _size(dims[:-2])
    wdt = _work_dtype(a.dtype)
    out_dt = device_dtype(ins.shape.element_type)
    L = _empty((nb, n, n), wdt)
    if nb and n:
        k = _cholesky_kernel(wdt, a.dtype)
        launch_1d(k, nb, L, a.reshape((nb, n, n)), lower, threads=64)
    return finish(L, "float", out_dt, ins.shape.dims)


# ---- triangular-solve ----------------------------------------------------------------------

_TRSM: dict = {}


def _trsm_kernel(wdt, a_dt, b_dt):
    key = (np.dtype(wdt), np.dtype(a_dt), np.dtype(b_dt))
    k = _TRSM.get(key)
    if k is not None:
        return k
    W = _nbt(wdt)

    @cuda.jit
    def trsm(X, a, bm, left, lower, unit, transposed, conj):
        """One thread per (batch, right-hand-side vector): solves op(a) x = b (left) or
        x op(a) = b by substitution, reading only the named triangle of a."""
        t = cuda.grid(1)
        nbat = X.shape[0]
        n = a.shape[1]
        nv = X.shape[2] if left else X.shape[1]
        if t < nbat * nv:
            bi = t // nv
            v = t - bi * nv
            ai = bi % a.shape[0]
            eff_lower = lower != transposed
            for s in range(n):
                i = s if eff_lower else n - 1 - s
                lo = 0 if eff_lower else i + 1
                hi = i if eff_lower else n
                acc = W(0)
                for k in range(lo, hi):
                    e = W(a[ai, k, i]) if transposed else W(a[ai, i, k])
                    if conj:
                        e = e.conjugate()
                    xk = X[bi, k, v] if left else X[bi, v, k]
                    acc += e * xk
                rhs = (W(bm[bi, i, v]) if left else W(bm[bi, v, i])) - acc
                if not unit:
                    d = W(a[ai, i, i])
                    if conj:
                        d = d.conjugate()
                    rhs = rhs / d
                if left:
                    X[bi, i, v] = rhs
                else:
                    X[bi, v, i] = rhs

    _TRSM[key] = trsm
    return trsm


@kernel("triangular-solve", device="cuda")
def _triangular_solve(ins, args, ctx):
    a, b = args[0], args[1]
    at = ins.attrs
    left = bool(at.get("left_side", False))
    lower = bool(at.get("lower", False))
    unit = bool(at.get("unit_diagonal", False))
    trans = str(at.get("transpose_a", "NO_TRANSPOSE")).upper()
    wide = any(np.dtype(d) in (np.float64, np.complex128) for d in (a.dtype, b.dtype))
    if np.dtype(a.dtype).kind == "c" or np.dtype(b.dtype).kind == "c":
        wdt = np.dtype(np.complex128 if wide else np.complex64)
    else:
        wdt = np.dtype(np.float64 if wide else np.float32)
    transposed = trans in ("TRANSPOSE", "ADJOINT")
    conj = trans == "ADJOINT"
    if not left:
        transposed = not transposed  # x op(a) = b  <=>  op(a)^T x^T = b^T
    bdims, adims = tuple(b.shape), tuple(a.shape)
    n = adims[-1]
    na = _size(adims[:-2])
    nb = _size(bdims[:-2])
    if na not in (1, nb):
        raise ExecutionError(f"triangular-solve '{ins.name}': batch dimensions of "
                             f"{list(a.shape)} and {list(bdims)} differ")
    X = _empty((nb,) + bdims[-2:], wdt)
    nv = bdims[-1] if left else bdims[-2]
    if nb and nv and n:
        k = _trsm_kernel(wdt, a.dtype, b.dtype)
        launch_1d(k, nb * nv, X, a.reshape((na, n, n)), b.reshape((nb,) + bdims[-2:]),
                  left, lower, unit, transposed, conj, threads=64)
    return finish(X, "float", device_dtype(ins.shape.element_type), ins.shape.dims)


__all__ = ["TILE", "convert", "finish", "matmul", "permute_convert", "transpose_convert"]
