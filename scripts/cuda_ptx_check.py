"""Compile the CUDA backend's generated kernels to PTX -- no GPU needed, only NVVM.

numba.cuda.compile_ptx needs libNVVM and libdevice, not a driver: with the pip package
`nvidia-cuda-nvcc-cu12` installed (or a CUDA toolkit under CUDA_HOME) this checks that every
elementwise kernel (and scalar device functions of HLO computations) type-checks and lowers
for a real GPU, which numba's simulator cannot tell.

    python scripts/cuda_ptx_check.py            # a representative subset (~1 min)
    python scripts/cuda_ptx_check.py --sample 2 # every 2nd signature of it (the test suite)
    python scripts/cuda_ptx_check.py --all      # every opcode x element type (minutes)

Exit status 0 when all compile, 1 when some fail, 3 when NVVM cannot be found.
Sets NUMBA_ENABLE_CUDASIM=0 itself (run it in its own process).
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
import types as pytypes


def _find_cuda_home() -> str | None:
    if os.environ.get("CUDA_HOME"):
        return os.environ["CUDA_HOME"]
    try:
        import nvidia.cuda_nvcc as nv  # pip install nvidia-cuda-nvcc-cu12
    except ImportError:
        return None
    for p in getattr(nv, "__path__", []):
        if os.path.isdir(os.path.join(p, "nvvm", "lib64")):
            return p
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--all", action="store_true", help="every opcode x element type")
    ap.add_argument("--sample", type=int, default=1, metavar="N",
                    help="compile every Nth elementwise signature (the other kernels all)")
    ap.add_argument("--cc", default="8.0", help="compute capability to target (default 8.0)")
    ap.add_argument("-v", "--verbose", action="store_true")
    opts = ap.parse_args(argv)
    home = _find_cuda_home()
    if home is None:
        print("NVVM not found: pip install nvidia-cuda-nvcc-cu12, or set CUDA_HOME")
        return 3
    os.environ["CUDA_HOME"] = home
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

    cc = tuple(int(v) for v in opts.cc.split("."))
    import numba.cuda.dispatcher as disp
    # Device functions ask the current device for its compute capability; there is none.
    disp.get_current_device = lambda: pytypes.SimpleNamespace(compute_capability=cc)

    import numpy as np
    from numba import types
    from numba.np import numpy_support

    from xlaplug.backends.common.scalar_ops import ScalarOpError
    from xlaplug.backends.cuda import elementwise as E
    from xlaplug.backends.cuda.launch import SUPPORTED_TYPES, device_dtype
    from xlaplug.hlo.opcodes import BINARY_ELEMENTWISE, UNARY_ELEMENTWISE

    def arr(t):  # narrow types (bf16, f8, s4...) live on the device in a wider dtype
        return types.Array(numpy_support.from_dtype(device_dtype(t)), 1, "C")

    ints = ["s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64"]
    floats = ["f16", "f32", "f64"]
    cplx = ["c64", "c128"]
    if not opts.all:
        ints = ["s8", "u64"]
    sigs = []
    cuda_ops = set(E.OPCODES)
    for op in sorted(UNARY_ELEMENTWISE & cuda_ops):
        for t in ints + floats + cplx + ["pred"]:
            rt = t
            if op in ("abs", "real", "imag") and t in cplx:
                rt = "f32" if t == "c64" else "f64"
            if op == "is-finite":
                rt = "pred"
            sigs.append((op, (t,), rt, {}))
    for f, t in itertools.product(sorted(SUPPORTED_TYPES) if opts.all else
                                  ["pred", "s8", "u32", "s64", "f16", "f32", "f64", "c64",
                                   "c128", "bf16", "f8e4m3fn", "s4"], repeat=2):
        sigs.append(("convert", (f,), t, {}))
    for op in sorted(BINARY_ELEMENTWISE & cuda_ops):
        if op in ("compare", "complex"):
            continue
        for t in ints + floats + cplx + ["pred", "bf16", "f8e5m2", "s4", "u2"]:
            sigs.append((op, (t, t), t, {}))
    for t in ints + floats + cplx + ["pred"]:
        for d in ("LT",) if not opts.all else ("EQ", "NE", "LT", "LE", "GT", "GE"):
            for ct in ("", "TOTALORDER", "UNSIGNED", "SIGNED", "FLOAT"):
                sigs.append(("compare", (t, t), "pred", {"direction": d, "type": ct}))
    sigs += [("complex", ("f32", "f32"), "c64", {}), ("complex", ("f64", "f64"), "c128", {})]
    for t in ints + floats + cplx + ["pred"]:
        sigs.append(("select", ("pred", t, t), t, {}))
        sigs.append(("clamp", (t, t, t), t, {}))
    for f in floats:
        for t in ("s8", "s32", "s64"):
            r = {"f16": "u16", "f32": "u32", "f64": "u64"}[f]
            sigs.append(("stochastic-convert", (f, r), t, {}))

    skipped = 0
    t0 = time.time()
    jobs = []
    for op, ins, out, attrs in sigs[::max(1, opts.sample)]:
        scalar = tuple(False for _ in ins)
        try:
            k = E.get_kernel(op, ins, out, attrs, scalar)
        except ScalarOpError:
            skipped += 1  # not defined for these types (the CPU rejects them too)
            continue
        jobs.append((f"{op} {ins} -> {out} {attrs or ''}", k,
                     (arr(out),) + tuple(arr(t) for t in ins)))
    # reduce-precision kernels
    from xlaplug.backends.cuda.launch import jit_source
    for n, e, m in E._RP.values():
        k = jit_source(E._reduce_precision_source(n, e, m, 5, 10), "_ew",
                       dict(E.cuda_namespace()))
        u = types.Array(numpy_support.from_dtype(np.dtype(f"uint{n}")), 1, "C")
        jobs.append((f"reduce-precision u{n}", k, (u, u)))
    jobs += _narrow_jobs() + _fused_loop_jobs()
    scalar_jobs = _scalar_function_jobs(arr)
    ok, fail = _compile_jobs(jobs + scalar_jobs, cc, opts.verbose)
    print(f"PTX check: {ok} kernels compiled ({len(scalar_jobs)} calling scalar device "
          f"functions), {fail} failed, {skipped} signatures not defined "
          f"({time.time() - t0:.0f} s)")
    return 1 if fail else 0


def _compile_jobs(jobs, cc, verbose: bool = False) -> tuple[int, int]:
    """Compile each (label, kernel, signature) to PTX; (compiled, failed), failures printed."""
    from numba import cuda
    ok = fail = 0
    for label, k, sig in jobs:
        try:
            cuda.compile_ptx(k.py_func, sig, cc=cc)
            ok += 1
            if verbose:
                print(f"ok    {label}", flush=True)
        except Exception as e:  # noqa: BLE001 - reported
            fail += 1
            msg = str(e).strip().splitlines()
            print(f"FAIL  {label}: {type(e).__name__}: {' | '.join(msg[:6])[:600]}", flush=True)
    return ok, fail


_COMPS = {
    "add_f32": ("f32", """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  m = f32[] multiply(a, b)
  ROOT r = f32[] add(m, b)
}
ENTRY e {
  p = f32[4] parameter(0)
  ROOT r = f32[4] map(p, p), dimensions={0}, to_apply=add
}
"""),
    "argmax_s32": ("s32", """HloModule m
argmax {
  a = f32[] parameter(0)
  ai = s32[] parameter(1)
  b = f32[] parameter(2)
  bi = s32[] parameter(3)
  gt = pred[] compare(a, b), direction=GT
  v = f32[] select(gt, a, b)
  i = s32[] select(gt, ai, bi)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
ENTRY e {
  p = f32[4] parameter(0)
  ROOT r = f32[4] map(p, p), dimensions={0}, to_apply=argmax
}
"""),
    "less_total_f16": ("f16", """HloModule m
cmp {
  a = f16[] parameter(0)
  b = f16[] parameter(1)
  ROOT r = pred[] compare(a, b), direction=LT, type=TOTALORDER
}
ENTRY e {
  p = f16[4] parameter(0)
  ROOT r = f16[4] map(p, p), dimensions={0}, to_apply=cmp
}
"""),
    "complex_math_c64": ("c64", """HloModule m
f {
  a = c64[] parameter(0)
  b = c64[] parameter(1)
  e = c64[] exponential(a)
  s = c64[] sqrt(b)
  m = c64[] multiply(e, s)
  d = c64[] divide(m, a)
  ROOT r = c64[] add(d, b)
}
ENTRY e {
  p = c64[4] parameter(0)
  ROOT r = c64[4] map(p, p), dimensions={0}, to_apply=f
}
"""),
    "bitcast_key_s32": ("s32", """HloModule m
f {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ai = s32[] bitcast(a)
  bi = s32[] bitcast(b)
  ROOT r = pred[] compare(ai, bi), direction=LT
}
ENTRY e {
  p = f32[4] parameter(0)
  ROOT r = f32[4] map(p, p), dimensions={0}, to_apply=f
}
"""),
}


def _narrow_jobs() -> list:
    """cuda/narrow.py: rounding after wide kernels, and the bit-pattern conversions."""
    import numpy as np
    from numba import types
    from numba.np import numpy_support

    from xlaplug.backends.cuda import narrow as N
    from xlaplug.backends.cuda.launch import NARROW_TYPES, device_dtype

    def arr(dt):
        return types.Array(numpy_support.from_dtype(np.dtype(dt)), 1, "C")
    jobs = []
    for t in sorted(NARROW_TYPES - {"f8e8m0fnu"}):
        jobs.append((f"narrow round {t}", N._kernel(("round", t), N._round_source(t), "canon"),
                     (arr(device_dtype(t)),)))
    for t in ("bf16", "f8e4m3fn", "f8e5m2", "f4e2m1fn", "s4", "u4"):
        for from_bits in (False, True):
            vals, bits = arr(device_dtype(t)), arr(N.bits_dtype(t))
            jobs.append((f"narrow {'from' if from_bits else 'to'}_bits {t}",
                         N.conversion_kernel(t, from_bits),
                         (vals, bits) if from_bits else (bits, vals)))
    return jobs


_FUSED = """HloModule m
fused {
  x = f32[64] parameter(0)
  s = f32[] parameter(1)
  h = f16[64] parameter(2)
  b = f32[64] broadcast(s), dimensions={}
  m = f32[64] multiply(x, b)
  e = f32[64] exponential(x)
  a = f32[64] add(m, e)
  hf = f32[64] convert(h)
  c = pred[64] compare(a, hf), direction=GT
  ROOT r = f32[64] select(c, a, hf)
}
ENTRY e {
  x = f32[64] parameter(0)
  s = f32[] parameter(1)
  h = f16[64] parameter(2)
  ROOT f = f32[64] fusion(x, s, h), kind=kLoop, calls=fused
}
"""


def _fused_loop_jobs() -> list:
    """cuda/fused_loop.py's kernel shape: a loop body in elementwise mode, one thread per
    element, a one-element parameter read at index 0."""
    import numpy as np
    from numba import float32, types
    from numba.np import numpy_support

    from xlaplug.backends.cuda.launch import jit_source
    from xlaplug.backends.cuda.scalar_cuda import compile_scalar_device_function
    from xlaplug.hlo import parse_module
    comp = [c for c in parse_module(_FUSED).computations if c.name == "fused"][0]
    fn = compile_scalar_device_function(comp, elementwise=True)
    src = ("def fk(N, out, a0, a1, a2):\n    i = cuda.grid(1)\n    if i < N:\n"
           "        out[i] = fn(a0[i], a1[0], float32(a2[i]))\n")
    k = jit_source(src, "fk", {"fn": fn, "float32": float32})

    def arr(dt):
        return types.Array(numpy_support.from_dtype(np.dtype(dt)), 1, "C")
    return [("fused loop kernel", k, (types.int64, arr(np.float32), arr(np.float32),
                                      arr(np.float32), arr(np.float16)))]


def _scalar_function_jobs(arr) -> list:
    """Each computation as a device function called from a kernel over its parameters."""
    from xlaplug.backends.cuda.launch import jit_source
    from xlaplug.backends.cuda.scalar_cuda import compile_scalar_device_function
    from xlaplug.hlo import parse_module
    jobs = []
    for name, (_, text) in _COMPS.items():
        module = parse_module(text)
        comp = [c for c in module.computations if c is not module.entry][0]
        fn = compile_scalar_device_function(comp)
        params = [p.shape.element_type for p in comp.parameters]
        args = ", ".join(f"a{k}" for k in range(len(params)))
        call = ", ".join(f"a{k}[i]" for k in range(len(params)))
        tup = comp.root.shape.is_tuple
        src = (f"def _k(out, {args}):\n    i = cuda.grid(1)\n    if i < out.shape[0]:\n"
               f"        r = _f({call})\n        out[i] = r{'[0]' if tup else ''}\n")
        out_t = comp.root.shape.tuple_shapes[0].element_type if tup else \
            comp.root.shape.element_type
        k = jit_source(src, "_k", {"_f": fn})
        jobs.append((f"scalar device function {name}", k,
                     (arr(out_t),) + tuple(arr(t) for t in params)))
    return jobs


if __name__ == "__main__":
    sys.exit(main())
