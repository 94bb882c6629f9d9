"""fft and random-number kernels against jax (and XLA:CPU for forms jax does not emit).

fft results are compared with tight tolerances; rng-bit-generator output and state must be
bit-identical to XLA:CPU for every algorithm (rng_default is Philox on CPU).
"""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from oracle import check_against_jax, leaf_pairs, xla_cpu_run  # noqa: E402
from xlaplug.backends.executor import run_module  # noqa: E402
from xlaplug.hlo.parser import parse_module  # noqa: E402

RNG = np.random.default_rng(99)


def _compare(got, want, what, exact):
    for _, a, b in leaf_pairs(got, want, what, indexed=False):
        if exact or a.dtype.kind in "iub":
            np.testing.assert_array_equal(a, b, err_msg=what)
        else:
            single = a.dtype in (np.float32, np.complex64)
            tol = 1e-5 if single else 1e-12
            scale = max(float(np.max(np.abs(b), initial=0.0)), 1.0)
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol * scale, err_msg=what)


def check(f, *args, x64=False, exact=False, modes=("lowered", "compiled")):
    check_against_jax(f, args, lambda got, want, mode: _compare(got, want, mode, exact),
                      x64=x64, modes=modes)


def crnd(*shape, dtype=np.complex64):
    return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dtype)


def rrnd(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


# ---- fft ---------------------------------------------------------------------------------

def test_fft_1d():
    x = crnd(3, 16)
    check(jnp.fft.fft, x)
    check(jnp.fft.ifft, x)
    check(lambda x: jnp.fft.fft(x, axis=0), crnd(6, 5))
    check(jnp.fft.rfft, rrnd(4, 15))
    check(lambda x: jnp.fft.irfft(x, n=14), crnd(2, 8))
    check(lambda x: jnp.fft.irfft(x, n=15), crnd(2, 8))


def test_fft_2d_3d():
    check(jnp.fft.fft2, crnd(2, 6, 8))
    check(jnp.fft.ifft2, crnd(5, 7))
    check(jnp.fft.fftn, crnd(3, 4, 5))
    check(jnp.fft.ifftn, crnd(2, 3, 4, 6))
    check(lambda x: jnp.fft.fftn(x, axes=(1, 2, 3)), crnd(2, 3, 4, 6))
    check(jnp.fft.rfft2, rrnd(3, 6, 9))
    check(jnp.fft.rfftn, rrnd(4, 6, 8))
    check(lambda x: jnp.fft.irfftn(x, s=(4, 6, 8)), crnd(4, 6, 5))
    check(lambda x: jnp.fft.irfft2(x, s=(6, 9)), crnd(3, 6, 5))


def test_fft_double_precision_x64():
    check(jnp.fft.fft, crnd(4, 32, dtype=np.complex128), x64=True)
    check(jnp.fft.fftn, crnd(3, 5, 4, dtype=np.complex128), x64=True)
    check(jnp.fft.rfftn, rrnd(6, 4, 8, dtype=np.float64), x64=True)
    check(lambda x: jnp.fft.irfftn(x, s=(6, 4, 8)), crnd(6, 4, 5, dtype=np.complex128),
          x64=True)


def test_fft_roundtrip_program():
    x = rrnd(2, 32)
    check(lambda x: jnp.fft.irfft(jnp.fft.rfft(x) * 2, n=32), x)


# ---- rng-bit-generator ------------------------------------------------------------------

_ALGS = {"three_fry": lax.RandomAlgorithm.RNG_THREE_FRY,
         "philox": lax.RandomAlgorithm.RNG_PHILOX,
         "default": lax.RandomAlgorithm.RNG_DEFAULT}
_STATES = [np.array([0, 0], np.uint64),
           np.array([1234567890123, 2 ** 64 - 3], np.uint64),
           np.array([2 ** 64 - 1, 2 ** 63 + 5], np.uint64)]


@pytest.mark.parametrize("alg", list(_ALGS))
@pytest.mark.parametrize("shape,dtype", [
    ((), jnp.uint32), ((7,), jnp.uint32), ((3, 5), jnp.uint32), ((3, 3, 5), jnp.uint32),
    ((4, 6), jnp.uint32), ((), jnp.uint64), ((5,), jnp.uint64), ((2, 3), jnp.uint64),
    ((3, 5), jnp.uint8), ((9,), jnp.uint16),
])
def test_rng_bit_generator_matches_xla(alg, shape, dtype):
    f = jax.jit(lambda s: lax.rng_bit_generator(s, shape, dtype=dtype, algorithm=_ALGS[alg]))
    with jax.enable_x64(True):
        module = parse_module(f.lower(_STATES[0]).as_text(dialect="hlo"))
        for st in _STATES:
            _compare(run_module(module, [st]), f(st), f"state {st}", exact=True)


@pytest.mark.parametrize("alg", list(_ALGS))
def test_rng_bit_generator_optimized_hlo(alg):
    # XLA:CPU's optimized HLO expands rng-bit-generator into integer arithmetic.
    def f(s):
        s1, a = lax.rng_bit_generator(s, (3, 4), dtype=jnp.uint32, algorithm=_ALGS[alg])
        s2, b = lax.rng_bit_generator(s1, (5,), dtype=jnp.uint64, algorithm=_ALGS[alg])
        return s2, a, b
    check(f, _STATES[1], x64=True, exact=True, modes=("compiled",))


def test_rng_bit_generator_chained_state():
    def f(s):
        s1, a = lax.rng_bit_generator(s, (4, 5), dtype=jnp.uint32,
                                      algorithm=lax.RandomAlgorithm.RNG_PHILOX)
        s2, b = lax.rng_bit_generator(s1, (3,), dtype=jnp.uint64,
                                      algorithm=lax.RandomAlgorithm.RNG_PHILOX)
        s3, c = lax.rng_bit_generator(s2, (5, 3), dtype=jnp.uint32,
                                      algorithm=lax.RandomAlgorithm.RNG_THREE_FRY)
        return s3, a, b, c
    check(f, np.array([42, 2 ** 64 - 2], np.uint64), x64=True, exact=True)


@pytest.mark.parametrize("bits", [32, 64])
def test_rng_philox_three_word_state(bits):
    # jax only passes u64[2] states; XLA also takes a u64[3] Philox state (128-bit counter).
    n = 7
    mlir_text = f"""
module @m {{
  func.func public @main(%arg0: tensor<3xui64>) -> (tensor<3xui64>, tensor<{n}xui{bits}>) {{
    %0:2 = stablehlo.rng_bit_generator %arg0, algorithm = PHILOX : (tensor<3xui64>) -> (tensor<3xui64>, tensor<{n}xui{bits}>)
    return %0#0, %0#1 : tensor<3xui64>, tensor<{n}xui{bits}>
  }}
}}"""
    hlo = f"""
HloModule m
ENTRY e {{
  s = u64[3] parameter(0)
  ROOT r = (u64[3], u{bits}[{n}]) rng-bit-generator(s), algorithm=rng_philox
}}"""
    for st in ([1, 2 ** 64 - 2, 7], [5, 3, 2 ** 64 - 1], [9, 2 ** 64 - 1, 2 ** 64 - 1]):
        st = np.array(st, np.uint64)
        with jax.enable_x64(True):
            want = xla_cpu_run(mlir_text, st)
        got = run_module(parse_module(hlo), [st])
        _compare(got, want, "philox u64[3]", exact=True)


@pytest.mark.parametrize("impl", ["rbg", "unsafe_rbg"])
def test_jax_random_rbg(impl):
    def f(seed):
        key = jax.random.key(seed, impl=impl)
        k1, k2 = jax.random.split(key)
        return (jax.random.key_data(k1), jax.random.bits(k1, (3, 4)),
                jax.random.bits(k2, (5,), dtype=jnp.uint16), jax.random.uniform(k2, (2, 3)))
    check(f, np.uint32(1701), exact=True)


def test_jax_random_threefry():
    def f(seed):
        key = jax.random.key(seed, impl="threefry2x32")
        return jax.random.bits(key, (4, 3)), jax.random.uniform(key, (7,))
    check(f, np.uint32(7), exact=True)


# ---- rng (not bit-reproducible in XLA): distribution properties -------------------------

_RNG_HLO = """
HloModule m
ENTRY e {
  lo = f32[] parameter(0)
  hi = f32[] parameter(1)
  ilo = s32[] parameter(2)
  ihi = s32[] parameter(3)
  u = f32[20000] rng(lo, hi), distribution=rng_uniform
  n = f32[20000] rng(lo, hi), distribution=rng_normal
  i = s32[5000] rng(ilo, ihi), distribution=rng_uniform
  ROOT t = (f32[20000], f32[20000], s32[5000]) tuple(u, n, i)
}
"""


def test_rng_distributions():
    args = [np.float32(-2.0), np.float32(3.0), np.int32(-3), np.int32(4)]
    module = parse_module(_RNG_HLO)
    u, n, i = run_module(module, args)
    assert u.dtype == np.float32 and u.shape == (20000,)
    assert u.min() >= -2.0 and u.max() < 3.0
    assert abs(u.mean() - 0.5) < 0.1
    assert abs(n.mean() - (-2.0)) < 0.1 and abs(n.std() - 3.0) < 0.1
    assert i.dtype == np.int32 and i.min() == -3 and i.max() == 3
    # deterministic for a seed, different across seeds
    again = run_module(module, args)
    np.testing.assert_array_equal(again[0], u)
    other = run_module(module, args, seed=5)
    assert not np.array_equal(other[0], u)


def test_rng_uniform_from_jax():
    f = lambda a, b: lax.rng_uniform(a, b, (1000,))  # noqa: E731
    text = jax.jit(f).lower(np.float32(1.0), np.float32(1.5)).as_text(dialect="hlo")
    out = run_module(parse_module(text), [np.float32(1.0), np.float32(1.5)])
    assert out.dtype == np.float32 and out.shape == (1000,)
    assert out.min() >= 1.0 and out.max() < 1.5


def test_rng_optimized_hlo_matches_first_xla_run():
    # XLA:CPU expands rng into arithmetic on rng-get-and-update-state, whose per-instruction
    # state starts at a fixed value: a fresh executable's first run is reproducible.
    def f(a, b):
        return lax.rng_uniform(a, b, (6,)), lax.rng_uniform(a, b, (2, 3))
    args = (np.float32(1.0), np.float32(2.5))
    jf = jax.jit(f)
    text = jf.lower(*args).compile().as_text()
    want = jf(*args)
    _compare(run_module(parse_module(text), list(args)), want, "rng", exact=True)


def test_rng_stream_is_philox_blocks():
    # Element j of call c is the Philox-4x32-10 block at counter (low=j, high=c): the same
    # generator rng-bit-generator (bit-exact with XLA above) lays out round-robin.
    from xlaplug.backends.cpu.rng import philox_bits, rng_words
    key, call, n = 0x0123456789ABCDEF, 2 ** 40 + 3, 7
    w0, w1 = rng_words(key, call, n)
    blocks, _, _ = philox_bits(key, 0, call, (4 * n,), 32)
    blocks = blocks.reshape(n, 4).astype(np.uint64)
    np.testing.assert_array_equal(w0, blocks[:, 0] | (blocks[:, 1] << np.uint64(32)))
    np.testing.assert_array_equal(w1, blocks[:, 2] | (blocks[:, 3] << np.uint64(32)))


def _rng_module(t, dist="rng_uniform", dims="4000"):
    return parse_module(f"""
HloModule m
ENTRY e {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT r = {t}[{dims}] rng(a, b), distribution={dist}
}}""")


def test_rng_draws_do_not_depend_on_bounds():
    # The bits are counter-based: other bounds only rescale the same uniforms.
    m = _rng_module("f64")
    u = run_module(m, [np.float64(0.0), np.float64(1.0)], seed=4)
    v = run_module(m, [np.float64(2.0), np.float64(6.0)], seed=4)
    np.testing.assert_allclose((v - 2.0) / 4.0, u, rtol=0, atol=1e-15)
    i = run_module(_rng_module("s64"), [np.int64(0), np.int64(2 ** 62)], seed=4)
    j = run_module(_rng_module("s64"), [np.int64(-5), np.int64(2 ** 62 - 5)], seed=4)
    np.testing.assert_array_equal(j + 5, i)


@pytest.mark.parametrize("t,lo,hi", [
    ("s64", -(2 ** 63), 2 ** 63 - 1), ("u64", 0, 2 ** 64 - 1), ("u64", 2 ** 64 - 9, 2 ** 64 - 1),
    ("s32", -(2 ** 31), 2 ** 31 - 1), ("s8", -128, 127), ("u8", 250, 255), ("s16", -7, -3),
])
def test_rng_integer_bounds(t, lo, hi):
    from xlaplug.hlo import dtypes as D
    dt = D.to_dtype(t)
    out = run_module(_rng_module(t), [np.array(lo, dt), np.array(hi, dt)])
    assert out.dtype == dt
    vals = [int(x) for x in out]
    assert min(vals) >= lo and max(vals) < hi
    mid = lo + (hi - lo) // 2   # both halves of a full 64-bit range are drawn
    assert any(v < mid for v in vals) and any(v >= mid for v in vals)
    # hi <= lo gives lo
    same = run_module(_rng_module(t), [np.array(hi, dt), np.array(lo, dt)])
    assert (same == np.array(hi, dt)).all()


def test_rng_float_edges():
    m = _rng_module("f32")
    assert (run_module(m, [np.float32(2.0), np.float32(2.0)]) == 2.0).all()
    back = run_module(m, [np.float32(3.0), np.float32(-1.0)])   # hi < lo: the formula
    assert back.min() > -1.0 and back.max() <= 3.0
    # f16: every value of [1, next f16) rounds to 1 or to hi; those at hi become lo
    one = run_module(_rng_module("f16"), [np.float16(1.0), np.float16(1.0009765625)])
    assert (one == np.float16(1.0)).all()
    import ml_dtypes
    b = run_module(_rng_module("bf16"), [np.array(-2.0, ml_dtypes.bfloat16),
                                        np.array(5.0, ml_dtypes.bfloat16)])
    assert b.dtype == ml_dtypes.bfloat16
    assert b.astype(np.float32).min() >= -2.0 and b.astype(np.float32).max() < 5.0
    p = run_module(_rng_module("pred"), [np.bool_(False), np.bool_(True)])
    assert p.dtype == np.bool_ and not p.any()   # [false, true) holds only false


_RNG_LOOP = """
HloModule loop

cond {
  s = (s32[], f32[4,3]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  s = (s32[], f32[4,3]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  f = f32[4,3] get-tuple-element(s), index=1
  lo = f32[] constant(0)
  hi = f32[] constant(1)
  r = f32[1,3] rng(lo, hi), distribution=rng_uniform
  z = s32[] constant(0)
  f1 = f32[4,3] dynamic-update-slice(f, r, i, z)
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  ROOT t = (s32[], f32[4,3]) tuple(i1, f1)
}

ENTRY main {
  zero = s32[] constant(0)
  f = f32[4,3] parameter(0)
  lo = f32[] constant(0)
  hi = f32[] constant(1)
  r0 = f32[3] rng(lo, hi), distribution=rng_uniform
  r1 = f32[3] rng(lo, hi), distribution=rng_uniform
  init = (s32[], f32[4,3]) tuple(zero, f)
  w = (s32[], f32[4,3]) while(init), condition=cond, body=body
  rf = f32[4,3] get-tuple-element(w), index=1
  ROOT out = (f32[4,3], f32[3], f32[3]) tuple(rf, r0, r1)
}
"""


def test_rng_fresh_per_iteration_and_instruction():
    module = parse_module(_RNG_LOOP)
    f, r0, r1 = run_module(module, [np.zeros((4, 3), np.float32)])
    assert len({row.tobytes() for row in f}) == 4     # each iteration draws anew
    assert not np.array_equal(r0, r1)                 # each instruction has its own stream
    again = run_module(module, [np.zeros((4, 3), np.float32)])
    for a, b in zip(again, (f, r0, r1)):              # a new run starts over
        np.testing.assert_array_equal(a, b)
