"""Several devices' matrix products as one parallel call, the gemms on numba's threads with no
Python (and no GIL) between them: what lets devices that take turns on one thread (fibers,
runtime/spmd/device_fibers.py) still compute their products at once.

Each product is the very call numpy's matmul makes for it (numpy/_core/src/umath/matmul.c.src:
`cblas_?gemm`, row-major, each operand transposed or not by its strides, the same leading
dimensions), into numpy's own BLAS library, on one BLAS thread, with the MXCSR's FTZ and DAZ
bits set as the dot kernel sets them on its calling thread (denormals.py) -- so each product
has the bits `lhs @ rhs` gives.  Those bits are set per gemm and put back after it: numba's
threads keep IEEE arithmetic for the parallel fused loops they also run (a thread starts
with its creator's MXCSR, so the calling thread clears the bits while the gang runs).  A member that numpy would route elsewhere (an operand with no
unit stride, a matrix times its own transpose: syrk) is computed by `@` itself.

`gemm_library()` finds numpy's `cblas_sgemm` / `cblas_dgemm` of a 64-bit-integer OpenBLAS (the
`...64_` symbols numpy's wheels carry); where there is none, or off x86-64, there is no gang
and every device computes its own products.
"""
from __future__ import annotations

import ctypes
import functools
import os
import platform
import sys

import numpy as np

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112


def gemm_library() -> dict | None:
    """{np.float32: address of cblas_sgemm, np.float64: of cblas_dgemm} in numpy's BLAS (an
    ILP64 OpenBLAS), else None."""
    return numpy_blas_functions("cblas_sgemm64_", "cblas_dgemm64_")


@functools.lru_cache(maxsize=4)
def numpy_blas_functions(single: str, double: str) -> dict | None:
    """{np.float32: address of `single`, np.float64: of `double`} in numpy's BLAS (an ILP64
    OpenBLAS, its symbols with or without the `scipy_` prefix), else None."""
    if not (sys.platform.startswith("linux")
            and platform.machine().lower() in ("x86_64", "amd64")):
        return None
    try:
        from threadpoolctl import ThreadpoolController
        root = os.path.dirname(os.path.dirname(np.__file__))
        paths = [lib.filepath for lib in ThreadpoolController().select(
            internal_api="openblas").lib_controllers
            if os.path.realpath(lib.filepath).startswith(os.path.realpath(root))
            and "numpy" in os.path.basename(os.path.dirname(lib.filepath))]
        for path in paths:
            lib = ctypes.CDLL(path)
            for prefix in ("scipy_", ""):
                try:
                    s = getattr(lib, f"{prefix}{single}")
                    d = getattr(lib, f"{prefix}{double}")
                except AttributeError:
                    continue
                return {np.dtype(np.float32): ctypes.cast(s, ctypes.c_void_p).value,
                        np.dtype(np.float64): ctypes.cast(d, ctypes.c_void_p).value}
    except (ImportError, OSError):
        return None
    return None


def _blasable(s1: int, s2: int, d2: int, size: int) -> bool:
    """matmul.c.src's is_blasable2d."""
    return s2 == size and s1 % size == 0 and s1 // size >= d2


def _layout(x: np.ndarray) -> tuple[int, int] | None:
    """(transpose flag, leading dimension) numpy's matmul passes for operand `x` (2-D),
    None when it is not blasable."""
    (d1, d2), (s1, s2), size = x.shape, x.strides, x.itemsize
    if _blasable(s1, s2, d2, size):
        return NO_TRANS, s1 // size
    if _blasable(s2, s1, d1, size):
        return TRANS, s2 // size
    return None


def run_gang(members: list[tuple[np.ndarray, np.ndarray, np.ndarray]], threads: int) -> None:
    """out[...] = lhs @ rhs for every (lhs, rhs, out) of `members` (2-D, one real dtype,
    the same shapes; out C-contiguous), the gemms at once on up to `threads` threads."""
    lhs0, rhs0, _ = members[0]
    m, n = lhs0.shape
    p = rhs0.shape[1]
    # per gemm, as pool_gemm's loop takes them: transpose flags, rows, columns, addresses
    # and leading dimensions of lhs, rhs, out (one array: each array argument costs numba's
    # dispatcher microseconds to type)
    calls = np.empty((len(members), 9), np.int64)
    ganged = 0
    for lhs, rhs, out in members:
        la, lb = _layout(lhs), _layout(rhs)
        pa, pb = lhs.__array_interface__["data"][0], rhs.__array_interface__["data"][0]
        if la is None or lb is None or (pa == pb and la[0] != lb[0] and m == p
                                        and lhs.strides == rhs.strides[::-1]):
            np.matmul(lhs, rhs, out=out)  # numpy copies, or takes syrk: as `@` does
            continue
        calls[ganged] = (la[0], lb[0], m, p, pa, la[1], pb, lb[1],
                         out.__array_interface__["data"][0])
        ganged += 1
    if ganged == 0:
        return
    from .pool_gemm import gemm_loop
    from .team_size import spread
    loop = gemm_loop(lhs0.dtype == np.float32)
    with spread(ganged, threads):  # in `threads` chunks, the team kept (team_size.Spread)
        loop(gemm_library()[lhs0.dtype], calls[:ganged], n, p)


def ganged_product(ins, lhs: np.ndarray, rhs: np.ndarray, ctx) -> np.ndarray:
    """lhs @ rhs of dot `ins` on this device, computed with the other members' of
    `ctx.spmd.gang` (runtime/spmd/gang.py): meets them; the last to arrive runs every gemm.
    The result's buffer comes from the context's pool (spmd/buffers.py): fresh 512 KiB
    results of four devices at once went back to the system and faulted in again each call
    (~480 page faults a product, twice the CPU time of the step's gemms on 2 cores)."""
    from ..spmd.buffers import BufferPool
    place = ctx.spmd
    gang = place.gang
    m, n = lhs.shape[0], rhs.shape[1]
    pool = ctx.kernel_cache.table("spmd").setdefault("results", BufferPool())
    out = pool.take(lhs.dtype, m * n).reshape(m, n)
    place.share_by_last(ins, gang.group, (lhs, rhs, out),
                        lambda every: run_gang(every, gang.threads))
    return out
