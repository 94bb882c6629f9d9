"""fft and random numbers on every device (tests/devices.py).

On cpu, fft results are compared with jax's within tight tolerances, and rng-bit-generator
output and state must be bit-identical to XLA:CPU for every algorithm (rng_default is
Philox on CPU).  `rng` is not bit-reproducible in XLA: on cpu its draws are checked for
their distribution, range and determinism; cuda draws the same counter-based stream.

On cuda, programs are compared with the cpu's results: rng-bit-generator outputs and
states and rng draws bit for bit, except normal draws, which agree to 1e-12 (libdevice's
and numpy's log and cos may differ in the last bit on a GPU); fft results to a few ulps of
the largest magnitude (the CUDA kernel is a direct DFT accumulated in f64, numpy's
pocketfft an FFT in the result's precision).  An rng run on cuda copies nothing back but
its results.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from devices import check_on, on_each_device  # noqa: E402
from oracle import (count_host_copies, cuda_and_cpu, entry, leaf_pairs, leaves,  # noqa: E402
                    xla_cpu_run)
from xlaplug.runtime.executor import run_module  # noqa: E402
from xlaplug.hlo import dtypes as D  # noqa: E402
from xlaplug.hlo.text.parser import parse_module  # noqa: E402

pytestmark = pytest.mark.jax
RNG = np.random.default_rng(99)


def _compare(got, want, what, exact):
    """Against jax."""
    for _, a, b in leaf_pairs(got, want, what, indexed=False):
        if exact or a.dtype.kind in "iub":
            np.testing.assert_array_equal(a, b, err_msg=what)
        else:
            single = a.dtype in (np.float32, np.complex64)
            tol = 1e-5 if single else 1e-12
            scale = max(float(np.max(np.abs(b), initial=0.0)), 1.0)
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol * scale, err_msg=what)


def assert_same(got, want, what="", exact=False):
    """cuda against cpu."""
    g, w = leaves(got), leaves(want)
    assert len(g) == len(w), what
    for a, b in zip(g, w):
        assert a.dtype == b.dtype and a.shape == b.shape, \
            f"{what}: {a.dtype}{a.shape} != {b.dtype}{b.shape}"
        if exact or a.dtype.kind in "iub":
            assert a.tobytes() == b.tobytes(), f"{what}:\n{a}\n!=\n{b}"
            continue
        tol = 2e-6 if a.dtype in (np.float32, np.complex64) else 1e-14
        scale = max(float(np.max(np.abs(b), initial=0.0)), 1.0)
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * scale, err_msg=what)


def check(device, f, *args, x64=False, exact=False, modes=("lowered", "compiled"),
          opcode=None):
    """cpu: each HLO form of `modes` against jax; cuda: the same forms against the cpu."""
    check_on(device, f, args, lambda got, want, mode: _compare(got, want, mode, exact),
             x64=x64, modes=modes, expect_op=opcode,
             cuda_compare=lambda got, want, mode: assert_same(got, want, mode, exact))


def check_text(device, text, *args, want=None, exact=False, **opts):
    """Hand-written HLO: cuda against the cpu; cpu against `want()` (jax or XLA:CPU)."""
    module = parse_module(text)
    if device == "cuda":
        got, cpu = cuda_and_cpu(module, args, **opts)
        assert_same(got, cpu, text, exact)
        return got
    got = run_module(module, list(args), **opts)
    _compare(got, want(), text, exact)
    return got


def run(device, module, args, **opts):
    """The device's result; on cuda also checked to be the cpu's, bit for bit."""
    if device == "cpu":
        return run_module(module, list(args), **opts)
    got, cpu = cuda_and_cpu(module, args, **opts)
    assert_same(got, cpu, "cuda against cpu", exact=True)
    return got


def crnd(*shape, dtype=np.complex64):
    return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dtype)


def rrnd(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


# ---- fft ---------------------------------------------------------------------------------

@on_each_device
def test_fft_1d(device):
    x = crnd(3, 16)
    check(device, jnp.fft.fft, x)
    check(device, jnp.fft.ifft, x)
    check(device, lambda x: jnp.fft.fft(x, axis=0), crnd(6, 5))
    check(device, jnp.fft.rfft, rrnd(4, 15))
    check(device, lambda x: jnp.fft.irfft(x, n=14), crnd(2, 8))
    check(device, lambda x: jnp.fft.irfft(x, n=15), crnd(2, 8))


@on_each_device
def test_fft_2d_3d(device):
    check(device, jnp.fft.fft2, crnd(2, 6, 8))
    check(device, jnp.fft.ifft2, crnd(5, 7))
    check(device, jnp.fft.fftn, crnd(3, 4, 5))
    check(device, jnp.fft.ifftn, crnd(2, 3, 4, 6))
    check(device, lambda x: jnp.fft.fftn(x, axes=(1, 2, 3)), crnd(2, 3, 4, 6))
    check(device, jnp.fft.rfft2, rrnd(3, 6, 9))
    check(device, jnp.fft.rfftn, rrnd(4, 6, 8))
    check(device, lambda x: jnp.fft.irfftn(x, s=(4, 6, 8)), crnd(4, 6, 5))
    check(device, lambda x: jnp.fft.irfft2(x, s=(6, 9)), crnd(3, 6, 5))


@on_each_device
def test_fft_double_precision_x64(device):
    check(device, jnp.fft.fft, crnd(4, 32, dtype=np.complex128), x64=True)
    check(device, jnp.fft.fftn, crnd(3, 5, 4, dtype=np.complex128), x64=True)
    check(device, jnp.fft.rfftn, rrnd(6, 4, 8, dtype=np.float64), x64=True)
    check(device, lambda x: jnp.fft.irfftn(x, s=(6, 4, 8)), crnd(6, 4, 5, dtype=np.complex128),
          x64=True)


@on_each_device
def test_fft_roundtrip_program(device):
    x = rrnd(2, 32)
    check(device, lambda x: jnp.fft.irfft(jnp.fft.rfft(x) * 2, n=32), x)


@on_each_device
def test_fft_small_and_odd_lengths(device):
    check(device, jnp.fft.fft, crnd(2, 5), opcode="fft")
    check(device, jnp.fft.ifft, crnd(2, 6))
    check(device, jnp.fft.fft2, crnd(2, 3, 4))
    check(device, jnp.fft.ifft2, crnd(3, 5))
    check(device, lambda x: jnp.fft.fftn(x, axes=(-3, -2, -1)), crnd(2, 2, 3, 4))
    check(device, lambda x: jnp.fft.ifftn(x, axes=(0, 1, 2)), crnd(3, 2, 3))
    check(device, jnp.fft.rfft, rrnd(2, 7))
    check(device, jnp.fft.rfft, rrnd(3, 8))
    check(device, lambda x: jnp.fft.rfftn(x, axes=(0, 1, 2)), rrnd(2, 3, 4))
    check(device, lambda x: jnp.fft.irfft(x, n=6), crnd(2, 4))            # even: Nyquist bin
    check(device, lambda x: jnp.fft.irfft(x, n=7), crnd(2, 4))            # odd
    check(device, lambda x: jnp.fft.irfft2(x, s=(3, 5)), crnd(3, 3))
    check(device, lambda x: jnp.fft.irfftn(x, s=(2, 3, 4), axes=(0, 1, 2)), crnd(2, 3, 3))
    check(device, jnp.fft.fft, crnd(2, 7, dtype=np.complex128), x64=True)
    check(device, jnp.fft.rfft2, rrnd(3, 6, dtype=np.float64), x64=True)
    check(device, lambda x: jnp.fft.irfft(x, n=8), crnd(2, 5, dtype=np.complex128), x64=True)


@on_each_device
def test_fft_roundtrip_and_real_part_ignored(device):
    x = rrnd(3, 8)
    check(device, lambda x: jnp.fft.irfft(jnp.fft.rfft(x), n=8), x)
    # the imaginary parts of the DC and Nyquist bins are ignored by IRFFT
    text = entry("x = c64[2,5] parameter(0)",
                 "y = f32[2,8] fft(x), fft_type=IRFFT, fft_length={8}")
    y = crnd(2, 5)
    check_text(device, text, y, want=lambda: jnp.fft.irfft(y, n=8))


@on_each_device
def test_fft_zero_size(device):
    text = entry("x = c64[0,4] parameter(0)",
                 "y = c64[0,4] fft(x), fft_type=FFT, fft_length={4}")
    x = crnd(0, 4)
    got = check_text(device, text, x, want=lambda: jnp.fft.fft(x))
    assert got.shape == (0, 4)


# ---- rng-bit-generator ------------------------------------------------------------------

_ALGS = {"three_fry": lax.RandomAlgorithm.RNG_THREE_FRY,
         "philox": lax.RandomAlgorithm.RNG_PHILOX,
         "default": lax.RandomAlgorithm.RNG_DEFAULT}
_STATES = [np.array([0, 0], np.uint64),
           np.array([1234567890123, 2 ** 64 - 3], np.uint64),   # the counter wraps
           np.array([2 ** 64 - 1, 2 ** 63 + 5], np.uint64)]


@pytest.mark.parametrize("alg", list(_ALGS))
@pytest.mark.parametrize("shape,dtype", [
    ((), jnp.uint32), ((7,), jnp.uint32), ((3, 5), jnp.uint32), ((3, 3, 5), jnp.uint32),
    ((4, 6), jnp.uint32), ((), jnp.uint64), ((5,), jnp.uint64), ((2, 3), jnp.uint64),
    ((3, 5), jnp.uint8), ((9,), jnp.uint16),
])
@on_each_device
def test_rng_bit_generator_matches_xla(device, alg, shape, dtype):
    f = jax.jit(lambda s: lax.rng_bit_generator(s, shape, dtype=dtype, algorithm=_ALGS[alg]))
    with jax.enable_x64(True):
        module = parse_module(f.lower(_STATES[0]).as_text(dialect="hlo"))
        for st in _STATES:
            if device == "cuda":
                got, want = cuda_and_cpu(module, [st])
                assert_same(got, want, f"{alg} {shape} {dtype} state {st}", exact=True)
            else:
                _compare(run_module(module, [st]), f(st), f"state {st}", exact=True)


@pytest.mark.parametrize("alg", list(_ALGS))
@on_each_device
def test_rng_bit_generator_optimized_hlo(device, alg):
    # XLA:CPU's optimized HLO expands rng-bit-generator into integer arithmetic.
    def f(s):
        s1, a = lax.rng_bit_generator(s, (3, 4), dtype=jnp.uint32, algorithm=_ALGS[alg])
        s2, b = lax.rng_bit_generator(s1, (5,), dtype=jnp.uint64, algorithm=_ALGS[alg])
        return s2, a, b
    check(device, f, _STATES[1], x64=True, exact=True, modes=("compiled",))


@on_each_device
def test_rng_bit_generator_chained_state(device):
    def f(s):
        s1, a = lax.rng_bit_generator(s, (4, 5), dtype=jnp.uint32,
                                      algorithm=lax.RandomAlgorithm.RNG_PHILOX)
        s2, b = lax.rng_bit_generator(s1, (3,), dtype=jnp.uint64,
                                      algorithm=lax.RandomAlgorithm.RNG_PHILOX)
        s3, c = lax.rng_bit_generator(s2, (5, 3), dtype=jnp.uint32,
                                      algorithm=lax.RandomAlgorithm.RNG_THREE_FRY)
        return s3, a, b, c
    check(device, f, np.array([42, 2 ** 64 - 2], np.uint64), x64=True, exact=True)


@pytest.mark.parametrize("bits", [32, 64])
@on_each_device
def test_rng_philox_three_word_state(device, bits):
    # jax only passes u64[2] states; XLA also takes a u64[3] Philox state (128-bit counter).
    n = 7
    mlir_text = f"""
module @m {{
  func.func public @main(%arg0: tensor<3xui64>) -> (tensor<3xui64>, tensor<{n}xui{bits}>) {{
    %0:2 = stablehlo.rng_bit_generator %arg0, algorithm = PHILOX : (tensor<3xui64>) -> (tensor<3xui64>, tensor<{n}xui{bits}>)
    return %0#0, %0#1 : tensor<3xui64>, tensor<{n}xui{bits}>
  }}
}}"""
    hlo = entry("s = u64[3] parameter(0)",
                f"r = (u64[3], u{bits}[{n}]) rng-bit-generator(s), algorithm=rng_philox")
    for st in ([1, 2 ** 64 - 2, 7], [5, 3, 2 ** 64 - 1], [9, 2 ** 64 - 1, 2 ** 64 - 1]):
        st = np.array(st, np.uint64)

        def want():
            with jax.enable_x64(True):
                return xla_cpu_run(mlir_text, st)
        check_text(device, hlo, st, want=want, exact=True)


@pytest.mark.parametrize("impl", ["rbg", "unsafe_rbg"])
@on_each_device
def test_jax_random_rbg(device, impl):
    def f(seed):
        key = jax.random.key(seed, impl=impl)
        k1, k2 = jax.random.split(key)
        return (jax.random.key_data(k1), jax.random.bits(k1, (3, 4)),
                jax.random.bits(k2, (5,), dtype=jnp.uint16), jax.random.uniform(k2, (2, 3)))
    check(device, f, np.uint32(1701), exact=True)


@on_each_device
def test_jax_random_threefry(device):
    def f(seed):
        key = jax.random.key(seed, impl="threefry2x32")
        return jax.random.bits(key, (4, 3)), jax.random.uniform(key, (7,))
    check(device, f, np.uint32(7), exact=True)


@pytest.mark.parametrize("alg", ["rng_philox", "rng_three_fry", "rng_default"])
@pytest.mark.cuda
def test_rng_bit_generator_state_words_and_types_on_cuda(alg):
    """u64[3] (128-bit Philox counter) and u64[4] states; signed, float and narrow outputs
    are the generator's bits reinterpreted -- against the cpu (jax emits none of these)."""
    for words, st in ((2, [5, 2 ** 64 - 1]), (3, [1, 2 ** 64 - 2, 2 ** 64 - 1]),
                      (4, [9, 2 ** 64 - 1, 2 ** 64 - 1, 3])):
        for out in ("s32[2,3]", "f32[5]", "s8[9]", "f16[3,3]", "s64[3]", "u64[2,2]"):
            text = entry(f"s = u64[{words}] parameter(0)",
                         f"r = (u64[{words}], {out}) rng-bit-generator(s), algorithm={alg}")
            check_text("cuda", text, np.array(st, np.uint64), exact=True)


@pytest.mark.cuda
def test_generators_typed_as_on_a_gpu():
    """The generators compiled by numba (typing as in a CUDA kernel: no promotion of
    uint64 to float64) give the CPU kernel's bits."""
    import numba
    from xlaplug.backends.cpu import rng as cpu
    from xlaplug.backends.cuda import rng as cu
    tf, ph = numba.njit(cu.threefry2x32), numba.njit(cu.philox4x32)
    add = numba.njit(cu.add_to_words)
    x0 = RNG.integers(0, 2 ** 32, 6, dtype=np.uint64).astype(np.uint32)
    x1 = RNG.integers(0, 2 ** 32, 6, dtype=np.uint64).astype(np.uint32)
    k0, k1 = 0x9ABCDEF0, 0xFFFFFFFF
    w0, w1 = cpu.threefry2x32(k0, k1, x0.copy(), x1.copy())
    p = cpu.philox4x32([x0, x1, x1 ^ np.uint32(7), x0 + np.uint32(1)], k0, k1)
    u = np.uint64
    for i in range(6):
        assert tf(u(k0), u(k1), u(x0[i]), u(x1[i])) == (u(w0[i]), u(w1[i]))
        got = ph(u(x0[i]), u(x1[i]), u(x1[i] ^ 7), u(x0[i] + np.uint32(1)), u(k0), u(k1))
        assert got == tuple(u(q[i]) for q in p)
    m = u(0xFFFFFFFF)
    assert add(m, m, m, m, u(1)) == (0, 0, 0, 0)
    assert add(m, m, u(5), u(0), u(2 ** 64 - 1)) == (m - u(1), m, u(6), u(0))



# ---- rng: cpu/rng_draws.py's counter-based stream -------------------------------------------

def _rng_hlo(n_uniform: int, n_normal: int, n_int: int, normal_t: str = "f32") -> str:
    """A module drawing f32 uniforms on [lo, hi), normals (mean lo, deviation hi) and s32
    uniforms on [ilo, ihi), from parameters lo, hi, ilo, ihi."""
    u, n, i = f"f32[{n_uniform}]", f"{normal_t}[{n_normal}]", f"s32[{n_int}]"
    return f"""
HloModule m
ENTRY e {{
  lo = f32[] parameter(0)
  hi = f32[] parameter(1)
  ilo = s32[] parameter(2)
  ihi = s32[] parameter(3)
  u = {u} rng(lo, hi), distribution=rng_uniform
  n = {n} rng(lo, hi), distribution=rng_normal
  i = {i} rng(ilo, ihi), distribution=rng_uniform
  ROOT t = ({u}, {n}, {i}) tuple(u, n, i)
}}
"""


_RNG_HLO = _rng_hlo(20000, 20000, 5000)


def test_rng_distributions():
    """On the cpu (the stream's definition): range, mean, deviation, seeds."""
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


_RNG_HLO_SMALL = _rng_hlo(50, 20, 30, normal_t="f64")


def assert_same_draws(got, want, what):
    """Exact, except normal draws: log, cos and sqrt come from numpy on the CPU and from
    libdevice on a GPU (the simulator uses Python's math), which may differ in the last bit;
    the uniforms feeding them are exact, so 1e-12 relative still catches any other change."""
    assert_same(got[:1] + got[2:], want[:1] + want[2:], what, exact=True)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=0, err_msg=what)
    assert got[1].dtype == want[1].dtype


@pytest.mark.cuda
def test_rng_same_draws_as_cpu():
    args = [np.float32(-2.0), np.float32(3.0), np.int32(-3), np.int32(4)]
    module = parse_module(_RNG_HLO_SMALL)
    draws = []
    for seed in (0, 5):
        got, want = cuda_and_cpu(module, args, seed=seed)
        assert_same_draws(got, want, f"seed {seed}")
        draws.append(got)
    u = draws[0][0]
    assert u.min() >= -2.0 and u.max() < 3.0
    assert not np.array_equal(draws[0][0], draws[1][0])


@on_each_device
def test_rng_uniform_from_jax(device):
    f = lambda a, b: lax.rng_uniform(a, b, (1000,))  # noqa: E731
    text = jax.jit(f).lower(np.float32(1.0), np.float32(1.5)).as_text(dialect="hlo")
    out = run(device, parse_module(text), [np.float32(1.0), np.float32(1.5)])
    assert out.dtype == np.float32 and out.shape == (1000,)
    assert out.min() >= 1.0 and out.max() < 1.5


@on_each_device
def test_rng_optimized_hlo_matches_first_xla_run(device):
    # XLA:CPU expands rng into arithmetic on rng-get-and-update-state, whose per-instruction
    # state starts at a fixed value: a fresh executable's first run is reproducible.
    def f(a, b):
        return lax.rng_uniform(a, b, (6,)), lax.rng_uniform(a, b, (2, 3))
    args = (np.float32(1.0), np.float32(2.5))
    compiled = jax.jit(f).lower(*args).compile()  # its text, and its first run's values
    check_text(device, compiled.as_text(), *args, want=lambda: compiled(*args), exact=True)


def test_rng_stream_is_philox_blocks():
    # Element j of call c is the Philox-4x32-10 block at counter (low=j, high=c): the same
    # generator rng-bit-generator (bit-exact with XLA above) lays out round-robin.
    from xlaplug.backends.cpu.rng import philox_bits
    from xlaplug.backends.cpu.rng_draws import rng_words
    key, call, n = 0x0123456789ABCDEF, 2 ** 40 + 3, 7
    w0, w1 = rng_words(key, call, n)
    blocks, _, _ = philox_bits(key, 0, call, (4 * n,), 32)
    blocks = blocks.reshape(n, 4).astype(np.uint64)
    np.testing.assert_array_equal(w0, blocks[:, 0] | (blocks[:, 1] << np.uint64(32)))
    np.testing.assert_array_equal(w1, blocks[:, 2] | (blocks[:, 3] << np.uint64(32)))


def _rng_module(t, dist="rng_uniform", dims="4000"):
    return parse_module(entry(f"a = {t}[] parameter(0)", f"b = {t}[] parameter(1)",
                              f"r = {t}[{dims}] rng(a, b), distribution={dist}"))


@on_each_device
def test_rng_draws_do_not_depend_on_bounds(device):
    # The bits are counter-based: other bounds only rescale the same uniforms.
    m = _rng_module("f64", dims=shapes(device, "4000", "40"))
    u = run(device, m, [np.float64(0.0), np.float64(1.0)], seed=4)
    v = run(device, m, [np.float64(2.0), np.float64(6.0)], seed=4)
    np.testing.assert_allclose((v - 2.0) / 4.0, u, rtol=0, atol=1e-15)
    m = _rng_module("s64", dims=shapes(device, "4000", "40"))
    i = run(device, m, [np.int64(0), np.int64(2 ** 62)], seed=4)
    j = run(device, m, [np.int64(-5), np.int64(2 ** 62 - 5)], seed=4)
    np.testing.assert_array_equal(j + 5, i)


def shapes(device, cpu, cuda):
    """A case's size on `device` (the simulator runs every CUDA thread in Python)."""
    return cpu if device == "cpu" else cuda


# The union of the cpu's integer bounds and float edges and the cuda table.
_TYPE_BOUNDS = [
    ("pred", False, True), ("pred", True, True), ("s8", -100, 120), ("s16", -3, 4),
    ("s32", -(2 ** 31), 2 ** 31 - 1), ("s64", -(2 ** 63), 2 ** 63 - 1), ("s64", -5, -2),
    ("u8", 3, 255), ("u16", 0, 7), ("u32", 5, 2 ** 32 - 1), ("u64", 0, 2 ** 64 - 1),
    ("u64", 2 ** 63, 2 ** 63 + 1000), ("s32", 4, 4), ("s32", 5, -5), ("u8", 9, 2),
    ("f16", -1.0, 2.5), ("f32", 1.0, 1.5), ("f64", -3.0, 1e-3), ("f32", 2.0, 2.0),
    ("f32", 3.0, -1.0), ("bf16", -2.0, 5.0), ("f8e4m3fn", 0.5, 3.0), ("s4", -8, 7),
    ("u4", 1, 15),
    # the next f16 above 1: every draw rounds to lo or hi, and hi is replaced by lo
    ("f16", 1.0, 1.0009765625),
    ("u64", 2 ** 64 - 9, 2 ** 64 - 1), ("s8", -128, 127), ("u8", 250, 255), ("s16", -7, -3),
]


@pytest.mark.parametrize("t,lo,hi", _TYPE_BOUNDS)
@on_each_device
def test_rng_uniform_types_and_bounds(device, t, lo, hi):
    dt = D.to_dtype(t)
    args = [np.array(lo).astype(dt), np.array(hi).astype(dt)]
    dims = shapes(device, "4000", "3,7")
    got = run(device, _rng_module(t, dims=dims), args, seed=11)
    assert got.dtype == dt and got.shape == tuple(int(d) for d in dims.split(","))
    v = got.astype(np.float64) if t[0] in "fb" else got.astype(object)
    if hi > lo:
        assert all(lo <= x < hi for x in v.ravel()), v
    elif hi == lo or t[0] not in "fb":
        assert all(x == lo for x in v.ravel()), v      # hi <= lo gives lo
    else:  # floats keep the formula when hi < lo
        assert all(hi < x <= lo for x in v.ravel()), v
    if t == "f16" and hi == 1.0009765625:
        assert (got == np.float16(1.0)).all()
    if device == "cpu" and t[0] in "su" and hi - lo > 2:
        mid = lo + (hi - lo) // 2   # both halves of a range are drawn (full 64-bit too)
        assert any(x < mid for x in v.ravel()) and any(x >= mid for x in v.ravel())


@pytest.mark.parametrize("t", ["f16", "f32", "f64", "bf16", "f8e4m3fn"])
@pytest.mark.cuda
def test_rng_normal_types_same_as_cpu(t):
    dt = D.to_dtype(t)
    args = [np.array(1.5).astype(dt), np.array(0.75).astype(dt)]
    got, want = cuda_and_cpu(_rng_module(t, "rng_normal", "40"), args, seed=2)
    assert got.dtype == want.dtype == dt
    # Transcendentals may differ in the last bit (see assert_same_draws); narrow types
    # usually hide that in their rounding, but a value at a rounding boundary may not.
    tol = 1e-12 if t == "f64" else float(ml_dtypes.finfo(dt).eps)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol)


_RNG_FRESH = """
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


@on_each_device
def test_rng_fresh_per_iteration_and_instruction(device):
    module = parse_module(_RNG_FRESH)
    f, r0, r1 = run(device, module, [np.zeros((4, 3), np.float32)])
    assert len({row.tobytes() for row in f}) == 4     # each iteration draws anew
    assert not np.array_equal(r0, r1)                 # each instruction has its own stream
    again = run(device, module, [np.zeros((4, 3), np.float32)])
    for a, b in zip(again, (f, r0, r1)):              # a new run starts over
        np.testing.assert_array_equal(a, b)


_RNG_LOOP = """
HloModule loop

cond {
  s = (s32[], f32[4,3], s64[4,5], u64[4,2]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  s = (s32[], f32[4,3], s64[4,5], u64[4,2]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  f = f32[4,3] get-tuple-element(s), index=1
  k = s64[4,5] get-tuple-element(s), index=2
  g = u64[4,2] get-tuple-element(s), index=3
  lo = f32[] constant(-1)
  hi = f32[] constant(1)
  klo = s64[] constant(-9223372036854775808)
  khi = s64[] constant(9223372036854775807)
  r = f32[1,3] rng(lo, hi), distribution=rng_uniform
  q = s64[1,5] rng(klo, khi), distribution=rng_uniform
  st = u64[2] rng-get-and-update-state(), delta=7
  st2 = u64[1,2] reshape(st)
  z = s32[] constant(0)
  f1 = f32[4,3] dynamic-update-slice(f, r, i, z)
  k1 = s64[4,5] dynamic-update-slice(k, q, i, z)
  g1 = u64[4,2] dynamic-update-slice(g, st2, i, z)
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  ROOT t = (s32[], f32[4,3], s64[4,5], u64[4,2]) tuple(i1, f1, k1, g1)
}

ENTRY main {
  zero = s32[] constant(0)
  f = f32[4,3] parameter(0)
  k = s64[4,5] parameter(1)
  g = u64[4,2] parameter(2)
  init = (s32[], f32[4,3], s64[4,5], u64[4,2]) tuple(zero, f, k, g)
  w = (s32[], f32[4,3], s64[4,5], u64[4,2]) while(init), condition=cond, body=body
  rf = f32[4,3] get-tuple-element(w), index=1
  rk = s64[4,5] get-tuple-element(w), index=2
  rg = u64[4,2] get-tuple-element(w), index=3
  ROOT out = (f32[4,3], s64[4,5], u64[4,2]) tuple(rf, rk, rg)
}
"""

_LOOP_ARGS = [np.zeros((4, 3), np.float32), np.zeros((4, 5), np.int64),
              np.zeros((4, 2), np.uint64)]


@on_each_device
def test_rng_in_a_loop_draws_per_iteration(device):
    module = parse_module(_RNG_LOOP)
    got = run(device, module, _LOOP_ARGS, seed=3)
    f, k, g = got
    assert len({row.tobytes() for row in f}) == 4 and len({row.tobytes() for row in k}) == 4
    assert f.min() >= -1 and f.max() < 1
    # the state starts at 0x7012395 + seed and advances by delta each iteration
    assert [int(x) for x in g[:, 0]] == [0x7012395 + 3 + 7 * i for i in range(4)]
    assert not g[:, 1].any()
    again = run_module(module, _LOOP_ARGS, device=device, seed=3)
    assert_same(again, got, "a new run repeats the draws", exact=True)


@pytest.mark.cuda
def test_rng_makes_no_host_copies(monkeypatch):
    """The bounds are read on the device and the state stays there: only the results come
    back (one copy each), plus the loop's predicate reads."""
    args = [np.float32(-2.0), np.float32(3.0), np.int32(-3), np.int32(4)]
    module = parse_module(_RNG_HLO)
    want = run_module(module, args, device="cpu")
    loop = parse_module(_RNG_LOOP)
    loop_want = run_module(loop, _LOOP_ARGS, device="cpu")
    counts = count_host_copies(monkeypatch)
    got = run_module(module, args, device="cuda")
    assert counts == {"copy_to_host": 3, "device_to_host": counts["device_to_host"],
                      "scalar": 0}, counts
    assert counts["device_to_host"] in (0, 3), counts
    assert_same_draws(got, want, "rng")
    counts.update(copy_to_host=0, device_to_host=0)
    got = run_module(loop, _LOOP_ARGS, device="cuda")
    # 4 iterations read the predicate 5 times (each read is a copy_to_host of one value)
    assert counts["scalar"] == 5 and counts["copy_to_host"] == 5 + 3, counts
    assert counts["device_to_host"] in (0, 5 + 3), counts
    assert_same(got, loop_want, "rng loop", exact=True)


@pytest.mark.cuda
def test_rng_errors():
    with pytest.raises(Exception, match="rng_normal of s32 is not supported"):
        run_module(_rng_module("s32", "rng_normal", "3,7"), [np.int32(0), np.int32(1)],
                   device="cuda")
