"""One formula per complex op: c64 and c128 ops give the same bits unfused (the CPU's array
kernels), fused (a kLoop fusion run as one compiled loop) and on CUDA (numba's simulator,
unfused and fused) -- every path runs the helpers of backends/common/scalar_complex{,_fn}.py --
and still match XLA through jax as tests/test_elementwise.py requires.

On a real GPU (NUMBA_ENABLE_CUDASIM=0) the transcendental primitives are libdevice's, not
the C library's, so there CUDA is held to the jax bounds instead of the CPU's bits."""
from __future__ import annotations

import jax
import numpy as np
import pytest
from jax import lax

from oracle import assert_same, float_edges, pairs, rng
from test_elementwise import _assert_close_complex
from xlaplug.backends.cpu import fused_loop
from xlaplug.runtime.executor import run_module
from xlaplug.hlo import dtypes as D
from xlaplug.hlo.text.parser import parse_module

jax.config.update("jax_enable_x64", True)

UNARY = {"exponential": lax.exp, "exponential-minus-one": lax.expm1, "log": lax.log,
         "log-plus-one": lax.log1p, "sqrt": lax.sqrt, "rsqrt": lax.rsqrt, "tanh": lax.tanh,
         "tan": lax.tan, "sine": lax.sin, "cosine": lax.cos, "sign": lax.sign,
         "negate": lax.neg, "abs": lax.abs}
BINARY = {"add": lax.add, "subtract": lax.sub, "multiply": lax.mul, "divide": lax.div,
          "power": lax.pow}
NAMES = list(UNARY) + list(BINARY)
EXACT = frozenset({"add", "subtract", "multiply", "divide", "negate"})  # no libm call


def _result_type(op: str, t: str) -> str:
    return D.complex_component(t) if op == "abs" else t


def _module(t: str, n: int, fused: bool) -> str:
    """Every op of NAMES on (x, y): each as it is, or each alone in a kLoop fusion."""
    bodies, lines, roots = [], [], []
    for k, op in enumerate(NAMES):
        rt = _result_type(op, t)
        args = "x" if op in UNARY else "x, y"
        if not fused:
            lines.append(f"  r{k} = {rt}[{n}] {op}({args})")
        else:
            params = [f"  p0 = {t}[{n}] parameter(0)"]
            if op in BINARY:
                params.append(f"  p1 = {t}[{n}] parameter(1)")
            pargs = "p0" if op in UNARY else "p0, p1"
            bodies.append(f"fused_{k} {{\n" + "\n".join(params)
                          + f"\n  ROOT r = {rt}[{n}] {op}({pargs})\n}}\n")
            lines.append(f"  r{k} = {rt}[{n}] fusion({args}), kind=kLoop, calls=fused_{k}")
        roots.append(f"r{k}")
    shapes = ", ".join(f"{_result_type(op, t)}[{n}]" for op in NAMES)
    return ("HloModule m\n\n" + "\n".join(bodies)
            + f"\nENTRY e {{\n  x = {t}[{n}] parameter(0)\n  y = {t}[{n}] parameter(1)\n"
            + "\n".join(lines) + f"\n  ROOT out = ({shapes}) tuple({', '.join(roots)})\n}}\n")


def _inputs(t: str, edges: bool):
    """(x, y): ordinary values, or every kind of edge (zeros, subnormals, inf, NaN, huge)."""
    c = D.to_dtype(t)
    if edges:
        a, b = pairs(float_edges("f32" if t == "c64" else "f64")[::3])
        x = (a + 1j * b).astype(c)
    else:
        g = rng("complex paths", t)
        x = (g.standard_normal(48) * 3 + 1j * g.standard_normal(48) * 3).astype(c)
    return x, x[::-1].copy()


def _run(t, x, y, fused: bool, device: str):
    module = parse_module(_module(t, x.size, fused))
    with np.errstate(all="ignore"):
        out = run_module(module, [x, y], device=device, fusion_min_elements=1)
    return [np.asarray(o) for o in out]


def _same_bits(got, want, what):
    """Bit for bit (a NaN may carry any payload)."""
    assert got.dtype == want.dtype and got.shape == want.shape, what
    parts = (got.real, got.imag, want.real, want.imag) if got.dtype.kind == "c" \
        else (got, np.zeros_like(got), want, np.zeros_like(want))
    for g, w in ((parts[0], parts[2]), (parts[1], parts[3])):
        g, w = np.ascontiguousarray(g), np.ascontiguousarray(w)
        bits = g.view(f"u{g.itemsize}") == w.view(f"u{w.itemsize}")
        bad = np.nonzero(~bits & ~(np.isnan(g) & np.isnan(w)))[0]
        assert bad.size == 0, f"{what}: {bad.size} differ, first at {bad[:4]}: " \
                              f"{got[bad[:4]]} vs {want[bad[:4]]}"


@pytest.fixture
def counted_loops(monkeypatch):
    """How many fusions compiled into one loop (so the fused path is not the interpreter)."""
    calls = []
    real = fused_loop.compiled_loop_fn

    def counting(comp, roles, **options):
        calls.append(comp.name)
        return real(comp, roles, **options)
    monkeypatch.setattr(fused_loop, "compiled_loop_fn", counting)
    return calls


@pytest.mark.parametrize("edges", [False, True], ids=["ordinary", "edges"])
@pytest.mark.parametrize("t", ["c64", "c128"])
def test_fused_unfused_and_cuda_give_the_same_bits(t, edges, counted_loops):
    x, y = _inputs(t, edges)
    unfused = _run(t, x, y, fused=False, device="cpu")
    fused = _run(t, x, y, fused=True, device="cpu")
    assert len(counted_loops) == len(NAMES)
    cuda = _run(t, x, y, fused=False, device="cuda")
    cuda_fused = _run(t, x, y, fused=True, device="cuda")
    from xlaplug.backends.cuda.launch import simulating
    same_libm = simulating()
    for n, u, f, g, gf in zip(NAMES, unfused, fused, cuda, cuda_fused):
        _same_bits(f, u, f"{n} {t}: fused vs unfused")
        for got, what in ((g, "cuda"), (gf, "cuda fused")):
            if same_libm or n in EXACT:
                _same_bits(got, u, f"{n} {t}: {what} vs cpu")
            elif not edges:
                _close_to_xla(n, got, u, f"{n} {t}: {what} vs cpu")


def _close_to_xla(n, ours, theirs, what):
    if n in EXACT:
        assert_same(ours, theirs, 0, what)  # XLA's FMA-contracted formulas, bit for bit
    elif n == "abs":
        assert_same(ours, theirs, 2, what)
    else:
        _assert_close_complex(ours, theirs, 64 if n == "power" else 8, what)


@pytest.mark.parametrize("t", ["c64", "c128"])
def test_every_path_still_matches_xla(t):
    x, y = _inputs(t, edges=False)
    ours = _run(t, x, y, fused=True, device="cpu")
    xla = [np.asarray(UNARY[n](x) if n in UNARY else BINARY[n](x, y)) for n in NAMES]
    for n, o, j in zip(NAMES, ours, xla):
        _close_to_xla(n, o, j, f"{n} {t}")


def test_c64_expm1_is_xlas_formula():
    # XLA: expm1(a) cos(b) + cosm1(b) contracted into an FMA, with XLA's own f32 expm1 --
    # libm's expm1 without the FMA was up to 15 ULP off (the suite's expm1_complex64).  Small
    # |a| (the expm1 branch of XLA's real expm1), small |b| (cosm1's polynomial), large |a|;
    # edges (zeros, subnormals, inf, NaN, huge) bit for bit; elsewhere XLA's f32 sin/cos
    # (its own approximations, not libm's) leave 1-2 ULP in a few elements.
    g = rng("c64 expm1")
    re, im = g.standard_normal(300) * 3, g.standard_normal(300) * 3
    re[:100] *= 1e-3
    im[100:150] *= 1e-4
    re[150:200] *= 10
    a, b = pairs(float_edges("f32")[::2])
    with np.errstate(invalid="ignore"):  # inf * 1j
        edges = (a + 1j * b).astype(np.complex64)
    for x, exact in (((re + 1j * im).astype(np.complex64), False),
                     (edges, True)):
        lowered = jax.jit(lax.expm1).lower(x)
        want = np.asarray(lowered.compile()(x))
        with np.errstate(all="ignore"):
            got = np.asarray(run_module(parse_module(lowered.as_text(dialect="hlo")), [x]))
        assert_same(got, want, 0 if exact else 2, "expm1 c64")
        same = (got.view(np.uint64) == want.view(np.uint64)) | (np.isnan(got) & np.isnan(want))
        assert same.mean() >= 0.97, f"only {same.sum()} of {same.size} with XLA's bits"
