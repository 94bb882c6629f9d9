"""CUDA fft: FFT / IFFT / RFFT / IRFFT over the len(fft_length) (1 to 3) minor dimensions.

A straightforward discrete Fourier transform on the device, one axis at a time: each thread
computes one output element of one axis as an O(n) sum, so a transform costs O(n^2) per
axis.  Conventions are the CPU kernel's (numpy's): FFT is unnormalized, IFFT divides by the
transform size, RFFT keeps fft_length[-1]//2 + 1 outputs on the last axis (transformed
first), IRFFT transforms the leading axes first and reads fft_length[-1]//2 + 1 inputs on
the last one, producing fft_length real values (the imaginary parts of the self-conjugate
bins are ignored).  An input axis longer than its fft_length is cropped, a shorter one
zero-padded, as numpy does.

Precision: every axis is computed in complex128 (twiddles from f64 sin/cos of the exactly
reduced angle 2*pi*((j*k) mod n)/n, f64 accumulation) and the result rounded once to the
result type.  c64 results therefore match the CPU kernel (numpy's single-precision
pocketfft) to within a few f32 ulps of the largest magnitude, c128 results to f64 rounding.
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda, types

from ..common.errors import ExecutionError
from ..registry import kernel
from .launch import cached_kernel, device_dtype, device_zeros, flat, launch_stride_loop
from .linalg import convert

_TWO_PI = 2.0 * math.pi

def _c2c_kernel(in_dt):
    """The complex-to-complex axis kernel for an `in_dt` operand (compiled once)."""
    return cached_kernel(("dft", np.dtype(in_dt)), _compile_c2c)


def _c2r_kernel(in_dt):
    """The complex-to-real (IRFFT) axis kernel for an `in_dt` operand (compiled once)."""
    return cached_kernel(("idft_real", np.dtype(in_dt)), _compile_c2r)


def _compile_c2c():
    @cuda.jit
    def dft(out, x, inner, nin, n, nout, sign, scale):
        """out[o, k, i] = scale * sum_{j < nin} x[o, j, i] exp(sign 2 pi i j k / n)."""
        for t in range(cuda.grid(1), out.size, cuda.gridsize(1)):
            ii = t % inner
            kk = (t // inner) % nout
            o = t // (inner * nout)
            base = o * nin * inner + ii
            re = 0.0
            im = 0.0
            for j in range(nin):
                v = types.complex128(x[base + j * inner])
                ang = sign * _TWO_PI * ((j * kk) % n) / n
                c = math.cos(ang)
                s = math.sin(ang)
                re += v.real * c - v.imag * s
                im += v.real * s + v.imag * c
            out[t] = complex(re * scale, im * scale)
    return dft


def _compile_c2r():
    @cuda.jit
    def idft_real(out, x, inner, nin, n):
        """out[o, m, i] = (1/n) sum_k X[k] exp(+2 pi i k m / n) for a Hermitian X of which
        x holds the first nin (<= n//2 + 1) bins: Re X[0] + 2 sum Re(X[k] w^km) + the
        Nyquist bin's real part when n is even."""
        for t in range(cuda.grid(1), out.size, cuda.gridsize(1)):
            ii = t % inner
            m = (t // inner) % n
            o = t // (inner * n)
            base = o * nin * inner + ii
            acc = 0.0
            half = n // 2
            for k in range(nin):
                v = types.complex128(x[base + k * inner])
                if k == 0:
                    acc += v.real
                elif 2 * k == n:
                    if m % 2 == 0:
                        acc += v.real
                    else:
                        acc -= v.real
                elif k <= half:
                    ang = _TWO_PI * ((k * m) % n) / n
                    acc += 2.0 * (v.real * math.cos(ang) - v.imag * math.sin(ang))
            out[t] = acc / n
    return idft_real


def _axis_view(dims, axis):
    outer = int(np.prod(dims[:axis], dtype=np.int64))
    inner = int(np.prod(dims[axis + 1:], dtype=np.int64))
    return outer, inner


def _c2c(x, axis: int, n: int, nout: int, inverse: bool):
    """The DFT of length n along `axis` (nout outputs: n, or n//2+1 for RFFT) -> c128."""
    dims = tuple(x.shape)
    outer, inner = _axis_view(dims, axis)
    nin = min(dims[axis], n)
    odims = dims[:axis] + (nout,) + dims[axis + 1:]
    out = cuda.device_array(odims, np.complex128)
    total = int(np.prod(odims, dtype=np.int64))
    if total:
        if nin < dims[axis]:  # crop, so that the kernel sees an axis of length nin
            x = _crop(x, axis, nin)
        k = _c2c_kernel(x.dtype)
        launch_stride_loop(k, total, flat(out), flat(x), inner, nin, n, nout,
                           1.0 if inverse else -1.0, 1.0 / n if inverse else 1.0)
    return out


def _crop(x, axis: int, keep: int):
    """The first `keep` entries of x along axis, as a contiguous device array."""
    from .linalg import permute_convert
    dims = tuple(x.shape)
    st = [int(np.prod(dims[d + 1:], dtype=np.int64)) for d in range(len(dims))]
    nd = dims[:axis] + (keep,) + dims[axis + 1:]
    return permute_convert(x, nd, st, 0, x.dtype)


def _c2r(x, axis: int, n: int):
    dims = tuple(x.shape)
    outer, inner = _axis_view(dims, axis)
    nin = min(dims[axis], n // 2 + 1)
    if nin < dims[axis]:
        x = _crop(x, axis, nin)
    odims = dims[:axis] + (n,) + dims[axis + 1:]
    out = cuda.device_array(odims, np.float64)
    total = int(np.prod(odims, dtype=np.int64))
    if total:
        launch_stride_loop(_c2r_kernel(x.dtype), total, flat(out), flat(x), inner, nin, n)
    return out


@kernel("fft", device="cuda")
def _fft(ins, args, ctx):
    x = args[0]
    kind = str(ins.attrs.get("fft_type", "FFT")).upper()
    lengths = tuple(int(n) for n in ins.attrs.get("fft_length", ()))
    dims = tuple(x.shape)
    rank = len(lengths)
    if rank == 0 or rank > 3 or rank > len(dims):
        raise ExecutionError(f"fft '{ins.name}': fft_length={list(lengths)} must name 1 to 3 "
                             f"of the operand's {len(dims)} dimensions")
    if kind not in ("FFT", "IFFT", "RFFT", "IRFFT"):
        raise ExecutionError(f"fft '{ins.name}': unknown fft_type '{kind}'")
    if ins.shape.num_elements() == 0 or 0 in dims or 0 in lengths:
        return device_zeros(ins.shape)
    axes = list(range(len(dims) - rank, len(dims)))
    y = x
    if kind in ("FFT", "IFFT"):
        for ax, n in zip(axes, lengths):
            y = _c2c(y, ax, n, n, kind == "IFFT")
    elif kind == "RFFT":
        y = _c2c(y, axes[-1], lengths[-1], lengths[-1] // 2 + 1, False)
        for ax, n in zip(axes[:-1], lengths[:-1]):
            y = _c2c(y, ax, n, n, False)
    else:  # IRFFT
        for ax, n in zip(axes[:-1], lengths[:-1]):
            y = _c2c(y, ax, n, n, True)
        y = _c2r(y, axes[-1], lengths[-1])
    return convert(y, device_dtype(ins.shape.element_type))
