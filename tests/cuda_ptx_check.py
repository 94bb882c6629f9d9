"""Compile CUDA kernels for a real GPU (to PTX) without one: `python cuda_ptx_check.py GROUP...`.

The simulator runs kernels as Python and type-checks nothing, so a kernel that passes every
simulator test could still fail to compile on a GPU.  numba's compile_ptx needs only NVVM
(the CUDA toolkit), not a driver or a device: this script compiles each kernel of the named
groups (linalg, fft, rng, windows: reduce-window and select-and-scatter) for representative
argument types and prints one line per failure, then `N kernels, M failed`.  Exit status 0
when all compiled, 1 when one failed, 3 when NVVM is unavailable (the caller skips).
"""
from __future__ import annotations

import os
import sys

os.environ["NUMBA_ENABLE_CUDASIM"] = "0"

import numpy as np  # noqa: E402


def _jobs(groups):
    from numba import types as T

    from xlaplug.backends.cuda import fft as F
    from xlaplug.backends.cuda import convolution as C
    from xlaplug.backends.cuda import dot_complex as DC
    from xlaplug.backends.cuda import factorization as FA
    from xlaplug.backends.cuda import linalg as L
    from xlaplug.backends.cuda import rng as G

    def arr(dt, nd=1):
        return T.Array(L._nbt(dt), nd, "C")

    def tup(n):
        return T.UniTuple(T.int64, n)

    i64, b, f64, u64 = T.int64, T.boolean, T.float64, T.uint64
    jobs = []
    if "linalg" in groups:
        for mode, o, i in [("cast", np.float32, np.float16), ("cast", np.float16, np.float32),
                           ("cast", np.int64, np.uint8), ("cast", np.int64, np.bool_),
                           ("cast", np.complex64, np.float32),
                           ("cast", np.complex64, np.complex128), ("cast", np.int8, np.int64),
                           ("cast", np.uint64, np.int64), ("nonzero", np.bool_, np.int64),
                           ("real", np.float32, np.complex128),
                           ("cast", np.float32, np.float64)]:
            jobs.append((L._permute_kernel(mode, o, i), (arr(o), arr(i), tup(3), tup(3), i64)))
        for dt in (np.float32, np.float64, np.complex64, np.complex128, np.int64):
            jobs.append((L._matmul_kernel(dt, L.TILE), (arr(dt, 3),) * 3))
        for dt in (np.complex64, np.complex128):  # XLA's order of the four real sums
            jobs.append((DC.complex_matmul_kernel(dt, L.TILE), (arr(dt, 3),) * 3))
        for o, i in [(np.float32, np.float32), (np.int64, np.int8),
                     (np.complex128, np.complex128), (np.float32, np.float16)]:
            jobs.append((C._im2col_kernel(o, i), (arr(o), arr(i)) + (i64,) * 9 + (tup(2),) * 8))
        for w, i in [(np.float32, np.float16), (np.float64, np.float64),
                     (np.complex64, np.complex64)]:
            jobs.append((FA._cholesky_kernel(w, i), (arr(w, 3), arr(i, 3), b)))
        for w, a, bb in [(np.float32, np.float32, np.float32),
                         (np.complex128, np.complex64, np.complex128),
                         (np.float64, np.float32, np.float64)]:
            jobs.append((FA._trsm_kernel(w, a, bb), (arr(w, 3), arr(a, 3), arr(bb, 3)) + (b,) * 5))
    if "fft" in groups:
        for i in (np.float32, np.complex64, np.complex128, np.float64):
            jobs.append((F._c2c_kernel(i), (arr(np.complex128), arr(i), i64, i64, i64, i64,
                                            f64, f64)))
        jobs.append((F._c2r_kernel(np.complex128), (arr(np.float64), arr(np.complex128), i64,
                                                    i64, i64)))
    if "rng" in groups:
        for o in (np.uint8, np.uint16, np.uint32, np.uint64):
            for s in (np.uint64, np.int64):
                jobs.append((G._threefry_kernel, (arr(o), arr(s), i64, i64, i64, i64, b, u64)))
                jobs.append((G._philox_kernel, (arr(o), arr(s), i64, i64, b, u64, i64, i64)))
        for s in (np.uint64, np.int64):
            jobs.append((G._new_state_kernel, (arr(np.uint64), arr(s), b, i64, i64, i64, b)))
    if "windows" in groups:
        jobs += _window_jobs(arr, tup)
    return jobs


def _window_jobs(arr, tup):
    """reduce-window (one operand and two: a variadic reducer) and select-and-scatter's two
    phases, with scalar device functions standing in for the HLO computations."""
    from numba import types as T

    from xlaplug.backends.cuda import reductions as R
    from xlaplug.backends.cuda import windows as W
    from xlaplug.backends.cuda.launch import jit_source
    i64, f32, f16 = T.int64, np.float32, np.float16
    add = jit_source("def add(a, b):\n    return a + b\n", "add", device=True)
    pair = jit_source("def pair(a, i, b, j):\n    return (a, i) if a >= b else (b, j)\n",
                      "pair", device=True)
    ge = jit_source("def ge(a, b):\n    return a >= b\n", "ge", device=True)
    jobs = []
    for dt in (f32, f16):
        k = W.window_kernel(("ptx_rw", np.dtype(dt).str), W._window_src(1, [dt], False), "rw",
                            {"fn": add})
        jobs.append((k, (i64, i64) + (tup(2),) * 8 + (arr(dt),) * 3))
    k = W.window_kernel(("ptx_rw2",), W._window_src(2, [f32, np.int32], True), "rw",
                        {"fn": pair})
    jobs.append((k, (i64, i64) + (tup(3),) * 8 + (arr(f32), arr(np.int32)) * 3))
    src = W._SELECT_SRC.format(load_x0=R.load("x", "0", f32), load_x=R.load("x", "off", f32))
    k = W.window_kernel(("ptx_pick",), src, "pick", {"select": ge})
    jobs.append((k, (i64, i64) + (tup(2),) * 8 + (arr(f32), arr(np.int64))))
    src = W._SCATTER_SRC.format(load_init=R.load("init", "0", f32),
                                load_src=R.load("src", "s", f32))
    k = W.window_kernel(("ptx_apply",), src, "apply", {"scatter": add})
    jobs.append((k, (i64,) + (tup(2),) * 8 + (arr(np.int64), arr(f32), arr(f32), arr(f32))))
    return jobs


def main(argv) -> int:
    groups = set(argv) or {"linalg", "fft", "rng", "windows"}
    from numba import cuda
    try:  # NVVM present?
        from numba import float32
        cuda.compile_ptx(lambda a: None, (float32[::1],), cc=(8, 0))
    except Exception as e:  # noqa: BLE001
        print(f"NVVM unavailable: {e}".splitlines()[0])
        return 3
    # Device functions called from kernels compile for the current device's compute
    # capability; there is no device here, so name one.
    import numba.cuda.dispatcher as disp

    class _Dev:
        compute_capability = (8, 0)
    disp.get_current_device = lambda: _Dev()
    jobs = _jobs(groups)
    bad = 0
    for k, sig in jobs:
        try:
            ptx, _ = cuda.compile_ptx(k.py_func, sig, cc=(8, 0))
            if k.py_func.__name__ in ("_threefry_kernel", "_philox_kernel") and ".f64" in ptx:
                raise TypeError("integer generator promoted to float64")
        except Exception as e:  # noqa: BLE001
            bad += 1
            msg = " | ".join(str(e).splitlines()[:6])
            print(f"FAIL {k.py_func.__name__} {sig}: {msg}")
    print(f"{len(jobs)} kernels, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
