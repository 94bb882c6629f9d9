"""f32 sine and cosine give XLA:CPU's bits (common/scalar_libm.py: libm's sinf and cosf, as
XLA calls them) in the per-op kernels, in fused loops and in compiled while loops;
f16 and bf16 compute through them and round.  A compiled loop keeps its element values in
registers (no store of a value nothing reads after its loop), so a sine and a cosine of one
value share one sincosf call, as in XLA's code.  Expected values from jax.jit (XLA:CPU).
"""
from __future__ import annotations

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


@pytest.mark.parametrize("op", sorted(OPS))
def test_f32_is_xlas_bit_for_bit(op):
    _check(op, f32_inputs())


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


def test_compiled_loop_gives_xlas_bits(monkeypatch):
    m, code, _ = _loop_code()
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
    stored = [ln.strip().split("[")[0] for ln in body.splitlines() if "[o] = s_" in ln]
    # Stored: the two counters and the f32[16] value (returned) and 0.001 * i (read by the
    # next element loop); the other eight values (sin, cos, products, sums) stay in registers.
    assert sorted(buffers) == sorted(stored) and len(stored) == 4, (buffers, stored)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sincosf is glibc's")
def test_sine_and_cosine_of_one_value_share_a_sincosf_call():
    _, code, loop = _loop_code()
    # Compiled here, in memory: numba does not disassemble code it loaded from its cache.
    ns: dict = {}
    exec(compile(module_text(code.src, code.consts, RUN_NJIT), "<loop>", "exec"), ns)
    fn = numba.njit(**RUN_NJIT)(ns["run"])
    fn(-1, *[np.zeros(1, s.dtype) for s in loop.shape.tuple_shapes[:-1]], X.copy())
    asm = fn.inspect_asm(fn.signatures[0])
    assert "sincosf" in asm and "sinf" not in asm and asm.count("cosf") == asm.count("sincosf")
