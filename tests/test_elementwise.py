"""Elementwise kernels on every device (tests/devices.py), one case table per op family.

On cpu the oracle is XLA:CPU (through jax).  Each test builds a program in jax, lowers it
to HLO text, runs it with xlaplug's interpreter and compares with jax's own result:
integers and pred exactly, floats bit-exactly (NaN payloads aside) except transcendentals,
which get the per-op ULP bounds in ULP_BOUNDS.  Ops jax never emits directly (integer
`power`, `logistic`, TOTALORDER compares, a direct float->pred `convert`) run as StableHLO
text compiled by XLA:CPU itself.

Documented divergences (inputs excluded below): XLA:CPU's cbrt and atan2 give garbage for
subnormal inputs (e.g. cbrt(1e-45) = -5.6e-16); a bf16 `compare(x, 0)` against a constant
zero is not flushed by XLA (its simplifier turns it into a bit test) while an array compare
is; f64 -> f8e8m0fnu rounds one tie differently; XLA flushes results that are below FLT_MIN
before rounding, we flush after rounding (results that round up to +-FLT_MIN differ).

On cuda the oracle is the cpu backend, on the same HLO: every output is compared --
integers, pred and non-transcendental floats exactly (sign of zero included, NaN payloads
ignored), transcendentals within TRANSCENDENTAL_ULP.  The inputs are the simulator-sized
edge sets of `float_values` / `int_values` / `complex_values` (numba's simulator runs every
GPU thread as a Python thread); the cpu draws its inputs from oracle.py's generators.
tests/test_ptx.py::test_ptx_compiles additionally compiles a representative set of these
kernels to PTX for a real GPU.
"""
from __future__ import annotations


import jax
import ml_dtypes
import numpy as np
import pytest
from jax import lax

jax.config.update("jax_enable_x64", True)

from devices import device_cases, on_each_device  # noqa: E402
from oracle import (as_list, assert_same, both, float_edges, float_inputs,  # noqa: E402
                    int_edges, int_inputs, pairs, rng, run_text, subnormal, ulp_distance)
from xlaplug.runtime.executor import run_module  # noqa: E402
from xlaplug.hlo import dtypes as D  # noqa: E402
from xlaplug.hlo.text.parser import parse_module  # noqa: E402

pytestmark = pytest.mark.jax

# ---- ops jax never emits: one-op modules, run by XLA:CPU from StableHLO ------------------------


_BACKEND = []


def xla_run(mlir: str, *args):
    """Compiles StableHLO text with XLA:CPU and runs it."""
    if not _BACKEND:
        import jax.extend as je
        _BACKEND.append(je.backend.get_backend())
    be = _BACKEND[0]
    exe = be.compile_and_load(mlir, [be.local_devices()[0]])
    return [np.asarray(o) for o in exe.execute([jax.device_put(a) for a in args])]


MLIR_TYPES = {"pred": "i1", "s8": "i8", "s16": "i16", "s32": "i32", "s64": "i64", "u8": "ui8",
              "u16": "ui16", "u32": "ui32", "u64": "ui64", "f16": "f16", "bf16": "bf16",
              "f32": "f32", "f64": "f64", "c64": "complex<f32>", "c128": "complex<f64>",
              "s4": "i4", "u4": "ui4", "f8e4m3fn": "f8E4M3FN", "f8e5m2": "f8E5M2"}


def run_hlo(text: str, *args):
    return as_list(run_text(text, *args))


def op_pair(op_hlo, op_mlir, in_types, out_type, n, attrs_hlo="", mlir_prefix="",
            mlir_suffix=""):
    """(HLO text, StableHLO text) of a module applying one op to its parameters."""
    hlo = ["HloModule m", "", "ENTRY main {"]
    hlo += [f"  p{i} = {t}[{n}] parameter({i})" for i, t in enumerate(in_types)]
    params = ", ".join(f"p{i}" for i in range(len(in_types)))
    hlo += [f"  ROOT r = {out_type}[{n}] {op_hlo}({params}){attrs_hlo}", "}"]
    mt = [f"tensor<{n}x{MLIR_TYPES[t]}>" for t in in_types]
    mo = f"tensor<{n}x{MLIR_TYPES[out_type]}>"
    args = ", ".join(f"%arg{i}: {t}" for i, t in enumerate(mt))
    ops = ", ".join(f"%arg{i}" for i in range(len(in_types)))
    mlir = (f"module @m {{ func.func public @main({args}) -> ({mo}) {{\n"
            f"  %0 = stablehlo.{op_mlir} {mlir_prefix}{ops}{mlir_suffix} : "
            f"({', '.join(mt)}) -> {mo}\n  return %0 : {mo} }} }}")
    return "\n".join(hlo) + "\n", mlir


# ---- cuda: run on cuda and on cpu, compare ----------------------------------------------

TRANSCENDENTAL = {"exponential", "exponential-minus-one", "log", "log-plus-one", "logistic",
                  "rsqrt", "cbrt", "sine", "cosine", "tan", "tanh", "erf", "atan2", "power"}
# libdevice's float64 functions are within 1-2 ULP, numpy's within ~1: their distance is at
# most about their sum.  f32/f16 results are float64 results rounded once.
TRANSCENDENTAL_ULP = {"f16": 1, "f32": 2, "f64": 4, "c64": 2, "c128": 4}


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
    if D.is_float(D.from_dtype(got.dtype)):
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


def cuda_check(names, f, *args, t=None):
    """A jax program of one output per name, lowered, on cuda against cpu."""
    check_all(names, *run_both(lowered(f, *args), list(args)), t)


def float_values(t: str) -> np.ndarray:
    """A few ordinary values and every kind of edge (zeros, subnormals, inf, NaN, max)."""
    dt = np.dtype(D.to_dtype(t))
    fi = ml_dtypes.finfo(dt)
    vals = [0.0, -0.0, 1.0, -2.5, 0.3, 7.25, -0.75, 100.0, float(fi.max), float(fi.tiny) / 4,
            -float(fi.tiny), np.inf, -np.inf, np.nan]
    with np.errstate(all="ignore"):
        return np.array(vals).astype(dt)


def int_values(t: str) -> np.ndarray:
    info = ml_dtypes.iinfo(D.to_dtype(t))
    vals = [0, 1, 2, 7, 33, 100, int(info.max), int(info.min), -1, -3, -64]
    vals = [v for v in vals if int(info.min) <= v <= int(info.max)]
    return np.array(vals, dtype=object).astype(np.int64 if int(info.min) < 0 else np.uint64) \
        .astype(D.to_dtype(t))


def hlo_module(ops: list[tuple[str, str, str]], params: list[str]) -> str:
    """An HLO module: params are shapes ("f32[6]"), ops are (name, shape, rhs); the ROOT is a
    tuple of the ops."""
    lines = ["HloModule m", "", "ENTRY main {"]
    lines += [f"  p{i} = {s} parameter({i})" for i, s in enumerate(params)]
    lines += [f"  {n} = {s} {rhs}" for n, s, rhs in ops]
    shapes = ", ".join(s for _, s, _ in ops)
    lines += [f"  ROOT t = ({shapes}) tuple({', '.join(n for n, _, _ in ops)})", "}"]
    return "\n".join(lines) + "\n"


def complex_values(t: str) -> np.ndarray:
    re = np.array([0.5, -1.25, 0.0, 3.0, -0.0, 1e-3, 2.0, np.inf, np.nan, 1e-40])
    im = np.array([1.5, 0.25, -2.0, 0.0, 0.0, -4.0, 2.0, 1.0, 0.5, 1.0])
    return (re + 1j * im).astype(D.to_dtype(t))


def values_of(t: str) -> np.ndarray:
    """The cuda inputs of type t: edges, and for floats values that convert to integers
    out of range."""
    if t == "pred":
        return np.array([True, False, True, True, False, False, True, False, True, False])
    if D.is_complex(t):
        return complex_values(t)
    if D.is_float(t):
        v = float_values(t)
        with np.errstate(over="ignore", invalid="ignore"):
            more = np.array([1e10, -3e9, 255.5, -128.5, 65535.0, 2.0 ** 63]).astype(v.dtype)
        return np.concatenate([v, more])
    return int_values(t)


# ---- unary float ops ------------------------------------------------------------------------

RM = lax.RoundingMethod
UNARY_FLOAT = {
    "exponential": lax.exp, "exponential-minus-one": lax.expm1, "log": lax.log,
    "log-plus-one": lax.log1p, "sqrt": lax.sqrt, "rsqrt": lax.rsqrt, "cbrt": lax.cbrt,
    "sine": lax.sin, "cosine": lax.cos, "tan": lax.tan, "tanh": lax.tanh, "erf": lax.erf,
    "floor": lax.floor, "ceil": lax.ceil,
    "round-nearest-afz": lambda x: lax.round(x, RM.AWAY_FROM_ZERO),
    "round-nearest-even": lambda x: lax.round(x, RM.TO_NEAREST_EVEN),
    "sign": lax.sign, "abs": lax.abs, "negate": lax.neg, "is-finite": lax.is_finite,
}

# ULP bounds needed against XLA:CPU's own approximations (measured; 0 = bit-exact).  f32 tanh,
# exp and log are XLA's own approximations, so they -- and expm1, logistic and log1p, built
# from them -- are exact (f16/bf16/f8 compute in f32); atan2, sin and cos are libm's f32
# functions, as XLA's (tan is f64 rounded: common/scalar_libm.py says why).
ULP_BOUNDS = {
    "f32": {"rsqrt": 1, "cbrt": 1, "tan": 1, "logistic": 0},
    "f64": {"exponential": 1, "exponential-minus-one": 4, "log": 1, "log-plus-one": 1,
            "rsqrt": 1, "cbrt": 3, "tan": 1, "tanh": 8, "power": 1, "logistic": 2},
    "f16": {"logistic": 0},
    "bf16": {"logistic": 0},
}


@pytest.mark.parametrize("device,t", device_cases(
    ["f32", "f64", "f16", "bf16"],
    {"bf16": "the CUDA backend has no is-finite on bf16 ('is-finite is defined on real "
             "floats, not bf16'); XLA and the cpu backend have"}))
def test_unary_float(device, t):
    names = list(UNARY_FLOAT)
    if device == "cuda":
        x = float_values(t)
        cuda_check(names, lambda x: tuple(UNARY_FLOAT[n](x) for n in names), x, t=t)
        return
    x = float_inputs(t, 2000)
    xs = x[~subnormal(x)]  # cbrt: XLA:CPU's result on subnormals is garbage
    ours, xla = both(lambda x, xs: tuple(UNARY_FLOAT[n](xs if n == "cbrt" else x)
                                         for n in names), x, xs)
    for n, o, j in zip(names, ours, xla):
        assert_same(o, j, ULP_BOUNDS[t].get(n, 0), f"{n} {t}")


@pytest.mark.parametrize("t", ["f8e4m3fn", "f8e5m2"])
@on_each_device
def test_unary_narrow_float(device, t):
    names = ["exponential", "log", "sqrt", "floor", "round-nearest-even", "sign", "abs",
             "negate", "tanh"]
    if device == "cuda":
        cuda_check(names, lambda x: tuple(UNARY_FLOAT[n](x) for n in names), float_values(t))
        return
    x = float_inputs(t, 200, 4.0)
    ours, xla = both(lambda x: tuple(UNARY_FLOAT[n](x) for n in names), x)
    for n, o, j in zip(names, ours, xla):
        assert_same(o, j, 0, f"{n} {t}")


@on_each_device
def test_unary_shapes(device):
    x = float_inputs("f32", 40)[:60].reshape(3, 4, 5)
    f = lambda x, s: (lax.exp(x), lax.neg(s), lax.floor(x))  # noqa: E731
    if device == "cuda":
        cuda_check(["exponential", "negate", "floor"], f, x, np.float32(-2.5), t="f32")
        return
    ours, xla = both(f, x, np.float32(-2.5))
    for o, j in zip(ours, xla):
        assert_same(o, j, 1)


_SHAPES_HLO = hlo_module(
    [("m", "f32[20,16]", "multiply(p0, p0)"), ("s", "f32[]", "sine(p1)"),
     ("e", "f32[0,3]", "add(p2, p2)"), ("c", "pred[20,16]", "compare(p0, p3), direction=GT"),
     ("sel", "f32[20,16]", "select(p4, p0, p3)")],
    ["f32[20,16]", "f32[]", "f32[0,3]", "f32[20,16]", "pred[]"])


@on_each_device
def test_shapes_blocks_and_empty(device):
    """Several CUDA blocks, rank 2 and 0, an empty array, a scalar predicate."""
    a = np.linspace(-3, 3, 320, dtype=np.float32).reshape(20, 16)
    args = [a, np.float32(0.5), np.zeros((0, 3), np.float32), a[::-1].copy(), np.array(False)]
    names = ["multiply", "sine", "add", "compare", "select"]
    if device == "cuda":
        gpu, cpu = run_both(_SHAPES_HLO, args)
        check_all(names, gpu, cpu, "f32")
        assert gpu[2].shape == (0, 3) and gpu[1].shape == ()
        return
    ours = as_list(run_text(_SHAPES_HLO, *args))
    xla = [np.asarray(v) for v in jax.jit(lambda a, s, e, b, p: (
        a * a, lax.sin(s), e + e, a > b, lax.select(p, a, b)))(*args)]
    for n, o, j in zip(names, ours, xla):
        assert_same(o, j, ULP_BOUNDS["f32"].get(n, 0), n)


def test_exp_f32_every_input_where_its_cases_meet():
    """f32 exp is XLA's bits on every f32 input of the ranges where its cases meet: above
    x = 88.376 (m held at 127: XLA's polynomial drifts up to 6 ULP from the correctly rounded
    exp there, and so does ours), the overflow to inf, and the flush of subnormal results
    below -87.3, down to the masked scores of a causal softmax (-3.4e38) and -inf, whose
    results are 0 without a subnormal product on the way.  (Checked once over all 2^32 f32
    inputs against XLA: 0 differ.)"""
    def span(lo, hi):
        a, b = np.array([lo, hi], np.float32).view(np.int32)
        return np.arange(a, b + 1, dtype=np.int32).view(np.float32)
    far = np.array([-200.0, -1e30, np.finfo(np.float32).min, -np.inf], np.float32)
    x = np.concatenate([span(88.0, 88.75), -span(87.0, 87.5), -span(103.9, 104.1), far])
    (ours,), (xla,) = both(lambda x: lax.exp(x), x)
    assert_same(ours, xla, 0, "exp f32 near its case boundaries")


@pytest.mark.parametrize("t", ["f32", "f64"])
def test_unary_float_compiled_loop_is_the_kernels(t, monkeypatch):
    """From LOOP_FROM_ELEMENTS elements an f32/f64 float function runs as one compiled loop of
    the scalar table's expression (elementwise_math._unary_loop): the same values as the
    array form below it -- XLA's, within ULP_BOUNDS -- subnormals, NaN and infinities
    included.  (Not f64 rsqrt: the table's 1/sqrt rounds twice, the array form once.)"""
    import xlaplug.backends.cpu.elementwise_math as EM
    names = [n for n in UNARY_FLOAT if n in EM.FLOAT_UNARY and (n, t) != ("rsqrt", "f64")]
    x = float_inputs(t, 2000)
    # XLA compiles the program once: the looped run below is ours alone, on the same text.
    lowered = jax.jit(lambda x: tuple(UNARY_FLOAT[n](x) for n in names)).lower(x)
    text = lowered.as_text(dialect="hlo")
    xla = [np.asarray(v) for v in lowered.compile()(x)]
    small = as_list(run_text(text, x))
    calls, loop = [], EM._unary_loop
    monkeypatch.setattr(EM, "LOOP_FROM_ELEMENTS", 1)
    monkeypatch.setattr(EM, "_unary_loop", lambda *a: calls.append(a[0]) or loop(*a))
    looped = as_list(run_text(text, x))
    assert sorted(calls) == sorted(names)
    ok = ~subnormal(x)
    for n, o, s_, j in zip(names, looped, small, xla):
        keep = ok if n == "cbrt" else slice(None)  # cbrt: XLA's result on subnormals is garbage
        assert_same(o[keep], j[keep], ULP_BOUNDS[t].get(n, 0), f"{n} {t}, compiled loop")
        assert_same(o, s_, 0, f"{n} {t}, compiled loop against the array form")


@pytest.mark.parametrize("t", ["f32", "f64", "f16", "bf16"])
@on_each_device
def test_logistic(device, t):
    """logistic is expanded by jax; XLA:CPU runs the HLO op itself through StableHLO."""
    if device == "cuda":
        x = float_values(t)
        text = hlo_module([("l", f"{t}[{x.size}]", "logistic(p0)")], [f"{t}[{x.size}]"])
        check_all(["logistic"], *run_both(text, [x]), t)
        return
    x = float_inputs(t, 500)
    hlo, mlir = op_pair("logistic", "logistic", [t], t, x.size)
    assert_same(run_hlo(hlo, x)[0], xla_run(mlir, x)[0], ULP_BOUNDS[t]["logistic"],
                f"logistic {t}")


# ---- binary float ops -------------------------------------------------------------------------

BINARY_FLOAT = {"add": lax.add, "subtract": lax.sub, "multiply": lax.mul, "divide": lax.div,
                "remainder": lax.rem, "power": lax.pow, "atan2": lax.atan2,
                "maximum": lax.max, "minimum": lax.min}


@pytest.mark.parametrize("t", ["f32", "f64", "f16", "bf16", "f8e4m3fn"])
@on_each_device
def test_binary_float(device, t):
    names = list(BINARY_FLOAT) if t != "f8e4m3fn" else ["add", "multiply", "divide",
                                                        "maximum", "minimum"]
    if device == "cuda":
        v = float_values(t)[[0, 1, 2, 3, 4, 8, 9, 10, 11, 13]]
        a, b = (g.reshape(-1) for g in np.meshgrid(v, v[::3], indexing="ij"))
        cuda_check(names, lambda a, b: tuple(BINARY_FLOAT[n](a, b) for n in names), a, b, t=t)
        return
    a, b = pairs(float_inputs(t, 40))
    ok = ~subnormal(a) & ~subnormal(b)  # atan2: XLA:CPU mishandles subnormals
    ours, xla = both(lambda a, b, a2, b2: tuple(
        BINARY_FLOAT[n](a2, b2) if n == "atan2" else BINARY_FLOAT[n](a, b) for n in names),
        a, b, a[ok], b[ok])
    for n, o, j in zip(names, ours, xla):
        assert_same(o, j, ULP_BOUNDS.get(t, {}).get(n, 0), f"{n} {t}")


@pytest.mark.parametrize("t", ["f32", "f64"])
@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_max_min_compiled_loop_is_xlas(t, op, monkeypatch):
    """From LOOP_FROM_ELEMENTS elements an f32/f64 maximum or minimum runs as one compiled
    loop (elementwise_logic.py): XLA's bits still, NaN, signed zeros and subnormals included."""
    import xlaplug.backends.cpu.elementwise_logic as EL
    calls, loop = [], EL._minmax_loop
    monkeypatch.setattr(EL, "_minmax_loop", lambda *a: calls.append(a[0]) or loop(*a))
    a, b = pairs(float_inputs(t, 80))
    assert a.size >= EL.LOOP_FROM_ELEMENTS and subnormal(a).any() and np.isnan(a).any()
    ours, xla = both(BINARY_FLOAT[op], a, b)
    assert_same(ours[0], xla[0], 0, f"{op} {t}")
    assert calls == [op]


# ---- complex ----------------------------------------------------------------------------------

def _complex_inputs(t):
    c = "f32" if t == "c64" else "f64"
    g = rng("complex", t)
    r = g.standard_normal(300) * 3
    i = g.standard_normal(300) * 3
    sp = float_edges(c)
    # (no values near the subnormal range: XLA flushes results that are tiny before rounding,
    # numpy can only flush after rounding -- results that round up to +-FLT_MIN differ)
    v = np.abs(sp.astype(np.float64))
    sp = sp[np.isfinite(sp) & (v < 10) & ((v == 0) | (v > 1e-30))]
    a, b = pairs(sp)
    return np.concatenate([r + 1j * i, a + 1j * b]).astype(D.to_dtype(t))


def _assert_close_complex(o, j, rel_ulps, ctx):
    """Normwise: |ours - xla| <= rel_ulps * eps * max(|xla|, tiny) (componentwise ULPs are
    meaningless where one component cancels)."""
    assert o.dtype == j.dtype and o.shape == j.shape, ctx
    eps = np.finfo(o.real.dtype).eps
    both_nan = (np.isnan(o) & np.isnan(j))
    with np.errstate(all="ignore"):
        err = np.abs(o.astype(np.complex128) - j.astype(np.complex128))
    scale = np.maximum(np.abs(j.astype(np.complex128)), np.finfo(o.real.dtype).tiny)
    bad = ~both_nan & ~(err <= rel_ulps * eps * scale) & ~(o == j)
    idx = np.nonzero(bad)[0]
    assert idx.size == 0, f"{ctx}: {idx.size} differ; ours={o[idx[:4]]} xla={j[idx[:4]]}"


COMPLEX_UNARY = {"exponential": lax.exp, "exponential-minus-one": lax.expm1, "log": lax.log,
                 "log-plus-one": lax.log1p, "sqrt": lax.sqrt, "rsqrt": lax.rsqrt,
                 "sine": lax.sin, "cosine": lax.cos, "tan": lax.tan, "tanh": lax.tanh,
                 "sign": lax.sign, "negate": lax.neg}


@pytest.mark.parametrize("t", ["c64", "c128"])
@on_each_device
def test_complex(device, t):
    if device == "cuda":
        x = complex_values(t)
        names = list(COMPLEX_UNARY) + ["abs", "real", "imag"]
        cuda_check(names, lambda x: tuple(COMPLEX_UNARY[n](x) for n in COMPLEX_UNARY)
                   + (lax.abs(x), lax.real(x), lax.imag(x)), x, t=t)
        v = x[:7]
        a, b = (g.reshape(-1) for g in np.meshgrid(v, v[::2], indexing="ij"))
        r = a.real.astype(np.float32 if t == "c64" else np.float64)
        cuda_check(["add", "subtract", "multiply", "divide", "power", "eq", "ne", "complex"],
                   lambda a, b, r: (a + b, a - b, a * b, a / b, lax.pow(a, b), a == b, a != b,
                                    lax.complex(r, r[::-1])), a, b, r, t=t)
        return
    z = _complex_inputs(t)
    names = list(COMPLEX_UNARY)
    ours, xla = both(lambda z: tuple(COMPLEX_UNARY[n](z) for n in names) + (lax.abs(z),), z)
    for n, o, j in zip(names, ours, xla):
        _assert_close_complex(o, j, 8, f"{n} {t}")
    assert_same(ours[-1], xla[-1], 2, f"abs {t}")
    a, b = pairs(z[::6])
    ours, xla = both(lambda a, b: (a + b, a - b, a * b, a / b, lax.pow(a, b),
                                   a == b, a != b), a, b)
    for n, o, j in zip(["add", "subtract", "multiply", "divide"], ours, xla):
        assert_same(o, j, 0, f"{n} {t}")  # XLA's FMA-contracted formulas, bit for bit
    _assert_close_complex(ours[4], xla[4], 64, f"power {t}")
    for o, j in zip(ours[5:], xla[5:]):
        assert_same(o, j, 0, f"compare {t}")


@on_each_device
def test_real_imag_complex(device):
    z = _complex_inputs("c64") if device == "cpu" else complex_values("c64")
    r = float_inputs("f64", 40) if device == "cpu" else float_values("f64")
    f = lambda z, r: (lax.real(z), lax.imag(z), lax.complex(z.real, z.imag),  # noqa: E731
                      lax.complex(r, -r))
    if device == "cuda":
        cuda_check(["real", "imag", "complex", "complex"], f, z, r)
        return
    ours, xla = both(f, z, r)
    for o, j in zip(ours, xla):
        assert_same(o, j)


# ---- integers ---------------------------------------------------------------------------------

INT_BINARY = {"add": lax.add, "subtract": lax.sub, "multiply": lax.mul, "divide": lax.div,
              "remainder": lax.rem, "maximum": lax.max, "minimum": lax.min,
              "and": lax.bitwise_and, "or": lax.bitwise_or, "xor": lax.bitwise_xor,
              "shift-left": lax.shift_left,
              "shift-right-arithmetic": lax.shift_right_arithmetic,
              "shift-right-logical": lax.shift_right_logical,
              "EQ": lax.eq, "NE": lax.ne, "LT": lax.lt, "LE": lax.le, "GT": lax.gt,
              "GE": lax.ge}
INT_UNARY = {"negate": lax.neg, "abs": lax.abs, "sign": lax.sign, "not": lax.bitwise_not,
             "popcnt": lax.population_count, "count-leading-zeros": lax.clz}
INT_TYPES = ["s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "s4", "u4"]


_CUDA_INT_BINARY = ["add", "subtract", "multiply", "divide", "remainder", "power", "maximum",
                    "minimum", "and", "or", "xor", "shift-left", "shift-right-logical",
                    "shift-right-arithmetic"]
_CUDA_INT_UNARY = ["not", "negate", "abs", "sign", "popcnt", "count-leading-zeros"]


@pytest.mark.parametrize("t", INT_TYPES)
@on_each_device
def test_integer_ops(device, t):
    """Division by zero, INT_MIN / -1, shift counts >= width and negative, wrap-around."""
    if device == "cuda":
        v = int_values(t)
        a, b = (g.reshape(-1) for g in np.meshgrid(v, v[::2], indexing="ij"))
        n = a.size
        s = f"{t}[{n}]"
        ops = [(op.replace("-", "_"), s, f"{op}(p0, p1)") for op in _CUDA_INT_BINARY]
        ops += [(op.replace("-", "_"), s, f"{op}(p0)") for op in _CUDA_INT_UNARY]
        ops += [(f"c{d}", f"pred[{n}]", f"compare(p0, p1), direction={d}")
                for d in ("EQ", "NE", "LT", "GE")]
        ops += [("cu", f"pred[{n}]", "compare(p0, p1), direction=LT, type=UNSIGNED")]
        gpu, cpu = run_both(hlo_module(ops, [s, s]), [a, b])
        check_all([o[0] for o in ops], gpu, cpu)
        return
    x = int_inputs(t, 25)
    a, b = pairs(x)
    bn = list(INT_BINARY)
    un = [n for n in INT_UNARY if not (n == "abs" and (D.is_unsigned(t) or t == "s4"))]
    ours, xla = both(lambda a, b, x: tuple(INT_BINARY[n](a, b) for n in bn)
                     + tuple(INT_UNARY[n](x) for n in un), a, b, x)
    for n, o, j in zip(bn + un, ours, xla):
        assert_same(o, j, 0, f"{n} {t}")


@on_each_device
def test_pred_ops(device):
    if device == "cuda":
        a = np.array([True, True, False, False])
        b = np.array([True, False, True, False])
        ops = [(op, "pred[4]", f"{op}(p0, p1)") for op in ("and", "or", "xor", "add",
                                                          "multiply", "maximum", "minimum")]
        ops += [("not", "pred[4]", "not(p0)"),
                ("eq", "pred[4]", "compare(p0, p1), direction=EQ"),
                ("lt", "pred[4]", "compare(p0, p1), direction=LT")]
        gpu, cpu = run_both(hlo_module(ops, ["pred[4]", "pred[4]"]), [a, b])
        check_all([o[0] for o in ops], gpu, cpu)
        return
    a, b = pairs(np.array([True, False]))
    ours, xla = both(lambda a, b: (a & b, a | b, a ^ b, ~a, lax.max(a, b), lax.min(a, b),
                                  a == b, a != b, a < b, a >= b), a, b)
    for o, j in zip(ours, xla):
        assert_same(o, j)


# XLA:CPU accepts no sub-byte integer power in StableHLO input, so there is no oracle for
# s4/u4 power; those types are not parametrized rather than skipped.
@pytest.mark.parametrize("t", [t for t in INT_TYPES if t not in ("s4", "u4")])
@on_each_device
def test_integer_power(device, t):
    """XLA's integer power (6 square-and-multiply steps; negative exponents give 0 except for
    bases +-1) -- jax never emits it, so XLA:CPU runs it from StableHLO."""
    x = int_inputs(t, 20) if device == "cpu" else int_values(t)
    a, b = pairs(x)
    hlo, mlir = op_pair("power", "power", [t, t], t, a.size)
    if device == "cuda":
        check_all(["power"], *run_both(hlo, [a, b]))
        return
    assert_same(run_hlo(hlo, a, b)[0], xla_run(mlir, a, b)[0], 0, f"power {t}")


# ---- compare / select / clamp / min-max ---------------------------------------------------------

@pytest.mark.parametrize("t", ["f32", "f64", "f16", "bf16", "f8e4m3fn", "f8e5m2"])
@on_each_device
def test_compare_float(device, t):
    dirs = ["EQ", "NE", "LT", "LE", "GT", "GE"]
    if device == "cuda":
        v = float_values(t)[[0, 1, 2, 3, 9, 10, 11, 13]]
        a, b = (g.reshape(-1) for g in np.meshgrid(v, v[::2], indexing="ij"))
    else:
        a, b = pairs(float_edges(t))
    f = lambda a, b: tuple(INT_BINARY[d](a, b) for d in dirs)  # noqa: E731
    if device == "cuda":
        cuda_check(dirs, f, a, b)
        return
    ours, xla = both(f, a, b)
    for d, o, j in zip(dirs, ours, xla):
        assert_same(o, j, 0, f"compare {d} {t}")


@pytest.mark.parametrize("t", ["f32", "f64", "f16", "bf16", "f8e4m3fn"])
@on_each_device
def test_compare_totalorder(device, t):
    """-NaN < -inf < ... < -0 < +0 < ... < inf < NaN, on XLA:CPU from StableHLO."""
    e = float_edges(t)
    a, b = pairs(e)
    for d in ["EQ", "NE", "LT", "LE", "GT", "GE"]:
        hlo, mlir = op_pair("compare", "compare", [t, t], "pred", a.size,
                            f", direction={d}, type=TOTALORDER", f"{d}, ", ", TOTALORDER")
        if device == "cuda":
            check_all([f"total {d}"], *run_both(hlo, [a, b]))
        else:
            assert_same(run_hlo(hlo, a, b)[0], xla_run(mlir, a, b)[0], 0, f"total {d} {t}")


@pytest.mark.parametrize("t", ["f32", "bf16", "f64", "f16", "s32", "u8", "pred", "c64"])
@on_each_device
def test_select_and_clamp(device, t):
    if device == "cuda":
        _select_clamp_on_cuda(t)
        return
    if t == "pred":
        x = np.array([True, False, True, False])
    elif D.is_float(t):
        x = float_inputs(t, 30)
    elif D.is_complex(t):
        x = _complex_inputs(t)[:40]
    else:
        x = int_inputs(t, 30)
    p = rng("select", t).integers(0, 2, x.size).astype(bool)
    y = x[::-1].copy()
    ours, xla = both(lambda p, x, y: (lax.select(p, x, y), lax.select(True, x, y),
                                      lax.select(False, x, y)), p, x, y)
    for o, j in zip(ours, xla):
        assert_same(o, j)
    if t in ("pred", "c64"):
        return
    lo, hi = x[3], x[7]
    ours, xla = both(lambda lo, x, hi, a, b: (lax.clamp(lo, x, hi), lax.clamp(a, x, b),
                                              lax.max(a, x), lax.min(a, x)),
                     lo, x, hi, y, np.roll(x, 5))
    for o, j in zip(ours, xla):
        assert_same(o, j, 0, f"clamp/minmax {t}")


def _select_clamp_on_cuda(t):
    """select and clamp with array and scalar (broadcast) operands."""
    if t == "pred":
        x, y = np.array([True, False, True, False, True]), np.array([False] * 5)
    elif t == "c64":
        x = complex_values(t)[:5]
        y = x[::-1].copy()
    else:
        vals = np.resize(float_values(t) if D.is_float(t) else int_values(t), 10)
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


@on_each_device
def test_minmax_signed_zero_and_nan(device):
    a = np.array([-0.0, 0.0, np.nan, 1.0, -np.nan, np.inf, 0.0, 2e-39, -2e-39], np.float32)
    b = np.array([0.0, -0.0, 1.0, np.nan, 2.0, np.nan, 0.0, 0.0, 0.0], np.float32)
    f = lambda a, b: (lax.max(a, b), lax.min(a, b))  # noqa: E731
    if device == "cuda":
        cuda_check(["maximum", "minimum"], f, a, b)
        return
    ours, xla = both(f, a, b)
    for o, j in zip(ours, xla):
        assert_same(o, j)


# ---- convert ------------------------------------------------------------------------------------

CONVERT_TYPES = ["pred", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "s4", "u4",
                 "f16", "bf16", "f32", "f64", "c64", "c128", "f8e4m3fn", "f8e5m2", "f8e4m3",
                 "f8e3m4", "f8e4m3fnuz", "f8e5m2fnuz", "f8e4m3b11fnuz", "f4e2m1fn",
                 "f8e8m0fnu"]
_CONVERT_EXTRA = {
    "f64": [1 + 2.0**-8 + 2.0**-40, 2.0**62 + 2.0**54 + 1, 1e19, 2.0**63, -2.0**63, 2.0**64, 3e9, -3e9, 2147483647.5,
            4294967295.5, 65504, 65520, 1e-39, 448, 464, 480, -0.7, 0.7, 255.9, 256.0],
    "f32": [3e9, -3e9, 2147483648.0, 4294967296.0, 1e20, -1e20, 255.5, -128.5, 65520],
    "s64": [2**62 + 2**54 + 1, -(2**62 + 2**54 + 1), 2**53 + 1, 2**24 + 1, 2305, 2561,
            2**63 - 1],
    "u64": [2**64 - 1, 2**63 + 2**39 + 1, 2**62 + 2**54 + 1],
    "s32": [2**30 + 2**22 + 1, -(2**30 + 2**22 + 1)],
    "u32": [2**31 + 2**23 + 1],
}


def _bf16_of_ints(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(correctly rounded, rounded twice through f32) bf16 values of the integers x.
    XLA:CPU emits `sitofp`/`uitofp` to bfloat and leaves the rounding to LLVM's lowering for
    the host: where the CPU converts f32 to bf16 natively (avx512_bf16) it goes through f32
    and rounds twice, elsewhere once (seen: jax 0.10.2 gives 2^62 for 2^62 + 2^54 + 1 on an
    AMD EPYC with avx512_bf16, 2^62 + 2^55 on the CI machine)."""
    bf16 = D.to_dtype("bf16")
    once = []
    for v in (int(i) for i in x):
        a, n = abs(v), abs(v).bit_length()
        if n > 8:  # round to 8 significant bits, ties to even
            q, r = divmod(a, 1 << (n - 8))
            half = 1 << (n - 9)
            a = (q + (r > half or (r == half and q & 1))) << (n - 8)
        once.append(float(-a if v < 0 else a))
    return np.array(once).astype(bf16), x.astype(np.float32).astype(bf16)


def _convert_inputs(t):
    if t == "pred":
        return np.array([True, False])
    if D.is_complex(t):
        return _complex_inputs(t)[:200]
    if D.is_float(t):
        x = float_inputs(t, 150, 1e3)
    else:
        x = int_inputs(t, 60)
    if t in _CONVERT_EXTRA:
        x = np.concatenate([x, np.array(_CONVERT_EXTRA[t], np.float64 if D.is_float(t) else
                                        (np.uint64 if t == "u64" else np.int64)).astype(x.dtype)])
    return x


@pytest.mark.filterwarnings("ignore:Casting complex values")
@pytest.mark.parametrize("device,f", device_cases(
    CONVERT_TYPES, {"f8e8m0fnu": "the CUDA backend refuses f8e8m0fnu computations "
                                 "(test_cuda_narrow.py checks the error)"}))
def test_convert(device, f):
    """Every source -> every target: saturating float->int (NaN -> 0), int->float rounding,
    to/from pred, complex -> real part, narrow floats, subnormal flushing."""
    targets = [t for t in CONVERT_TYPES if t != f]
    if device == "cuda":
        # HLO's convert takes complex only to complex (jax's real part is a `real` first);
        # the CUDA backend refuses f8e8m0fnu (the source case above is its xfail)
        targets = [t for t in targets if (not D.is_complex(f) or D.is_complex(t))
                   and t != "f8e8m0fnu"]
        x = values_of(f)
        n = x.size
        ops = [(f"to_{t}", f"{t}[{n}]", "convert(p0)") for t in targets]
        gpu, cpu = run_both(hlo_module(ops, [f"{f}[{n}]"]), [x])
        check_all([o[0] for o in ops], gpu, cpu)
        return
    x = _convert_inputs(f)
    if f == "f64":  # f64 -> f8e8m0fnu: XLA rounds one tie (1.5 * 2^-24) down
        targets.remove("f8e8m0fnu")
    if f == "bf16":  # jax lowers x != 0 to compare(x, 0), which XLA does not flush for bf16
        x = x[~subnormal(x)]
    ours, xla = both(lambda v: tuple(lax.convert_element_type(v, D.to_dtype(t))
                                     for t in targets), x)
    for t, o, j in zip(targets, ours, xla):
        if t == "bf16" and D.is_integral(f) and f != "pred":
            once, twice = _bf16_of_ints(x)
            host = once != twice  # XLA's answer depends on the host here: check the correct one
            assert np.all((j[host] == once[host]) | (j[host] == twice[host]))
            assert np.array_equal(o[host], once[host]), (x[host], o[host], once[host])
            o, j = o[~host], j[~host]
        assert_same(o, j, 0, f"convert {f} -> {t}")


@on_each_device
def test_convert_float_to_pred_direct(device):
    """A real convert to pred (XLA flushes f32/f64 subnormals, not bf16's)."""
    for t in ["f32", "f64", "bf16", "f16"]:
        x = float_edges(t)
        hlo, mlir = op_pair("convert", "convert", [t], "pred", x.size)
        if device == "cuda":
            check_all([f"convert {t} -> pred"], *run_both(hlo, [x]))
        else:
            assert_same(run_hlo(hlo, x)[0], xla_run(mlir, x)[0], 0, f"convert {t} -> pred")


# ---- bitcast-convert, reduce-precision ----------------------------------------------------------

BITCASTS = [("f32", "s32"), ("f32", "u32"), ("s32", "f32"), ("f64", "u64"), ("f16", "s16"),
            ("bf16", "u16"), ("bf16", "f16"), ("u8", "s8"), ("f8e4m3fn", "u8"), ("s4", "u4"),
            ("u4", "s4"), ("f4e2m1fn", "u4"), ("f32", "u8"), ("f32", "bf16"), ("f64", "f32"),
            ("f64", "s16"), ("u16", "u8"), ("s4", "s8"), ("u8", "s4"), ("f4e2m1fn", "u8"),
            ("u32", "s4"), ("c64", "c64")]


_SUB_BYTE_PACKING = "the CUDA backend does not pack sub-byte elements in bitcast-convert"


@pytest.mark.parametrize("device,f,t", device_cases(BITCASTS, {
    ("s4", "s8"): _SUB_BYTE_PACKING, ("u8", "s4"): _SUB_BYTE_PACKING,
    ("f4e2m1fn", "u8"): _SUB_BYTE_PACKING, ("u32", "s4"): _SUB_BYTE_PACKING,
    ("f32", "bf16"): "xlaplug bug: on cuda, bitcast-convert f32 -> bf16 does not keep the "
                     "bits of a NaN (bf16 values are held as float32 on the device)"}))
def test_bitcast_convert(device, f, t):
    wf, wt = D.bit_width(f), D.bit_width(t)
    x = float_inputs(f, 40) if D.is_float(f) else (
        _complex_inputs(f)[:20] if D.is_complex(f) else int_inputs(f, 40))
    if wt > wf:
        k = wt // wf
        x = x[: (x.size // k) * k].reshape(-1, k)
    if device == "cuda":  # (the device compares bit patterns, NaN payloads included)
        gpu, cpu = run_both(lowered(lambda v: lax.bitcast_convert_type(v, D.to_dtype(t)), x),
                            [x])
        assert gpu[0].dtype == cpu[0].dtype and gpu[0].shape == cpu[0].shape
        assert gpu[0].tobytes() == cpu[0].tobytes(), f"bitcast-convert {f} -> {t}"
        return
    ours, xla = both(lambda v: lax.bitcast_convert_type(v, D.to_dtype(t)), x)
    o, j = ours[0], xla[0]
    assert o.dtype == j.dtype and o.shape == j.shape
    assert o.tobytes() == j.tobytes() or np.array_equal(
        o.view(np.uint8) if o.dtype.itemsize == 1 else o.view(f"u{o.dtype.itemsize}"),
        j.view(np.uint8) if j.dtype.itemsize == 1 else j.view(f"u{j.dtype.itemsize}"))


# HLO forms jax does not emit (a minor dimension merged or split by hand, complex and pred
# bit patterns): cuda against the cpu.
CUDA_BITCASTS = [("f32", "s32", ()), ("s32", "f32", ()), ("f64", "u64", ()), ("u16", "f16", ()),
                 ("f16", "s16", ()), ("f32", "u8", (4,)), ("u8", "f32", None),
                 ("f64", "s32", (2,)), ("c64", "f64", ()), ("s8", "pred", ())]


@pytest.mark.cuda
@pytest.mark.parametrize("f,t,minor", CUDA_BITCASTS,
                         ids=[f"{a}-{b}" for a, b, _ in CUDA_BITCASTS])
def test_bitcast_convert_hlo_forms_on_cuda(f, t, minor):
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


_PRECISIONS = [(5, 10), (8, 7), (5, 2), (4, 3), (2, 1), (8, 23), (11, 52), (3, 0), (1, 0),
               (8, 0), (6, 4)]


@pytest.mark.parametrize("t", ["f32", "f64", "f16", "bf16"])
@on_each_device
def test_reduce_precision(device, t):
    if device == "cuda":
        x = float_values(t)
        n = x.size
        ops = [(f"r{e}_{m}", f"{t}[{n}]", f"reduce-precision(p0), exponent_bits={e}, "
                f"mantissa_bits={m}") for e, m in _PRECISIONS]
        gpu, cpu = run_both(hlo_module(ops, [f"{t}[{n}]"]), [x])
        check_all([o[0] for o in ops], gpu, cpu)
        return
    x = float_inputs(t, 500, 1e3)
    ours, xla = both(lambda v: tuple(lax.reduce_precision(v, e, m) for e, m in _PRECISIONS), x)
    for (e, m), o, j in zip(_PRECISIONS, ours, xla):
        assert_same(o, j, 0, f"reduce-precision {t} e{e}m{m}")


# The union of the cpu's and the cuda's (source, result) pairs; the random bits have the
# source's width.
@pytest.mark.parametrize("device,f,t", device_cases(
    [("f32", "s32"), ("f32", "s8"), ("f64", "s16"), ("bf16", "s8"), ("f16", "s32"),
     ("f16", "s8"), ("f64", "s64"), ("f32", "s16")],
    {("bf16", "s8"): "the CUDA backend has no stochastic-convert from bf16 ('not supported "
                     "(XLA decomposes float -> signed integer only)')"}))
def test_stochastic_convert(device, f, t):
    """stochastic-convert; on cpu against XLA running its own decomposition
    (StochasticConvertDecomposer) of the op, written out in jax."""
    rt = {16: "u16", 32: "u32", 64: "u64"}[D.bit_width(f)]
    if device == "cuda":
        x = values_of(f)
        x = np.concatenate([x, np.array([2.5, -2.5, 0.75, -127.3]).astype(x.dtype)])
        bits = np.random.default_rng(5).integers(0, np.iinfo(D.to_dtype(rt)).max, x.size,
                                                 dtype=np.uint64, endpoint=True
                                                 ).astype(D.to_dtype(rt))
        text = hlo_module([("s", f"{t}[{x.size}]", "stochastic-convert(p0, p1)")],
                          [f"{f}[{x.size}]", f"{rt}[{x.size}]"])
        check_all(["stochastic-convert"], *run_both(text, [x, bits]))
        return
    x = float_inputs(f, 300, 300.0)
    r = int_inputs(rt, x.size - int_edges(rt).size)[: x.size]
    to, rdt = D.to_dtype(t), D.to_dtype(rt)

    def decomposed(x, r):
        neg = lax.sign(x) < 0
        ab = lax.abs(x)
        tr = lax.floor(ab)
        frac = ab - tr
        if f == "f16":
            frac = frac.astype(np.float32)
        fixed = frac * np.asarray(2.0 ** D.bit_width(rt), frac.dtype)
        up = r < lax.convert_element_type(fixed, rdt)
        ti = lax.convert_element_type(tr, to)
        ti = lax.select(up, ti + np.asarray(1, to), ti)
        res = lax.select(neg, -ti, ti)
        info = np.iinfo(to)
        with np.errstate(over="ignore"):  # f16 has no +-2^31: the bounds become +-inf
            lo, hi = (np.asarray(v).astype(x.dtype) for v in (info.min, info.max))
        res = lax.select(x <= lo, lax.full_like(res, info.min), res)
        return lax.select(x >= hi, lax.full_like(res, info.max), res)
    xla = np.asarray(jax.jit(decomposed)(x, r))
    text = ("HloModule m\n\nENTRY main {\n"
            f"  x = {f}[{x.size}] parameter(0)\n  r = {rt}[{x.size}] parameter(1)\n"
            f"  ROOT s = {t}[{x.size}] stochastic-convert(x, r)\n}}\n")
    assert_same(run_hlo(text, x, r)[0], xla, 0, f"stochastic-convert {f} -> {t}")


# ---- flush-to-zero ---------------------------------------------------------------------------

@pytest.mark.cuda
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


# ---- launch helpers and scalar device functions ----------------------------------------------

@pytest.mark.cuda
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


@pytest.mark.cuda
def test_a_stride_loop_kernel_visits_every_element_once():
    """Kernels written as stride_loop run on a few simulated threads (each started as a
    Python thread): every element is still visited exactly once, for sizes below, at and
    above the simulated grid, and across its two blocks."""
    from xlaplug.backends.cuda import launch
    k = launch.jit_source(f"def visit(out, n):\n    {launch.stride_loop('n')}\n"
                          "        out[i] += i + 1\n", "visit")
    for n in (1, 3, 4, 5, 8, 9, 1000):
        out = launch.cuda_module().to_device(np.zeros(n, np.int64))
        launch.launch_stride_loop(k, n, out, n)
        assert out.copy_to_host().tolist() == list(range(1, n + 1)), n


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


@pytest.mark.cuda
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


@on_each_device
def test_f32_log_and_log1p_are_xlas_own_bit_for_bit(device):
    """XLA:CPU's f32 log is Cephes' logf with fused multiply-adds
    (common.scalar_float_approx32._xlog32), and log1p's Cephes polynomial fuses its Horner
    steps; libm's correctly rounded log differed from XLA in 1 of 9 f32 results, log1p in 1
    of 60.  Bit for bit against XLA over the whole range (tiny to huge, around 1, zeros,
    inf, NaN, negative, subnormals flushed): unfused and in XLA's own fusions (compiled
    loops) on the cpu, and on cuda."""
    from oracle import strip_stack_tables
    g = np.random.default_rng(32)
    n = 600 if device == "cpu" else 100
    x = np.concatenate([np.float32(10.0) ** g.uniform(-37.9, 38.5, n),
                        1 + g.standard_normal(n // 4) * 1e-3, g.standard_normal(n // 4) * 0.3,
                        float_edges("f32").astype(np.float64)]).astype(np.float32)
    # One XLA compile gives both the expected values and XLA's fusions (a jit call and
    # `lower().compile()` would each compile).
    compiled = jax.jit(lambda x: (lax.log(x), lax.log1p(x))).lower(x).compile()
    want = [np.asarray(v) for v in compiled(x)]
    text = hlo_module([("l", "f32[N]", "log(p0)"), ("p", "f32[N]", "log-plus-one(p0)")],
                      ["f32[N]"]).replace("[N]", f"[{x.size}]")
    if device == "cuda":
        runs = [("cuda", run_module(parse_module(text), [x], device="cuda"))]
    else:
        fused = strip_stack_tables(compiled.as_text())
        runs = [("unfused", run_module(parse_module(text), [x])),
                ("xla's fusions", run_module(parse_module(fused), [x], fusion_min_elements=1))]
    for what, got in runs:
        for name, o, j in zip(("log", "log1p"), as_list(got), want):
            assert_same(np.asarray(o), j, 0, f"{name} {what}")


@on_each_device
def test_atan2_is_libms_atan2f_and_atan2(device):
    """XLA:CPU calls libm's atan2f for f32 (and f16, through f32) and atan2 for f64; numpy's
    arctan2 (its own SIMD code) and f32 through f64 each differed in 1 of 6-12 results.
    Bit for bit against XLA: every quadrant, signed zeros, infinities, NaN, huge and tiny
    ratios; unfused and in XLA's fusions on the cpu, and on cuda (libm's atan2f under the
    simulator; libdevice's on a GPU).  Not subnormal operands: XLA hands them to libm
    unflushed, where its DAZ mode makes atan2(tiny, tiny) NaN; ours still reads them as
    zero."""
    from oracle import strip_stack_tables
    for t, dt in (("f32", np.float32), ("f64", np.float64), ("f16", np.float16)):
        g = np.random.default_rng(2)
        n = 400 if device == "cpu" else 60
        a, b = pairs(float_edges(t)[::2])
        x = np.concatenate([a, g.standard_normal(n) * 10.0 ** g.integers(-6, 6, n)])
        y = np.concatenate([b, g.standard_normal(n) * 10.0 ** g.integers(-6, 6, n)])
        with np.errstate(over="ignore"):
            x, y = x.astype(dt), y.astype(dt)
        normal = ~subnormal(x) & ~subnormal(y)
        x, y = x[normal], y[normal]
        with jax.enable_x64(t == "f64"):  # one compile: the values and XLA's fusions
            compiled = jax.jit(lax.atan2).lower(x, y).compile()
            want = np.asarray(compiled(x, y))
            fused = strip_stack_tables(compiled.as_text())
        text = hlo_module([("r", f"{t}[N]", "atan2(p0, p1)")], [f"{t}[N]", f"{t}[N]"])
        text = text.replace("[N]", f"[{x.size}]")
        if device == "cuda":
            runs = [("cuda", run_module(parse_module(text), [x, y], device="cuda"))]
        else:
            runs = [("unfused", run_module(parse_module(text), [x, y])),
                    ("xla's fusions",
                     run_module(parse_module(fused), [x, y], fusion_min_elements=1))]
        for what, got in runs:
            assert_same(np.asarray(as_list(got)[0]), want, 0, f"atan2 {t} {what}")


LIBM_F64 = {"exponential": "exp", "log": "log", "tanh": "tanh", "sine": "sin", "cosine": "cos",
            "tan": "tan", "erf": "erf", "cbrt": None}


@pytest.mark.parametrize("op", sorted(LIBM_F64))
def test_f64_transcendentals_have_libms_bits_on_every_cpu(op):
    """numpy's own f64 exp, log, sin, cos, tan, tanh and cbrt call Intel's SVML on AVX-512
    machines and libm elsewhere, so a kernel built on them gave other bits on another CPU
    (the conformance suite's cbrt and logistic f64 cases passed on one machine and failed on
    the other).  The unfused kernels and the fused loops both call libm (CPython's math
    module calls the same functions); cbrt is the scalar table's pow plus a Newton step."""
    import math

    from xlaplug.backends.common.scalar_float_math import _xcbrt
    fn = getattr(math, LIBM_F64[op]) if LIBM_F64[op] else _xcbrt
    g = rng("libm", op)
    x = np.concatenate([g.uniform(-3.0, 3.0, 400), g.uniform(-700.0, 700.0, 100)])
    if op == "log":
        x = np.abs(x) + 1e-3
    n = x.size
    unfused = hlo_module([("r", f"f64[{n}]", f"{op}(p0)")], [f"f64[{n}]"])
    fused = (f"HloModule m\nfc {{\n  p = f64[{n}] parameter(0)\n  ROOT r = f64[{n}] {op}(p)\n}}\n"
             f"ENTRY e {{\n  x = f64[{n}] parameter(0)\n"
             f"  ROOT r = f64[{n}] fusion(x), kind=kLoop, calls=fc\n}}\n")
    want = np.array([fn(v) for v in x], np.float64)
    for what, module in (("unfused", unfused), ("fused", fused)):
        got = np.asarray(as_list(run_module(parse_module(module), [x],
                                            fusion_min_elements=1))[0])
        assert got.view(np.int64).tolist() == want.view(np.int64).tolist(), what
