"""fft: FFT / IFFT / RFFT / IRFFT over the len(fft_length) minor dimensions.

XLA's conventions are numpy's: FFT is unnormalized, IFFT divides by the transform size,
RFFT keeps fft_length[-1]//2 + 1 outputs on the last axis, IRFFT reads that many inputs and
produces fft_length real values (the imaginary parts of the self-conjugate bins are ignored).
numpy >= 2 transforms complex64/float32 in single precision, so c64 stays c64 throughout.
"""
from __future__ import annotations

import numpy as np

from ..registry import kernel
from ..common.errors import ExecutionError


@kernel("fft")
def _fft(ins, args, ctx):
    x = np.asarray(args[0])
    kind = str(ins.attrs.get("fft_type", "FFT")).upper()
    lengths = tuple(int(n) for n in ins.attrs.get("fft_length", ()))
    out_dt = ins.shape.dtype
    rank = len(lengths)
    if rank == 0 or rank > 3 or rank > x.ndim:
        raise ExecutionError(f"fft '{ins.name}': fft_length={list(lengths)} must name 1 to 3 "
                             f"of the operand's {x.ndim} dimensions")
    axes = tuple(range(x.ndim - rank, x.ndim))
    if ins.shape.num_elements() == 0 or x.size == 0 or 0 in lengths:
        return np.zeros(ins.shape.dims, out_dt)
    if kind in ("FFT", "IFFT"):
        cdt = np.complex128 if x.dtype == np.complex128 or out_dt == np.complex128 \
            else np.complex64
        x = x.astype(cdt, copy=False)
        y = (np.fft.fftn if kind == "FFT" else np.fft.ifftn)(x, s=lengths, axes=axes)
    elif kind == "RFFT":
        rdt = np.float64 if x.dtype == np.float64 or out_dt == np.complex128 else np.float32
        y = np.fft.rfftn(x.astype(rdt, copy=False), s=lengths, axes=axes)
    elif kind == "IRFFT":
        cdt = np.complex128 if x.dtype == np.complex128 or out_dt == np.float64 \
            else np.complex64
        x = x.astype(cdt, copy=False)
        # numpy would zero-pad or crop the last axis to fft_length[-1]//2 + 1; XLA's input
        # already has exactly that many elements.
        y = np.fft.irfftn(x, s=lengths, axes=axes)
    else:
        raise ExecutionError(f"fft '{ins.name}': unknown fft_type '{kind}'")
    return np.asarray(y.astype(out_dt, copy=False), order="C")
