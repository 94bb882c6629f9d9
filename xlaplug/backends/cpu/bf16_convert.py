"""f32 <-> bf16 arrays in numba loops: the conversions every bf16 kernel pays at its edges.

bf16 values travel through compiled code as float32 (jit_drivers.numba_array) and are
rounded back when a kernel's result is built (from_numba, the dot kernel's result, the
interpreted elementwise kernels' fout).  ml_dtypes' `astype(bfloat16)` -- one C++ call per
element through numpy's casting machinery -- took 0.9 ms per million elements on the session's
machine, on one core: in the bf16 transformer block (issue 23) about 5M elements a run, a
fifth of the gap to XLA:CPU.  `to_bf16` gives the same bits from the f32 bit pattern in
integer lanes (LLVM vectorizes it; over numba's threads from PARALLEL_FROM elements):

    NaN (|bits| > 0x7F800000)  ->  its sign | 0x7FC0      (ml_dtypes' quiet NaN)
    anything else              ->  (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16

round to nearest even on the bits, so subnormals round on bf16's grid (no flush: a caller
flushes first where XLA flushes) and overflow carries into infinity -- ml_dtypes'
float_to_bfloat16_rtne, without its per-element call.  `to_f32` is the exact widening
(bits << 16).  Integer code only: the FTZ/DAZ bits of the caller do not change a result.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from ...hlo import dtypes as D
from ..common.scalar_float_bits import _bf16_round_bits, _bf16_widen_bits
from .jit_store import cached_njit

# Below this many elements one thread converts.  Measured on the quiet 13-core host
# (2026-12-06 02:12 UTC, load 0.00, the bf16 transformer block, conversions of up to 1M
# elements): over numba's threads from 256K elements the block took 33.1 ms, on the calling
# thread 23.4 ms (XLA:CPU 15.9) -- waking the team beside BLAS threads still spinning after
# the product costs more than a conversion (0.1 ms per million elements) saves.
PARALLEL_FROM = 1 << 24

_F32 = np.dtype(np.float32)


def is_bf16(dt) -> bool:
    """Whether `dt` is ml_dtypes' bfloat16, told by name: a process that runs no bf16
    does not import ml_dtypes (tests/test_startup.py).  Its kind first: ml_dtypes' types
    are all "V", and `name` costs ~1.5 us (every dot asks, several times a step)."""
    dt = np.dtype(dt)
    return dt.kind == "V" and dt.name == "bfloat16"


# The bit rules (the module docstring's two cases), shared with the loops that store bf16.
_rounded, _widened = _bf16_round_bits, _bf16_widen_bits


@cached_njit(nogil=True)
def _round_serial(bits, out):
    for i in range(bits.shape[0]):
        out[i] = _rounded(bits[i])


@cached_njit(nogil=True, parallel=True)
def _round_parallel(bits, out):
    for i in prange(bits.shape[0]):
        out[i] = _rounded(bits[i])


@cached_njit(nogil=True)
def _widen_serial(bits, out):
    for i in range(bits.shape[0]):
        out[i] = _widened(bits[i])


@cached_njit(nogil=True, parallel=True)
def _widen_parallel(bits, out):
    for i in prange(bits.shape[0]):
        out[i] = _widened(bits[i])


def to_bf16(x, parallel: bool = True) -> np.ndarray:
    """A float32 array -> bf16 (ml_dtypes' bfloat16), rounded to nearest even, its shape
    kept; any other array -> `astype(bfloat16)`.  `parallel=False`: on the calling thread
    only (a device that runs beside others)."""
    x = np.asarray(x)
    bf16 = D.to_dtype("bf16")
    if x.dtype != _F32 or x.size < 64:
        with np.errstate(invalid="ignore", over="ignore"):
            return x.astype(bf16)
    flat = np.ascontiguousarray(x).reshape(-1).view(np.uint32)
    out = np.empty(flat.shape[0], np.uint16)
    (_round_parallel if parallel and flat.shape[0] >= PARALLEL_FROM else _round_serial)(
        flat, out)
    return out.view(bf16).reshape(x.shape)


def to_f32(x, parallel: bool = True) -> np.ndarray:
    """A bf16 array -> float32 (exact), its shape kept; any other array -> astype."""
    x = np.asarray(x)
    if not is_bf16(x.dtype) or x.size < 64:
        return x.astype(_F32)
    flat = np.ascontiguousarray(x).reshape(-1).view(np.uint16)
    out = np.empty(flat.shape[0], np.uint32)
    (_widen_parallel if parallel and flat.shape[0] >= PARALLEL_FROM else _widen_serial)(
        flat, out)
    return out.view(_F32).reshape(x.shape)
