"""Compile CUDA kernels for a real GPU (to PTX) without one: `python cuda_ptx_check.py GROUP...`.

The simulator runs kernels as Python and type-checks nothing, so a kernel that passes every
simulator test could still fail to compile on a GPU.  numba's compile_ptx needs only NVVM
(the CUDA toolkit), not a driver or a device: this script compiles each kernel of the named
groups (linalg, fft, rng, windows: reduce-window and select-and-scatter, jax_lapack: the
bundled plugin's kernels, rng_draws: rng and rng-get-and-update-state, elementwise:
scripts/cuda_ptx_check.py --sample 3) for representative argument types -- all of them when
none is named.  Each group's output starts with `== GROUP` and ends with
`GROUP: N kernels, M failed` (elementwise: `elementwise: exit CODE` after the script's own
report), one line a failure between.  All groups run in one process: tests/test_ptx.py runs
them once (numba.cuda's import, NVVM's start and the first compiles' setup once, not once a
group).  Exit status 0 when all compiled, 1 when one failed, 3 when NVVM is unavailable (the
caller fails with that).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["NUMBA_ENABLE_CUDASIM"] = "0"

import numpy as np  # noqa: E402


def _jobs(group: str) -> list:
    """(kernel, signature) for each kernel of `group`."""
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
    if group == "linalg":
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
    if group == "fft":
        for i in (np.float32, np.complex64, np.complex128, np.float64):
            jobs.append((F._c2c_kernel(i), (arr(np.complex128), arr(i), i64, i64, i64, i64,
                                            f64, f64)))
        jobs.append((F._c2r_kernel(np.complex128), (arr(np.float64), arr(np.complex128), i64,
                                                    i64, i64)))
    if group == "rng":
        for o in (np.uint8, np.uint16, np.uint32, np.uint64):
            for s in (np.uint64, np.int64):
                jobs.append((G._threefry_kernel, (arr(o), arr(s), i64, i64, i64, i64, b, u64)))
                jobs.append((G._philox_kernel, (arr(o), arr(s), i64, i64, b, u64, i64, i64)))
        for s in (np.uint64, np.int64):
            jobs.append((G._new_state_kernel, (arr(np.uint64), arr(s), b, i64, i64, i64, b)))
    if group == "windows":
        jobs += _window_jobs(arr, tup)
    if group == "jax_lapack":
        jobs += _jax_lapack_jobs()
    if group == "rng_draws":
        jobs += _rng_draw_jobs()
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


def _jax_lapack_jobs() -> list:
    """The bundled jax_lapack plugin's CUDA kernels, each element type."""
    from numba import types as T
    from numba.np.numpy_support import from_dtype

    from xlaplug.bundled_plugins.jax_lapack import _cuda_eigh as E
    from xlaplug.bundled_plugins.jax_lapack import _cuda_factor as F
    from xlaplug.bundled_plugins.jax_lapack import _cuda_qr as Q

    def arr(dt, nd):
        return T.Array(from_dtype(np.dtype(dt)), nd, "C")
    i32, b = arr(np.int32, 1), T.boolean
    jobs = []
    for dt in (np.float32, np.float64, np.complex64, np.complex128):
        s, r = from_dtype(np.dtype(dt)), from_dtype(np.finfo(dt).dtype)
        m3, m2, rv = arr(dt, 3), arr(dt, 2), arr(np.finfo(dt).dtype, 2)
        jobs += [(F.potrf_kernel, (m3, m3, i32, b, s, s)),
                 (F.getrf_kernel, (m3, m3, arr(np.int32, 2), i32, s, r)),
                 (F.trsm_kernel, (m3, m3, arr(dt, 1), m3) + (b,) * 5),
                 (F.zero_kernel, (arr(dt, 1), s)), (F.zero_kernel, (i32, T.int32)),
                 (Q.geqrf_kernel, (m3, m3, m2, s, s)), (Q.orgqr_kernel, (m3, m2, m3, s, s)),
                 (E.jacobi_kernel, (m3, m3, m3, rv, i32, b, b, s, s, r))]
    return jobs


def _rng_draw_jobs() -> list:
    """rng (uniform and normal draws) and rng-get-and-update-state's kernels."""
    from numba import types as T
    from numba.np import numpy_support

    from xlaplug.backends.cuda import rng_draws as G

    def arr(dt):
        return T.Array(numpy_support.from_dtype(np.dtype(dt)), 1, "C")
    u64, i64, b, f64 = T.uint64, T.int64, T.boolean, T.float64
    stream = (i64, u64, u64, u64, u64)
    jobs = [(G._uniform_sint_kernel, (arr(d), arr(d), arr(d)) + stream)
            for d in (np.int8, np.int16, np.int32, np.int64)]
    jobs += [(G._uniform_uint_kernel, (arr(d), arr(d), arr(d)) + stream)
             for d in (np.uint8, np.uint16, np.uint32, np.uint64)]
    jobs.append((G._uniform_uint_kernel, (arr(np.uint8), arr(np.bool_), arr(np.bool_)) + stream))
    uniform, normal = G._float_kernels()
    jobs += [(k, (arr(d), arr(d), arr(d)) + stream + (b, i64, i64, f64, i64))
             for d in (np.float16, np.float32, np.float64) for k in (uniform, normal)]
    jobs.append((G._state_init_kernel, (arr(np.uint64), u64, u64)))
    jobs.append((G._state_step_kernel, (arr(np.uint64), arr(np.uint64), u64, u64)))
    return jobs


def _check_ptx(group: str, name: str, ptx: str) -> None:
    """What a kernel's PTX must not hold: integer generators promoted to float64, and (the
    uniform draw) `lo + (hi - lo) * u` contracted to an FMA, which rounds differently from
    numpy's multiply then add."""
    if group == "rng" and name in ("_threefry_kernel", "_philox_kernel") and ".f64" in ptx:
        raise TypeError("integer generator promoted to float64")
    if group == "rng_draws":
        if name not in ("normal", "uniform") and ".f64" in ptx:
            raise TypeError("integer kernel promoted to float64")
        if name == "uniform" and "fma." in ptx:
            raise TypeError("lo + (hi - lo) * u contracted to an FMA")


def _elementwise() -> int:
    """scripts/cuda_ptx_check.py --sample 3, in this process: its exit status."""
    import importlib.util
    path = Path(__file__).resolve().parents[1] / "scripts" / "cuda_ptx_check.py"
    spec = importlib.util.spec_from_file_location("scripts_cuda_ptx_check", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script.main(["--sample", "3"])


GROUPS = ("elementwise", "linalg", "fft", "rng", "windows", "jax_lapack", "rng_draws")


def main(argv) -> int:
    groups = [g for g in GROUPS if g in argv] if argv else list(GROUPS)
    unknown = set(argv) - set(GROUPS)
    if unknown:
        print(f"unknown group(s) {sorted(unknown)}; the groups: {', '.join(GROUPS)}")
        return 2
    failed = False
    if "elementwise" in groups:  # first: it finds NVVM itself (CUDA_HOME) before numba does
        print("== elementwise", flush=True)
        rc = _elementwise()
        print(f"elementwise: exit {rc}", flush=True)
        failed = rc != 0
        groups.remove("elementwise")
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
    for group in groups:
        print(f"== {group}", flush=True)
        jobs = _jobs(group)
        bad = 0
        for k, sig in jobs:
            try:
                ptx, _ = cuda.compile_ptx(k.py_func, sig, cc=(8, 0))
                _check_ptx(group, k.py_func.__name__, ptx)
            except Exception as e:  # noqa: BLE001
                bad += 1
                msg = " | ".join(str(e).splitlines()[:6])
                print(f"FAIL {k.py_func.__name__} {sig}: {msg}")
        print(f"{group}: {len(jobs)} kernels, {bad} failed", flush=True)
        failed = failed or bad > 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
