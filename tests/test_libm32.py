"""f32 sine and cosine give XLA:CPU's bits (common/scalar_libm.py: the libm's sinf and cosf,
which XLA calls, or glibc's written out in f64 lanes where this process's libm is that:
cpu/trig_vector.py; both paths tested) in the per-op kernels, in fused loops and in
compiled while loops; f16 and bf16 compute through them and round.  A compiled loop keeps
its element values in registers (no store of a value nothing reads after its loop), and its
sines and cosines are vector code, no libm call per element but in its rerun for far
arguments.  Expected values from jax.jit
(XLA:CPU).  (Every f32 was checked once against jax, 2^32 inputs in 3 minutes: too long for
a test; here a sample across the whole range and every pattern near each switch point.)
"""
from __future__ import annotations


import platform
import re
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numba
import numpy as np
import pytest
from jax import lax

from oracle import as_list, assert_same, rng
from xlaplug.backends.cpu import compiled_while as CW
from xlaplug.backends.cpu import trig_vector as TV
from xlaplug.backends.cpu.jit_cache import RUN_NJIT, module_text
from xlaplug.hlo.text.parser import parse_module
from xlaplug.runtime.driver import compile_module
from xlaplug.runtime.executor import run_module
from xlaplug.runtime.runner import execute

pytestmark = pytest.mark.jax

OPS = {"sine": jnp.sin, "cosine": jnp.cos}
HLO_TYPE = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16",
            np.dtype(ml_dtypes.bfloat16): "bf16"}


def f32_inputs() -> np.ndarray:
    """Normal values from 1e-3 to 1e6 in scale, random bit patterns over the whole range
    (subnormals, 1e38, NaNs), and edges: signed zeros, infinities, the smallest subnormal,
    the largest float, multiples of pi, a value near a multiple of pi/2."""
    g = rng("libm32")
    parts = [(g.standard_normal(20000) * s).astype(np.float32) for s in (1e-3, 1, 10, 1e3, 1e6)]
    parts.append(g.integers(0, 2 ** 32, 40000, dtype=np.uint64).astype(np.uint32)
                 .view(np.float32))
    parts.append(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.1754944e-38,
                           1.5e-39, 3.4028235e38, -3.4028235e38, np.pi, -np.pi, np.pi / 2,
                           3 * np.pi / 2, 105414350.0, 1e-4, 4e-4], np.float32))
    return np.concatenate(parts)


def f32_sweep() -> np.ndarray:
    """Every 1024th f32 bit pattern (4M, offset so that both signs and every exponent are
    hit), and every pattern within 2^12 of each point where glibc's sinf changes its method:
    |x| = 2^-12 (x itself or 1 below), 0.75 (the polynomial alone below: pi/4's top bits),
    120 (one reduction by pi/2 below, the 4/pi table above), and the largest finite."""
    every = (np.arange(1 << 22, dtype=np.uint64) * 1024 + 517).astype(np.uint32)
    near = [np.arange(b - 4096, b + 4096, dtype=np.uint64).astype(np.uint32) | s
            for b in (0x39800000, 0x3F400000, 0x42F00000, 0x7F7FF000) for s in (0, 1 << 31)]
    return np.concatenate([every, *near]).view(np.float32)


def _modules(op: str, t: str, n: int) -> dict[str, str]:
    unfused = (f"HloModule m\nENTRY e {{\n  x = {t}[{n}] parameter(0)\n"
               f"  ROOT r = {t}[{n}] {op}(x)\n}}\n")
    fused = (f"HloModule m\nfc {{\n  p = {t}[{n}] parameter(0)\n  ROOT r = {t}[{n}] {op}(p)\n}}\n"
             f"ENTRY e {{\n  x = {t}[{n}] parameter(0)\n"
             f"  ROOT r = {t}[{n}] fusion(x), kind=kLoop, calls=fc\n}}\n")
    return {"unfused": unfused, "fused": fused}


def _check(op: str, x: np.ndarray) -> None:
    want = np.asarray(jax.jit(OPS[op])(x))
    for what, text in _modules(op, HLO_TYPE[x.dtype], x.size).items():
        got = as_list(run_module(parse_module(text), [x], fusion_min_elements=1))[0]
        assert_same(got, want, 0, f"{op} {x.dtype} {what}")


@pytest.fixture(params=[True, False], ids=["vector", "libm"])
def vector(request, monkeypatch):
    """Both paths: the vector forms where this process allows them (trig_vector.py), and
    the libm calls that stay where its self-check finds other bits."""
    if request.param and not TV.vector_trig_ok():
        pytest.skip("this process's libm is not glibc's FMA sinf: the vector forms stay off")
    monkeypatch.setattr(TV, "vector_trig_ok", lambda: request.param)
    return request.param


@pytest.mark.parametrize("op", sorted(OPS))
def test_f32_is_xlas_bit_for_bit(op, vector):
    _check(op, f32_inputs())


@pytest.mark.parametrize("op", sorted(OPS))
def test_f32_sweep_is_xlas_bit_for_bit(op):
    _check(op, f32_sweep())


@pytest.mark.parametrize("dt", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("op", sorted(OPS))
def test_narrow_floats_every_value(op, dt):
    _check(op, np.arange(1 << 16, dtype=np.uint16).view(dt))


# ---- the compiled while loop (benchmarks/run.py's while_loop workload) ------------------------

def bench_loop(x):  # (dtypes spelled out: the same HLO with jax_enable_x64 on or off)
    return lax.fori_loop(0, 2000, lambda i, c: jnp.sin(c) * 0.9 + jnp.cos(c) * 0.1
                         + i.astype(jnp.float32) * jnp.float32(0.001), x)


X = rng("libm32 loop").standard_normal(16).astype(np.float32)


def _loop_code():
    text = jax.jit(bench_loop).lower(X).as_text(dialect="hlo")
    m = parse_module(text)
    compile_module(m, None)
    (loop,) = [i for c in m.computations for i in c.instructions if i.opcode == "while"]
    return m, CW.generate(loop), loop


def test_compiled_loop_gives_xlas_bits(monkeypatch, vector):
    m, code, _ = _loop_code()
    assert ("_xsin32m(" in code.src) == vector
    compiled = []
    real = CW._run_compiled

    def run_compiled(ins, code, state, limit_left):
        compiled.append(ins.name)
        return real(ins, code, state, limit_left)
    monkeypatch.setattr(CW, "_run_compiled", run_compiled)
    got = execute(m, [X]).outputs[0]
    assert compiled, "the loop did not run compiled"
    assert_same(np.asarray(got), np.asarray(jax.jit(bench_loop)(X)), 0, "2,000 iterations")


def test_loop_values_stay_in_registers():
    _, code, _ = _loop_code()
    src = code.src
    # The body, and its element loop of sines and cosines in a function of its own
    # (loop_emitters.outline), which it calls.
    body = src[src.index("def body("):src.index("body = register_jitable")]
    buffers = body[body.index("(") + 1:body.index(")")].split(", ")[3:]
    body = src[:src.index("def cond(")] + body
    # f32 sine and cosine in f32, nothing converted to f64 in the element loop
    assert "_xsin32(" in body and "_xcos32(" in body and "float64" not in body
    # (each store twice where the loop has its libm rerun: trig_vector.far_loop)
    stored = {ln.strip().split("[")[0] for ln in body.splitlines() if "[o] = s_" in ln}
    # Stored: the two counters and the f32[16] value (returned) and 0.001 * i (read by the
    # next element loop); the other eight values (sin, cos, products, sums) stay in registers.
    assert sorted(buffers) == sorted(stored) and len(stored) == 4, (buffers, stored)


def _loop_asm(code, loop) -> str:
    """The machine code of the loop's run and the element loops it calls (outlined, each a
    dispatcher of its own), compiled here in memory: numba does not disassemble code it
    loaded from its cache."""
    ns: dict = {}
    exec(compile(module_text(code.src, code.consts, RUN_NJIT), "<loop>", "exec"), ns)
    fn = numba.njit(**RUN_NJIT)(ns["run"])
    fn(-1, *[np.zeros(1, s.dtype) for s in loop.shape.tuple_shapes[:-1]], X.copy())
    return "".join(f.inspect_asm(sig) for f in [fn, *ns.values()]
                   if isinstance(f, numba.core.dispatcher.Dispatcher) for sig in f.signatures)


def test_sines_and_cosines_in_the_loop_are_vector_code(vector):
    _, code, loop = _loop_code()
    fast = code.src[:code.src.index("if far:")] if vector else code.src
    # the loop's pass: no libm call (the rerun, for an element of 120 or more, calls them)
    assert ("_xsin32(" not in fast and "_xsin32m(" in fast) == vector
    asm = _loop_asm(code, loop)
    if platform.machine() in ("x86_64", "AMD64"):
        # glibc's f64 steps on several lanes at once: packed f64 instructions (x86-64's
        # spelling, ...pd on xmm/ymm/zmm registers)
        assert bool(re.search(r"v?(mul|add|fmadd\d*)pd\t%[xyz]mm", asm)) == vector
    if not vector and sys.platform.startswith("linux"):  # a sine and a cosine: one sincosf
        assert "sincosf" in asm


def test_far_arguments_rerun_the_loop_with_libm_calls(vector):
    """Values of 120 and more in some iterations (the medium form does not cover them):
    those iterations run again with the libm calls -- XLA's bits either way."""
    def f(x):
        return lax.fori_loop(0, 300, lambda i, c: jnp.sin(c) * 150.0 + jnp.cos(c)
                             + i.astype(jnp.float32) * jnp.float32(0.5), x)
    m = parse_module(jax.jit(f).lower(X).as_text(dialect="hlo"))
    compile_module(m, None)
    got = execute(m, [X]).outputs[0]
    assert_same(np.asarray(got), np.asarray(jax.jit(f)(X)), 0, "300 iterations")


def test_self_check_refuses_other_bits():
    """trig_vector.compare: equal bits in both forms pass; one element of either form off
    by an ULP fails (the vector forms then stay off)."""
    x = TV.check_inputs()
    assert x.size > 8000 and np.isinf(x).any() and np.isnan(x).any() \
        and (np.abs(x[np.isfinite(x)]) > 1e30).any()

    def check(off):
        def fill(x, *out):
            with np.errstate(invalid="ignore"):  # (inf)
                for k, o in enumerate(out):
                    o[:] = np.sin(x) if k % 2 == 0 else np.cos(x)
            if off is not None:
                out[off][7] = np.nextafter(out[off][7], np.float32(np.inf))
        return fill
    assert TV.compare(check(None), x)
    assert not any(TV.compare(check(k), x) for k in range(6))
