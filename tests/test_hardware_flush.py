"""Fused loops under the MXCSR's FTZ and DAZ bits (cpu/hardware_flush.py) give XLA:CPU's bits
for every eligible op, on inputs made to hit the flushes: subnormal operands, results that
underflow (and the products that round up to the smallest normal only without FTZ), zeros
of both signs, infinities, NaN; the thread's MXCSR is put back after the loop, on the
calling thread and on numba's."""
from __future__ import annotations

import ctypes

import ml_dtypes
import numba
import numpy as np
import pytest

from xlaplug.backends.common.fusion_contents import loop_shape
from xlaplug.backends.cpu import denormals, ftz_forms, hardware_flush
from xlaplug.backends.cpu.fused_loop import compiled_loop_fn
from xlaplug.hlo import parse_module

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

pytestmark = [pytest.mark.jax, pytest.mark.skipif(
    not (hardware_flush.available() and denormals.available()),
    reason="the MXCSR's FTZ and DAZ bits are x86-64's; this machine has none")]

N = 4099  # vector blocks and a remainder


def _subnormals(rng, shape) -> np.ndarray:
    """f32 subnormals of both signs (a mantissa, and the sign bit)."""
    bits = rng.integers(1, 1 << 23, shape).astype(np.uint32) | \
        (rng.integers(0, 2, shape).astype(np.uint32) << np.uint32(31))
    return bits.view(np.float32)


def _edges(rng, n: int) -> np.ndarray:
    """f32 values around the flushes: subnormals, the smallest normals, values whose
    products and quotients land around 2^-126, exp's underflow range, zeros, inf, NaN."""
    tiny = np.finfo(np.float32).tiny
    pool = [np.float32(v) for v in (0.0, -0.0, np.inf, -np.inf, np.nan, tiny, -tiny,
                                    tiny * 1.5, 1.0, -1.0, 2.0 ** 63, 1e30, -1e30)]
    special = np.array(pool, np.float32)
    sub = _subnormals(rng, n)
    near = (2.0 ** -63 * (1 + rng.uniform(-2 ** -20, 2 ** -20, n))).astype(np.float32)
    expo = rng.uniform(-110, -80, n).astype(np.float32)  # exp's results: subnormal, flushed
    normal = rng.standard_normal(n).astype(np.float32)
    out = np.concatenate([special, sub, near, -near, expo, normal * 1e-19, normal])
    return rng.permutation(out)[:n]


def _loop(body: str, params: int, dtype: str = "f32", hardware: bool = True, n: int = N):
    """The compiled loop (hardware: under the bits) of fusion `body` over [n] parameters."""
    decl = "".join(f"  p{k} = {dtype}[{n}] parameter({k})\n" for k in range(params))
    args = ", ".join(f"a{k}" for k in range(params))
    text = ("HloModule h\n\nfused {\n" + decl + body + "}\n\nENTRY main {\n"
            + "".join(f"  a{k} = {dtype}[{n}] parameter({k})\n" for k in range(params))
            + f"  ROOT f = {dtype}[{n}] fusion({args}), kind=kLoop, calls=fused\n}}\n")
    comp = next(c for c in parse_module(text).computations if c.name == "fused")
    assert hardware_flush.eligible(comp)
    return compiled_loop_fn(comp, tuple(loop_shape(comp)), parallel=False, hardware=hardware)


def _same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    got, want = np.asarray(got), np.asarray(want)
    nan = np.isnan(got.astype(np.float32)) & np.isnan(want.astype(np.float32))
    bad = (got.view(np.uint16 if got.itemsize == 2 else np.uint32) !=
           want.view(np.uint16 if want.itemsize == 2 else np.uint32)) & ~nan
    assert not bad.any(), (what, np.flatnonzero(bad)[:5], got[bad][:5], want[bad][:5])


UNARY = {"exponential": jnp.exp, "tanh": jnp.tanh, "logistic": jax.nn.sigmoid,
         "sqrt": jnp.sqrt, "rsqrt": jax.lax.rsqrt, "log": jnp.log, "negate": jnp.negative,
         "abs": jnp.abs}
BINARY = {"add": jnp.add, "subtract": jnp.subtract, "multiply": jnp.multiply,
          "divide": jnp.divide, "maximum": jnp.maximum, "minimum": jnp.minimum}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_ops_are_xlas_bits(op):
    x = _edges(np.random.default_rng(1), N)
    if op in ("sqrt", "rsqrt", "log"):
        x = np.abs(x)  # (and the NaNs of negative inputs, below, from the specials)
        x[:3] = [-1.0, -0.0, -np.finfo(np.float32).tiny]
    fn = _loop(f"  ROOT r = f32[{N}] {op}(p0)\n", 1)
    out = np.empty(N, np.float32)
    fn(out, x)
    if op != "rsqrt":
        _same(out, jax.jit(UNARY[op])(x), op)
        return
    # rsqrt is 1/sqrt correctly rounded, up to 1 ULP from XLA's (tests/test_elementwise.py):
    # the bits are the software-flushed loop's, and no result of it is subnormal.
    soft = np.empty(N, np.float32)
    _loop(f"  ROOT r = f32[{N}] {op}(p0)\n", 1, hardware=False)(soft, x)
    _same(out, soft, op)


@pytest.mark.parametrize("op", ["exponential", "logistic"])
def test_exp_under_the_bits_is_xlas_on_a_sweep_of_every_kind_of_f32(op):
    """Under the bits f32 exp (and the logistic, 1 / (1 + exp(-x))) is XLA's own expansion,
    its flushes, overflow and NaNs left to the FTZ bit and IEEE arithmetic (cpu/ftz_forms.py),
    not the software form's selects: XLA's bits on a strided sweep of all 2^32 patterns (NaN
    payloads, infinities, subnormals) and on every f32 around exp's underflow and overflow,
    and the software-flushed loop's too.  (Run once on all 2^32 inputs, 2026-12-06, with
    AVX-512 and with AVX2 code: none differs.)"""
    sweep = (np.arange(0, 1 << 32, 1009, dtype=np.uint64) + 7).astype(np.uint32).view(np.float32)
    under = np.arange(np.float32(-87.9), np.float32(-86.4), np.float32(2.0 ** -17))
    over = np.arange(np.float32(88.3), np.float32(88.9), np.float32(2.0 ** -17))
    edges = np.concatenate([under, over]).astype(np.float32)
    x = np.concatenate([sweep, edges, -edges])  # (the logistic's are exp(-x)'s)
    body = f"  ROOT r = f32[{x.size}] {op}(p0)\n"
    out, soft = np.empty_like(x), np.empty_like(x)
    fn = _loop(body, 1, n=x.size)
    # the loop's module calls ftz_forms's forms, not the software-flushed ones
    assert fn.py_func.__globals__["_xexp32"] is ftz_forms.xexp32_ftz
    assert fn.py_func.__globals__["_xlogistic32"] is ftz_forms.xlogistic32_ftz
    fn(out, x)
    _loop(body, 1, n=x.size, hardware=False)(soft, x)
    want = np.asarray(jax.jit(UNARY[op])(x))
    _same(out, want, op)
    _same(soft, want, f"{op} without the bits")
    if op == "exponential":  # (a logistic's NaN is its own: 1 / NaN)
        assert np.array_equal(out.view(np.uint32), want.view(np.uint32))  # NaN payloads


@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_ops_are_xlas_bits(op):
    rng = np.random.default_rng(2)
    x, y = _edges(rng, N), _edges(rng, N)
    if op == "divide":
        y = np.where(rng.random(N) < 0.3, np.float32(2.0 ** 63), y).astype(np.float32)
    fn = _loop(f"  ROOT r = f32[{N}] {op}(p0, p1)\n", 2)
    out = np.empty(N, np.float32)
    fn(out, x, y)
    _same(out, jax.jit(BINARY[op])(x, y), op)


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_maximum_and_minimum_are_xlas_on_every_pair_of_edges(op):
    """Under the bits f32 maximum and minimum are XLA's own llvm.maximum / llvm.minimum
    (cpu/ftz_forms.py), the DAZ of their operands the hardware's: XLA's bits on every pair
    of signed zeros, subnormals (the smallest, the largest, others), normals around them,
    infinities and NaNs of either sign -- and the software-flushed loop's."""
    info = np.finfo(np.float32)
    sub = np.array([1, 2, 12345, (1 << 23) - 1], np.uint32).view(np.float32)
    pos = np.concatenate([np.array([0.0, info.tiny, info.tiny * 3, 1.0, 2.5, info.max,
                                    np.inf, np.nan], np.float32), sub])
    pool = np.concatenate([pos, -pos])
    x, y = (a.ravel() for a in np.meshgrid(pool, pool))
    body = f"  ROOT r = f32[{x.size}] {op}(p0, p1)\n"
    fn = _loop(body, 2, n=x.size)
    assert fn.py_func.__globals__[f"_xf{op[:3]}d32"] is getattr(ftz_forms, f"x{op}32_ftz")
    out, soft = np.empty_like(x), np.empty_like(x)
    fn(out, x, y)
    _loop(body, 2, n=x.size, hardware=False)(soft, x, y)
    want = np.asarray(jax.jit(BINARY[op])(x, y))
    for got, what in ((out, op), (soft, f"{op} without the bits")):
        assert np.array_equal(np.isnan(got), np.isnan(want)), what
        bad = (got.view(np.uint32) != want.view(np.uint32)) & ~np.isnan(got)
        assert not bad.any(), (what, x[bad][:5], y[bad][:5], got[bad][:5], want[bad][:5])


def test_products_rounding_up_to_the_smallest_normal_are_flushed_as_xla():
    """0.99999994 * 2^-126 (a product of two values near 2^-63) is 0 under FTZ -- XLA's
    answer -- where a flush after rounding kept the 2^-126 it rounds to."""
    a = np.full(N, np.float32(2.0 ** -63), np.float32)
    b = np.full(N, np.nextafter(np.float32(2.0 ** -63), np.float32(0)), np.float32)
    out = np.empty(N, np.float32)
    _loop(f"  ROOT r = f32[{N}] multiply(p0, p1)\n", 2)(out, a, b)
    assert (out == 0).all()
    _same(out, jax.jit(lambda a, b: a * b)(a, b), "multiply")
    soft = np.empty(N, np.float32)  # the software flush's answer, and why it is not used
    _loop(f"  ROOT r = f32[{N}] multiply(p0, p1)\n", 2, hardware=False)(soft, a, b)
    assert (soft == np.finfo(np.float32).tiny).all()


def test_chains_compares_selects_and_bf16_are_xlas_bits():
    rng = np.random.default_rng(3)
    x, y = _edges(rng, N), _edges(rng, N)
    body = (f"  e = f32[{N}] exponential(p0)\n  t = f32[{N}] tanh(p1)\n"
            f"  m = f32[{N}] multiply(e, t)\n  c = pred[{N}] compare(p0, p1), direction=GT\n"
            f"  s = f32[{N}] select(c, m, p1)\n  k = f32[] constant(0.5)\n"
            f"  kb = f32[{N}] broadcast(k), dimensions={{}}\n"
            f"  q = f32[{N}] clamp(kb, s, p0)\n  b = bf16[{N}] convert(q)\n"
            f"  ROOT r = f32[{N}] convert(b)\n")
    fn = _loop(body, 2)
    out = np.empty(N, np.float32)
    fn(out, x, y)

    def f(x, y):
        s = jnp.where(x > y, jnp.exp(x) * jnp.tanh(y), y)
        return jnp.clip(s, 0.5, x).astype(jnp.bfloat16).astype(jnp.float32)
    _same(out, jax.jit(f)(x, y), "chain")


def test_bf16_loop_is_xlas_bits():
    rng = np.random.default_rng(4)
    with np.errstate(invalid="ignore"):
        x = _edges(rng, N).astype(ml_dtypes.bfloat16)
        y = _edges(rng, N).astype(ml_dtypes.bfloat16)
    fn = _loop(f"  m = bf16[{N}] multiply(p0, p1)\n  ROOT r = bf16[{N}] add(m, p0)\n",
               2, "bf16")
    out = np.empty(N, np.uint16)  # bf16 loops read and write bits (jit_drivers.loop_storage)
    fn(out, x.view(np.uint16), y.view(np.uint16))
    _same(out, np.asarray(jax.jit(lambda a, b: a * b + a)(x, y)).view(np.uint16), "bf16")


def _mxcsr_flush_bits() -> int:
    env = ctypes.create_string_buffer(32)
    denormals._libm().fegetenv(env)
    return int.from_bytes(env.raw[28:32], "little") & (denormals.FTZ | denormals.DAZ)


@numba.njit(parallel=True)
def _products(a, b, out):
    for i in numba.prange(out.shape[0]):
        out[i] = a[i] * b[i]


def test_the_threads_mxcsr_is_restored():
    fn = _loop(f"  ROOT r = f32[{N}] multiply(p0, p1)\n", 2)
    before = _mxcsr_flush_bits()
    a = np.full(N, np.float32(2.0 ** -70), np.float32)
    out = np.empty(N, np.float32)
    fn(out, a, a)
    assert (out == 0).all()  # flushed inside
    assert _mxcsr_flush_bits() == before
    comp = next(c for c in parse_module(
        "HloModule h\n\nfused {\n  p0 = f32[65536] parameter(0)\n  ROOT r = f32[65536] "
        "multiply(p0, p0)\n}\n\nENTRY main {\n  a = f32[65536] parameter(0)\n  ROOT f = "
        "f32[65536] fusion(a), kind=kLoop, calls=fused\n}\n").computations if c.name == "fused")
    big = np.full(65536, np.float32(2.0 ** -70), np.float32)
    wide = compiled_loop_fn(comp, tuple(loop_shape(comp)), parallel=True, hardware=True)
    got = np.empty_like(big)
    wide(got, big)
    assert (got == 0).all()
    plain = np.empty_like(big)  # numba's threads after the loop: IEEE subnormal products
    _products(big, np.full_like(big, 2.0 ** -60), plain)
    assert (plain == np.float32(2.0 ** -130)).all()


def test_libm_ops_are_not_eligible():
    text = ("HloModule h\n\nfused {\n  p0 = f32[8] parameter(0)\n  ROOT r = f32[8] sine(p0)\n"
            "}\n\nENTRY main {\n  a = f32[8] parameter(0)\n  ROOT f = f32[8] fusion(a), "
            "kind=kLoop, calls=fused\n}\n")
    comp = next(c for c in parse_module(text).computations if c.name == "fused")
    assert not hardware_flush.eligible(comp)


def test_row_loops_run_under_the_bits_with_the_interpreters_bits(monkeypatch):
    """A softmax and a layer norm as row loops (row_loop.py) under the bits: the same bits as
    the interpreter's kernels (numpy's reduces under FTZ and DAZ, denormals.py) on rows
    holding subnormals and values whose exp underflows, and close to XLA's."""
    from xlaplug.backends.common.row_contents import row_shape
    from xlaplug.backends.cpu import row_loop
    from xlaplug.runtime.driver import compile_module
    from xlaplug.runtime.runner import execute
    rng = np.random.default_rng(5)
    x = rng.standard_normal((64, 300)).astype(np.float32)
    x[:, ::7] = _subnormals(rng, (64, 43))
    x[:, 1::7] *= np.float32(1e-36)  # tiny normals: their squares and products underflow
    x[:, 5] = -100.0  # exp(x - max) underflows: flushed
    x[3] = np.finfo(np.float32).tiny / 8  # a row of subnormals (DAZ: zeros)
    assert np.isfinite(x).all()

    def layer_norm(x):
        m = x.mean(-1, keepdims=True)
        return (x - m) * jax.lax.rsqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5)
    gens = []
    real = row_loop.RowLoopGen.source

    def spy(self, parallel):
        gens.append(self.hardware)
        return real(self, parallel)
    monkeypatch.setattr(row_loop.RowLoopGen, "source", spy)
    for f in (lambda x: jax.nn.softmax(x, axis=-1), layer_norm):
        jf = jax.jit(f)
        m = parse_module(jf.lower(x).as_text(dialect="hlo"))
        compile_module(m, None, options={"reduce-fusion": {"min_elements": 1}})
        assert any(row_shape(i.attrs["calls"][0]) for c in m.computations
                   for i in c.instructions if i.opcode == "fusion")
        got = execute(m, [x], fusion_min_elements=1).outputs[0]
        ref = execute(m, [x], interpret=True).outputs[0]
        np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))
        np.testing.assert_allclose(got, np.asarray(jf(x)), rtol=2e-5, atol=2e-6)
    assert gens and all(gens)
