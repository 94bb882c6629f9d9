"""CUDA elementwise kernels against the CPU backend, on the same HLO.

The CPU backend is the oracle here (it is verified against XLA:CPU by
test_kernels_elementwise.py): each test runs one module on `cuda` and on `cpu` and compares
every output -- integers, pred and non-transcendental floats exactly (sign of zero included,
NaN payloads ignored), transcendentals within TRANSCENDENTAL_ULP.  Modules come from jax
lowerings; ops jax does not emit directly (integer power, logistic, TOTALORDER compares,
stochastic-convert, reduce-precision...) are written as HLO text.

Runs under numba's CUDA simulator by default (tests/conftest.py sets NUMBA_ENABLE_CUDASIM=1;
scripts/gpu_check.sh runs it with NUMBA_ENABLE_CUDASIM=0 on a GPU), so shapes are tiny.
`test_ptx_compiles` additionally compiles a representative set of kernels to PTX for a real
GPU when NVVM is installed (pip package nvidia-cuda-nvcc-cu12); it is skipped otherwise.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from jax import lax

jax.config.update("jax_enable_x64", True)

from xlaplug.backends.common.errors import ExecutionError  # noqa: E402
from xlaplug.backends.executor import run_module  # noqa: E402
from xlaplug.hlo import dtypes as D  # noqa: E402
from xlaplug.hlo.parser import parse_module  # noqa: E402
from oracle import ulp_distance  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

TRANSCENDENTAL = {"exponential", "exponential-minus-one", "log", "log-plus-one", "logistic",
                  "rsqrt", "cbrt", "sine", "cosine", "tan", "tanh", "erf", "atan2", "power"}
# libdevice's float64 functions are within 1-2 ULP, numpy's within ~1: their distance is at
# most about their sum.  f32/f16 results are float64 results rounded once.
TRANSCENDENTAL_ULP = {"f16": 1, "f32": 2, "f64": 4, "c64": 2, "c128": 4}


# ---- helpers ---------------------------------------------------------------------------------

def _outputs(v) -> list[np.ndarray]:
    return [np.asarray(x) for x in (v if isinstance(v, tuple) else (v,))]


def run_both(module_or_text, args):
    """(cuda outputs, cpu outputs) of one module."""
    text = module_or_text if isinstance(module_or_text, str) else \
        module_or_text.as_text(dialect="hlo")
    args = [np.asarray(a) for a in args]
    gpu = _outputs(run_module(parse_module(text), args, device="cuda"))
    with np.errstate(all="ignore"):
        cpu = _outputs(run_module(parse_module(text), args))
    return gpu, cpu


def lowered(f, *args):
    return jax.jit(f, keep_unused=True).lower(*args)


def assert_match(got, want, ulp=0, what=""):
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != cpu's {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != cpu's {want.shape}"
    if got.dtype.kind == "c":
        assert_match(got.real.copy(), want.real.copy(), ulp, what + " (real)")
        assert_match(got.imag.copy(), want.imag.copy(), ulp, what + " (imag)")
        return
    g, w = got.reshape(-1), want.reshape(-1)
    if got.dtype.kind == "f":
        bad = np.nonzero(ulp_distance(g, w) > ulp)[0]
    else:
        bad = np.nonzero(g != w)[0]
    assert bad.size == 0, (f"{what}: {bad.size} of {g.size} elements differ (> {ulp} ULP); "
                           f"first at {bad[:4]}: cuda={g[bad[:4]]} cpu={w[bad[:4]]}")


def check_all(names, gpu, cpu, t=None):
    assert len(gpu) == len(cpu) == len(names)
    for n, g, c in zip(names, gpu, cpu):
        tol = TRANSCENDENTAL_ULP.get(t or D.from_dtype(g.dtype), 2) \
            if n in TRANSCENDENTAL else 0
        assert_match(g, c, tol, n)


def float_values(t: str) -> np.ndarray:
    """A few ordinary values and every kind of edge (zeros, subnormals, inf, NaN, max)."""
    dt = np.dtype(D.to_dtype(t))
    fi = np.finfo(dt)
    vals = [0.0, -0.0, 1.0, -2.5, 0.3, 7.25, -0.75, 100.0, float(fi.max), float(fi.tiny) / 4,
            -float(fi.tiny), np.inf, -np.inf, np.nan]
    with np.errstate(all="ignore"):
        return np.array(vals).astype(dt)


def int_values(t: str) -> np.ndarray:
    info = np.iinfo(D.to_dtype(t))
    vals = [0, 1, 2, 7, 33, 100, int(info.max), int(info.min), -1, -3, -64]
    vals = [v for v in vals if info.min <= v <= info.max]
    return np.array(vals, dtype=object).astype(D.to_dtype(t))


def hlo_module(ops: list[tuple[str, str, str]], params: list[str]) -> str:
    """An HLO module: params are shapes ("f32[6]"), ops are (name, shape, rhs); the ROOT is a
    tuple of the ops."""
    lines = ["HloModule m", "", "ENTRY main {"]
    lines += [f"  p{i} = {s} parameter({i})" for i, s in enumerate(params)]
    lines += [f"  {n} = {s} {rhs}" for n, s, rhs in ops]
    shapes = ", ".join(s for _, s, _ in ops)
    lines += [f"  ROOT t = ({shapes}) tuple({', '.join(n for n, _, _ in ops)})", "}"]
    return "\n".join(lines) + "\n"


# ---- real floats -----------------------------------------------------------------------------

RM = lax.RoundingMethod
FLOAT_UNARY = {
    "exponential": lax.exp, "exponential-minus-one": lax.expm1, "log": lax.log,
    "log-plus-one": lax.log1p, "sqrt": lax.sqrt, "rsqrt": lax.rsqrt, "cbrt": lax.cbrt,
    "sine": lax.sin, "cosine": lax.cos, "tan": lax.tan, "tanh": lax.tanh, "erf": lax.erf,
    "floor": lax.floor, "ceil": lax.ceil,
    "round-nearest-afz": lambda x: lax.round(x, RM.AWAY_FROM_ZERO),
    "round-nearest-even": lambda x: lax.round(x, RM.TO_NEAREST_EVEN),
    "sign": lax.sign, "abs": lax.abs, "negate": lax.neg, "is-finite": lax.is_finite,
}


@pytest.mark.parametrize("t", ["f16", "f32", "f64"])
def test_float_unary(t):
    x = float_values(t)
    names = list(FLOAT_UNARY)
    gpu, cpu = run_both(lowered(lambda x: tuple(FLOAT_UNARY[n](x) for n in names), x), [x])
    check_all(names, gpu, cpu, t)


@pytest.mark.parametrize("t", ["f16", "f32", "f64"])
def test_logistic(t):
    x = float_values(t)
    text = hlo_module([("l", f"{t}[{x.size}]", "logistic(p0)")], [f"{t}[{x.size}]"])
    check_all(["logistic"], *run_both(text, [x]), t)


FLOAT_BINARY = {"add": lax.add, "subtract": lax.sub, "multiply": lax.mul, "divide": lax.div,
                "remainder": lax.rem, "power": lax.pow, "atan2": lax.atan2,
                "maximum": lax.max, "minimum": lax.min}


@pytest.mark.parametrize("t", ["f16", "f32", "f64"])
def test_float_binary(t):
    v = float_values(t)[[0, 1, 2, 3, 4, 8, 9, 10, 11, 13]]
    a, b = (g.reshape(-1) for g in np.meshgrid(v, v[::3], indexing="ij"))
    names = list(FLOAT_BINARY)
    gpu, cpu = run_both(lowered(lambda a, b: tuple(FLOAT_BINARY[n](a, b) for n in names),
                                a, b), [a, b])
    check_all(names, gpu, cpu, t)


@pytest.mark.parametrize("t", ["f16", "f32", "f64"])
def test_float_compare(t):
    v = float_values(t)[[0, 1, 2, 3, 9, 10, 11, 13]]
    a, b = (g.reshape(-1) for g in np.meshgrid(v, v[::2], indexing="ij"))
    n = a.size
    ops = []
    for d in ("EQ", "NE", "LT", "LE", "GT", "GE"):
        ops.append((f"c{d}", f"pred[{n}]", f"compare(p0, p1), direction={d}"))
    for d in ("EQ", "LT", "GE"):
        ops.append((f"o{d}", f"pred[{n}]", f"compare(p0, p1), direction={d}, type=TOTALORDER"))
    gpu, cpu = run_both(hlo_module(ops, [f"{t}[{n}]"] * 2), [a, b])
    check_all([o[0] for o in ops], gpu, cpu)


# ---- complex ---------------------------------------------------------------------------------

COMPLEX_UNARY = {
    "exponential": lax.exp, "exponential-minus-one": lax.expm1, "log": lax.log,
    "log-plus-one": lax.log1p, "sqrt": lax.sqrt, "rsqrt": lax.rsqrt, "sine": lax.sin,
    "cosine": lax.cos, "tan": lax.tan, "tanh": lax.tanh, "sign": lax.sign, "abs": lax.abs,
    "negate": lax.neg, "real": lax.real, "imag": lax.imag,
}
COMPLEX_BINARY = {"add": lax.add, "subtract": lax.sub, "multiply": lax.mul, "divide": lax.div,
                  "power": lax.pow, "eq": lax.eq, "ne": lax.ne}


def complex_values(t: str) -> np.ndarray:
    re = np.array([0.5, -1.25, 0.0, 3.0, -0.0, 1e-3, 2.0, np.inf, np.nan, 1e-40])
    im = np.array([1.5, 0.25, -2.0, 0.0, 0.0, -4.0, 2.0, 1.0, 0.5, 1.0])
    return (re + 1j * im).astype(D.to_dtype(t))


@pytest.mark.parametrize("t", ["c64", "c128"])
def test_complex_unary(t):
    x = complex_values(t)
    names = list(COMPLEX_UNARY)
    gpu, cpu = run_both(lowered(lambda x: tuple(COMPLEX_UNARY[n](x) for n in names), x), [x])
    check_all(names, gpu, cpu, t)


@pytest.mark.parametrize("t", ["c64", "c128"])
def test_complex_binary(t):
    v = complex_values(t)[:7]
    a, b = (g.reshape(-1) for g in np.meshgrid(v, v[::2], indexing="ij"))
    names = list(COMPLEX_BINARY) + ["complex"]
    comp = np.float32 if t == "c64" else np.float64
    gpu, cpu = run_both(lowered(lambda a, b, r: tuple(COMPLEX_BINARY[n](a, b) for n in names[:-1])
                                + (lax.complex(r, r[::-1]),), a, b, a.real.astype(comp)),
                        [a, b, a.real.astype(comp)])
    check_all(names, gpu, cpu, t)


# ---- integers and pred -----------------------------------------------------------------------

INT_TYPES = ["s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64"]


@pytest.mark.parametrize("t", INT_TYPES)
def test_int_ops(t):
    v = int_values(t)
    a, b = (g.reshape(-1) for g in np.meshgrid(v, v[::2], indexing="ij"))
    n = a.size
    s = f"{t}[{n}]"
    bin_ops = ["add", "subtract", "multiply", "divide", "remainder", "power", "maximum",
               "minimum", "and", "or", "xor", "shift-left", "shift-right-logical",
               "shift-right-arithmetic"]
    ops = [(op.replace("-", "_"), s, f"{op}(p0, p1)") for op in bin_ops]
    ops += [(op.replace("-", "_"), s, f"{op}(p0)") for op in
            ("not", "negate", "abs", "sign", "popcnt", "count-leading-zeros")]
    ops += [(f"c{d}", f"pred[{n}]", f"compare(p0, p1), direction={d}")
            for d in ("EQ", "NE", "LT", "GE")]
    ops += [("cu", f"pred[{n}]", "compare(p0, p1), direction=LT, type=UNSIGNED")]
    gpu, cpu = run_both(hlo_module(ops, [s, s]), [a, b])
    check_all([o[0] for o in ops], gpu, cpu)


def test_pred_ops():
    a = np.array([True, True, False, False])
    b = np.array([True, False, True, False])
    ops = [(op, "pred[4]", f"{op}(p0, p1)") for op in ("and", "or", "xor", "add", "multiply",
                                                      "maximum", "minimum")]
    ops += [("not", "pred[4]", "not(p0)"), ("eq", "pred[4]", "compare(p0, p1), direction=EQ"),
            ("lt", "pred[4]", "compare(p0, p1), direction=LT")]
    gpu, cpu = run_both(hlo_module(ops, ["pred[4]", "pred[4]"]), [a, b])
    check_all([o[0] for o in ops], gpu, cpu)


# ---- select, clamp (scalar broadcast) --------------------------------------------------------

@pytest.mark.parametrize("t", ["f32", "s32", "u8", "pred", "c64", "f16"])
def test_select_clamp(t):
    if t == "pred":
        x, y = np.array([True, False, True, False, True]), np.array([False] * 5)
    elif t == "c64":
        x = complex_values(t)[:5]
        y = x[::-1].copy()
    else:
        vals = np.resize(float_values(t) if t[0] == "f" else int_values(t), 10)
        x, y = vals[:5], vals[5:10]
    p = np.array([True, False, False, True, True])
    s = f"{t}[5]"
    ops = [("sel", s, "select(p0, p1, p2)"), ("sels", s, "select(p3, p1, p2)")]
    if t != "c64":
        ops += [("clamp", s, "clamp(p2, p1, p4)"), ("clamps", s, "clamp(p5, p1, p6)")]
    params = ["pred[5]", s, s, "pred[]", s, f"{t}[]", f"{t}[]"]
    args = [p, x, y, np.array(False), np.maximum(x, y) if t != "c64" else x,
            np.asarray(y[1]), np.asarray(x[3])]
    gpu, cpu = run_both(hlo_module(ops, params), args)
    check_all([o[0] for o in ops], gpu, cpu)


# ---- conversions -----------------------------------------------------------------------------

ALL_TYPES = ["pred", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "f16", "f32", "f64",
             "c64", "c128"]


def values_of(t: str) -> np.ndarray:
    if t == "pred":
        return np.array([True, False, True, True, False, False, True, False, True, False])
    if t in ("c64", "c128"):
        return complex_values(t)
    if t[0] == "f":
        v = float_values(t)
        with np.errstate(over="ignore"):
            more = np.array([1e10, -3e9, 255.5, -128.5, 65535.0, 2.0 ** 63]).astype(v.dtype)
        return np.concatenate([v, more])
    return int_values(t)


@pytest.mark.parametrize("f", ALL_TYPES)
def test_convert(f):
    x = values_of(f)
    n = x.size
    ops = [(f"to_{t}", f"{t}[{n}]", "convert(p0)") for t in ALL_TYPES
           if not (f in ("c64", "c128") and t not in ("c64", "c128"))]  # XLA: complex->real
    gpu, cpu = run_both(hlo_module(ops, [f"{f}[{n}]"]), [x])
    check_all([o[0] for o in ops], gpu, cpu)


BITCASTS = [("f32", "s32", ()), ("s32", "f32", ()), ("f64", "u64", ()), ("u16", "f16", ()),
            ("f16", "s16", ()), ("f32", "u8", (4,)), ("u8", "f32", None), ("f64", "s32", (2,)),
            ("c64", "f64", ()), ("s8", "pred", ())]


@pytest.mark.parametrize("f,t,minor", BITCASTS, ids=[f"{a}-{b}" for a, b, _ in BITCASTS])
def test_bitcast_convert(f, t, minor):
    if minor is None:  # narrower -> wider: the minor dimension merges
        k = D.bit_width(t) // D.bit_width(f)
        x = np.arange(6 * k, dtype=np.uint8).reshape(6, k) * 37
        in_shape, out_shape = f"{f}[6,{k}]", f"{t}[6]"
    else:
        x = values_of(f)[:6] if f != "s8" else np.array([0, 1, 0, 1, 1, 0], np.int8)
        in_shape = f"{f}[6]"
        out_shape = f"{t}[6{''.join(f',{d}' for d in minor)}]"
    text = hlo_module([("b", out_shape, "bitcast-convert(p0)")], [in_shape])
    gpu, cpu = run_both(text, [x])
    if gpu[0].dtype.kind == "f":  # bits: compare the patterns, NaN payloads included
        gpu = [gpu[0].view(f"u{gpu[0].dtype.itemsize}")]
        cpu = [cpu[0].view(f"u{cpu[0].dtype.itemsize}")]
    check_all(["bitcast-convert"], gpu, cpu)


@pytest.mark.parametrize("t", ["f16", "f32", "f64"])
def test_reduce_precision(t):
    x = float_values(t)
    n = x.size
    ops = [(f"r{e}_{m}", f"{t}[{n}]", f"reduce-precision(p0), exponent_bits={e}, "
            f"mantissa_bits={m}") for e, m in ((5, 10), (8, 7), (4, 3), (11, 52), (2, 1))]
    gpu, cpu = run_both(hlo_module(ops, [f"{t}[{n}]"]), [x])
    check_all([o[0] for o in ops], gpu, cpu)


@pytest.mark.parametrize("f,r,t", [("f32", "u32", "s32"), ("f16", "u16", "s8"),
                                   ("f64", "u64", "s64"), ("f32", "u32", "s16")])
def test_stochastic_convert(f, r, t):
    x = values_of(f)
    x = np.concatenate([x, np.array([2.5, -2.5, 0.75, -127.3]).astype(x.dtype)])
    bits = np.random.default_rng(5).integers(0, np.iinfo(D.to_dtype(r)).max, x.size,
                                             dtype=np.uint64, endpoint=True).astype(D.to_dtype(r))
    text = hlo_module([("s", f"{t}[{x.size}]", "stochastic-convert(p0, p1)")],
                      [f"{f}[{x.size}]", f"{r}[{x.size}]"])
    check_all(["stochastic-convert"], *run_both(text, [x, bits]))


# ---- flush-to-zero ---------------------------------------------------------------------------

def test_flush_to_zero_like_cpu():
    """f32/f64 arithmetic reads and writes subnormals as zeros (XLA:CPU), abs/negate don't."""
    x = np.array([1e-40, -1e-40, 1e-39, 3e-39], np.float32)
    y = np.array([1e-40, 1e-40, -5e-40, 1.0], np.float32)
    ops = [("add", "f32[4]", "add(p0, p1)"), ("mul", "f32[4]", "multiply(p1, p2)"),
           ("abs", "f32[4]", "abs(p0)"), ("neg", "f32[4]", "negate(p0)"),
           ("cmp", "pred[4]", "compare(p0, p1), direction=EQ")]
    gpu, cpu = run_both(hlo_module(ops, ["f32[4]", "f32[4]", "f32[4]"]),
                        [x, y, np.full(4, 1e-20, np.float32)])
    check_all([o[0] for o in ops], gpu, cpu)
    assert gpu[0][0] == 0 and gpu[2][0] == np.float32(1e-40)


# ---- shapes: several blocks, rank 2 and 0, empty ---------------------------------------------

def test_shapes_blocks_and_empty():
    a = np.linspace(-3, 3, 320, dtype=np.float32).reshape(20, 16)
    ops = [("m", "f32[20,16]", "multiply(p0, p0)"), ("s", "f32[]", "sine(p1)"),
           ("e", "f32[0,3]", "add(p2, p2)"), ("c", "pred[20,16]", "compare(p0, p3), direction=GT"),
           ("sel", "f32[20,16]", "select(p4, p0, p3)")]
    params = ["f32[20,16]", "f32[]", "f32[0,3]", "f32[20,16]", "pred[]"]
    args = [a, np.float32(0.5), np.zeros((0, 3), np.float32), a[::-1].copy(), np.array(False)]
    gpu, cpu = run_both(hlo_module(ops, params), args)
    check_all([o[0] for o in ops], gpu, cpu, "f32")
    assert gpu[2].shape == (0, 3) and gpu[1].shape == ()


# ---- errors ----------------------------------------------------------------------------------

# ---- launch helpers and scalar device functions ----------------------------------------------

def test_launch_helpers():
    from xlaplug.backends.cuda import launch
    from xlaplug.hlo.ir import Shape
    out = launch.device_zeros(Shape("c64", (2, 3)))
    assert out.shape == (2, 3) and out.dtype == np.complex64
    assert not out.copy_to_host().any()
    assert launch.device_empty(Shape("pred", ())).shape == ()
    blocks, threads = launch.grid_1d(1000)
    assert blocks * threads >= 1000
    assert launch.grid_1d(0)[0] >= 1
    assert launch.is_device_array(out) and not launch.is_device_array(np.zeros(2))


_REDUCER = """HloModule m
fn {
  a = f32[] parameter(0)
  ai = s32[] parameter(1)
  b = f32[] parameter(2)
  bi = s32[] parameter(3)
  gt = pred[] compare(a, b), direction=GT
  m = f32[] multiply(a, b)
  v = f32[] add(m, b)
  i = s32[] select(gt, ai, bi)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
ENTRY e {
  p = f32[2] parameter(0)
  ROOT r = f32[2] negate(p)
}
"""


def test_scalar_device_function_matches_cpu():
    from xlaplug.backends.cpu.scalar_jit import compile_scalar_computation
    from xlaplug.backends.cuda.launch import cuda_module, jit_source, launch_1d
    from xlaplug.backends.cuda.scalar_cuda import compile_scalar_device_function
    comp = [c for c in parse_module(_REDUCER).computations if c.name == "fn"][0]
    dev = compile_scalar_device_function(comp)
    assert dev is compile_scalar_device_function(comp)  # cached
    assert dev.param_types == ("f32", "s32", "f32", "s32")
    assert dev.result_types == ("f32", "s32")
    src = ("def _k(o0, o1, a, ai, b, bi):\n    i = cuda.grid(1)\n    if i < o0.shape[0]:\n"
           "        r = _f(a[i], ai[i], b[i], bi[i])\n        o0[i] = r[0]\n        o1[i] = r[1]\n")
    k = jit_source(src, "_k", {"_f": dev})
    cuda = cuda_module()
    a = np.array([1.5, -2.0, 3e-39, 7.0], np.float32)
    b = np.array([0.1, 4.0, 1e-38, np.inf], np.float32)
    ai, bi = np.arange(4, dtype=np.int32), np.arange(4, dtype=np.int32) + 10
    o0, o1 = cuda.device_array(4, np.float32), cuda.device_array(4, np.int32)
    launch_1d(k, 4, o0, o1, *(cuda.to_device(v) for v in (a, ai, b, bi)))
    cpu = compile_scalar_computation(comp)
    want = [cpu(*args) for args in zip(a, ai, b, bi)]
    assert_match(o0.copy_to_host(), np.array([w[0] for w in want], np.float32), 0, "value")
    assert_match(o1.copy_to_host(), np.array([w[1] for w in want], np.int32), 0, "index")


# ---- PTX for a real GPU ----------------------------------------------------------------------

def _nvvm_available() -> bool:
    if os.environ.get("CUDA_HOME"):
        return True
    try:
        import nvidia.cuda_nvcc  # noqa: F401
        return True
    except ImportError:
        return False


@pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") != "1",
                    reason="on a GPU the tests above compile and run every kernel")
@pytest.mark.skipif(not _nvvm_available(), reason="NVVM not installed (pip install "
                    "nvidia-cuda-nvcc-cu12): cannot compile PTX without a GPU")
def test_ptx_compiles():
    """The simulator runs kernels as Python; this lowers a representative set through NVVM
    (scripts/cuda_ptx_check.py; --all checks every opcode x type)."""
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "cuda_ptx_check.py")],
                       capture_output=True, text=True, timeout=600,
                       env={**os.environ, "NUMBA_ENABLE_CUDASIM": "0"})
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "0 failed" in r.stdout
