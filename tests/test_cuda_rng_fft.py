"""CUDA fft and random numbers against the CPU backend.

Programs are lowered by jax (or written by hand) and run with device="cuda" (numba's
simulator unless NUMBA_ENABLE_CUDASIM=0) and device="cpu" (verified against XLA by
test_kernels_rng_fft.py / test_kernels_data_movement.py).  rng-bit-generator outputs and
states must be bit-identical; fft results agree to a few ulps of the largest magnitude (the
CUDA kernel is a direct DFT accumulated in f64, numpy's pocketfft an FFT in the result's
precision); rng draws (the same counter-based stream on both) and collectives must be
identical, except normal draws, which agree to 1e-12 (libdevice's and numpy's log and cos
may differ in the last bit on a GPU); an rng run copies nothing back but its results.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import jax
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from xlaplug.backends.executor import run_module  # noqa: E402
from xlaplug.hlo import parse_module  # noqa: E402
from oracle import count_host_copies, cuda_and_cpu as both, leaves, lowered_module  # noqa: E402,E501

RNG = np.random.default_rng(5)


def crnd(*shape, dtype=np.complex64):
    return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dtype)


def rrnd(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def assert_same(got, want, what="", exact=False):
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


def check(f, *args, x64=False, exact=False, opcode=None):
    text, module = lowered_module(f, *args, x64=x64, opcode=opcode)
    got, want = both(module, args)
    assert_same(got, want, text, exact)


def check_text(text, *args, exact=False, **opts):
    got, want = both(parse_module(text), args, **opts)
    assert_same(got, want, text, exact)
    return got


# ---- fft -----------------------------------------------------------------------------------

def test_fft_ifft_1d_2d_3d():
    check(jnp.fft.fft, crnd(2, 5), opcode="fft")
    check(jnp.fft.ifft, crnd(2, 6))
    check(jnp.fft.fft2, crnd(2, 3, 4))
    check(jnp.fft.ifft2, crnd(3, 5))
    check(lambda x: jnp.fft.fftn(x, axes=(-3, -2, -1)), crnd(2, 2, 3, 4))
    check(lambda x: jnp.fft.ifftn(x, axes=(0, 1, 2)), crnd(3, 2, 3))


def test_rfft_irfft():
    check(jnp.fft.rfft, rrnd(2, 7))
    check(jnp.fft.rfft, rrnd(3, 8))
    check(lambda x: jnp.fft.rfftn(x, axes=(0, 1, 2)), rrnd(2, 3, 4))
    check(lambda x: jnp.fft.irfft(x, n=6), crnd(2, 4))            # even: Nyquist bin
    check(lambda x: jnp.fft.irfft(x, n=7), crnd(2, 4))            # odd
    check(lambda x: jnp.fft.irfft2(x, s=(3, 5)), crnd(3, 3))
    check(lambda x: jnp.fft.irfftn(x, s=(2, 3, 4), axes=(0, 1, 2)), crnd(2, 3, 3))


def test_fft_double_precision_x64():
    check(jnp.fft.fft, crnd(2, 7, dtype=np.complex128), x64=True)
    check(jnp.fft.rfft2, rrnd(3, 6, dtype=np.float64), x64=True)
    check(lambda x: jnp.fft.irfft(x, n=8), crnd(2, 5, dtype=np.complex128), x64=True)


def test_fft_roundtrip_and_real_part_ignored():
    x = rrnd(3, 8)
    check(lambda x: jnp.fft.irfft(jnp.fft.rfft(x), n=8), x)
    # the imaginary parts of the DC and Nyquist bins are ignored by IRFFT
    text = """
HloModule m
ENTRY e {
  x = c64[2,5] parameter(0)
  ROOT y = f32[2,8] fft(x), fft_type=IRFFT, fft_length={8}
}"""
    check_text(text, crnd(2, 5))


def test_fft_zero_size():
    text = """
HloModule m
ENTRY e {
  x = c64[0,4] parameter(0)
  ROOT y = c64[0,4] fft(x), fft_type=FFT, fft_length={4}
}"""
    got = check_text(text, crnd(0, 4))
    assert got.shape == (0, 4)


# ---- rng-bit-generator ---------------------------------------------------------------------

_ALGS = {"three_fry": lax.RandomAlgorithm.RNG_THREE_FRY,
         "philox": lax.RandomAlgorithm.RNG_PHILOX,
         "default": lax.RandomAlgorithm.RNG_DEFAULT}
_STATES = [np.array([0, 0], np.uint64),
           np.array([1234567890123, 2 ** 64 - 3], np.uint64),   # the counter wraps
           np.array([2 ** 64 - 1, 2 ** 63 + 5], np.uint64)]


@pytest.mark.parametrize("alg", list(_ALGS))
def test_rng_bit_generator_bits_exact(alg):
    cases = [((), jnp.uint32), ((7,), jnp.uint32), ((3, 5), jnp.uint32),
             ((3, 3, 5), jnp.uint32), ((4, 6), jnp.uint32), ((), jnp.uint64),
             ((5,), jnp.uint64), ((2, 3), jnp.uint64), ((3, 5), jnp.uint8), ((9,), jnp.uint16)]
    for shape, dtype in cases:
        f = jax.jit(lambda s: lax.rng_bit_generator(s, shape, dtype=dtype,
                                                    algorithm=_ALGS[alg]))
        with jax.enable_x64(True):
            module = parse_module(f.lower(_STATES[0]).as_text(dialect="hlo"))
        for st in _STATES:
            got, want = both(module, [st])
            assert_same(got, want, f"{alg} {shape} {dtype} state {st}", exact=True)


@pytest.mark.parametrize("alg", ["rng_philox", "rng_three_fry", "rng_default"])
def test_rng_bit_generator_state_words_and_types(alg):
    # u64[3] (128-bit Philox counter) and u64[4] states; signed, float and narrow outputs
    # are the generator's bits reinterpreted.
    for words, st in ((2, [5, 2 ** 64 - 1]), (3, [1, 2 ** 64 - 2, 2 ** 64 - 1]),
                      (4, [9, 2 ** 64 - 1, 2 ** 64 - 1, 3])):
        for out in ("s32[2,3]", "f32[5]", "s8[9]", "f16[3,3]", "s64[3]", "u64[2,2]"):
            text = f"""
HloModule m
ENTRY e {{
  s = u64[{words}] parameter(0)
  ROOT r = (u64[{words}], {out}) rng-bit-generator(s), algorithm={alg}
}}"""
            check_text(text, np.array(st, np.uint64), exact=True)


def test_rng_bit_generator_chained_program():
    def f(s):
        s1, a = lax.rng_bit_generator(s, (4, 5), dtype=jnp.uint32,
                                      algorithm=lax.RandomAlgorithm.RNG_PHILOX)
        s2, b = lax.rng_bit_generator(s1, (3,), dtype=jnp.uint64,
                                      algorithm=lax.RandomAlgorithm.RNG_PHILOX)
        s3, c = lax.rng_bit_generator(s2, (5, 3), dtype=jnp.uint32,
                                      algorithm=lax.RandomAlgorithm.RNG_THREE_FRY)
        return s3, a, b, c
    check(f, np.array([42, 2 ** 64 - 2], np.uint64), x64=True, exact=True)


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


# ---- rng (cpu/rng.py's counter-based stream, drawn on the device) ---------------------------

_RNG_HLO = """
HloModule m
ENTRY e {
  lo = f32[] parameter(0)
  hi = f32[] parameter(1)
  ilo = s32[] parameter(2)
  ihi = s32[] parameter(3)
  u = f32[50] rng(lo, hi), distribution=rng_uniform
  n = f64[20] rng(lo, hi), distribution=rng_normal
  i = s32[30] rng(ilo, ihi), distribution=rng_uniform
  ROOT t = (f32[50], f64[20], s32[30]) tuple(u, n, i)
}
"""


def assert_same_draws(got, want, what):
    """Exact, except normal draws: log, cos and sqrt come from numpy on the CPU and from
    libdevice on a GPU (the simulator uses Python's math), which may differ in the last bit;
    the uniforms feeding them are exact, so 1e-12 relative still catches any other change."""
    assert_same(got[:1] + got[2:], want[:1] + want[2:], what, exact=True)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=0, err_msg=what)
    assert got[1].dtype == want[1].dtype


def test_rng_same_draws_as_cpu():
    args = [np.float32(-2.0), np.float32(3.0), np.int32(-3), np.int32(4)]
    module = parse_module(_RNG_HLO)
    draws = []
    for seed in (0, 5):
        got, want = both(module, args, seed=seed)
        assert_same_draws(got, want, f"seed {seed}")
        draws.append(got)
    u = draws[0][0]
    assert u.min() >= -2.0 and u.max() < 3.0
    assert not np.array_equal(draws[0][0], draws[1][0])


def _rng_text(t, dist, dims="3,7"):
    return f"""
HloModule m
ENTRY e {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT r = {t}[{dims}] rng(a, b), distribution={dist}
}}"""


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
]


@pytest.mark.parametrize("t,lo,hi", _TYPE_BOUNDS)
def test_rng_uniform_types_same_as_cpu(t, lo, hi):
    from xlaplug.hlo import dtypes as D
    dt = D.to_dtype(t)
    args = [np.array(lo).astype(dt), np.array(hi).astype(dt)]
    module = parse_module(_rng_text(t, "rng_uniform"))
    got, want = both(module, args, seed=11)
    assert got.dtype == want.dtype == dt and got.shape == (3, 7)
    assert got.tobytes() == want.tobytes(), f"{t} [{lo}, {hi}):\n{got}\n!=\n{want}"
    v = got.astype(np.float64) if t[0] in "fb" else got.astype(object)
    if hi > lo:
        assert all(lo <= x < hi for x in v.ravel()), v
    elif hi == lo or t[0] not in "fb":
        assert all(x == lo for x in v.ravel()), v
    else:  # floats keep the formula when hi < lo
        assert all(hi < x <= lo for x in v.ravel()), v
    if t == "f16" and hi == 1.0009765625:
        assert (got == np.float16(1.0)).all()


@pytest.mark.parametrize("t", ["f16", "f32", "f64", "bf16", "f8e4m3fn"])
def test_rng_normal_types_same_as_cpu(t):
    import ml_dtypes
    from xlaplug.hlo import dtypes as D
    dt = D.to_dtype(t)
    args = [np.array(1.5).astype(dt), np.array(0.75).astype(dt)]
    got, want = both(parse_module(_rng_text(t, "rng_normal", "40")), args, seed=2)
    assert got.dtype == want.dtype == dt
    # Transcendentals may differ in the last bit (see assert_same_draws); narrow types
    # usually hide that in their rounding, but a value at a rounding boundary may not.
    tol = 1e-12 if t == "f64" else float(ml_dtypes.finfo(dt).eps)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol)


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


def test_rng_in_a_loop_draws_per_iteration():
    module = parse_module(_RNG_LOOP)
    got, want = both(module, _LOOP_ARGS, seed=3)
    assert_same(got, want, "rng in a while body", exact=True)
    f, k, g = got
    assert len({row.tobytes() for row in f}) == 4 and len({row.tobytes() for row in k}) == 4
    assert f.min() >= -1 and f.max() < 1
    # the state starts at 0x7012395 + seed and advances by delta each iteration
    assert [int(x) for x in g[:, 0]] == [0x7012395 + 3 + 7 * i for i in range(4)]
    assert not g[:, 1].any()
    again = run_module(module, _LOOP_ARGS, device="cuda", seed=3)
    assert_same(again, got, "a new run repeats the draws", exact=True)


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


def test_rng_errors():
    with pytest.raises(Exception, match="rng_normal of s32 is not supported"):
        run_module(parse_module(_rng_text("s32", "rng_normal")), [np.int32(0), np.int32(1)],
                   device="cuda")


# ---- the kernels compile for a real GPU ----------------------------------------------------

def test_fft_rng_kernels_compile_to_ptx():
    """The simulator type-checks nothing: compile the kernels with NVVM (no GPU needed)."""
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0",
               PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, str(Path(__file__).with_name("cuda_ptx_check.py")),
                        "fft", "rng"], capture_output=True, text=True, env=env, timeout=300,
                       cwd=str(root))
    if p.returncode == 3:
        pytest.fail("NVVM unavailable (the test extra installs nvidia-cuda-nvcc-cu12): "
                    + p.stdout.strip())
    assert p.returncode == 0, p.stdout + p.stderr


_RNG_PTX_SCRIPT = r"""
import os
os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
import numpy as np
from numba import cuda, types as T
from numba.np import numpy_support
import numba.cuda.dispatcher as disp
try:
    from numba import float32
    cuda.compile_ptx(lambda a: None, (float32[::1],), cc=(8, 0))
except Exception as e:
    print("NVVM unavailable:", str(e).splitlines()[0])
    raise SystemExit(3)
class _Dev:
    compute_capability = (8, 0)
disp.get_current_device = lambda: _Dev()   # device functions compile for "this" device
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
bad = 0
for k, sig in jobs:
    name = k.py_func.__name__
    try:
        ptx, _ = cuda.compile_ptx(k.py_func, sig, cc=(8, 0))
        if name != "normal" and name != "uniform" and ".f64" in ptx:
            raise TypeError("integer kernel promoted to float64")
        if name == "uniform" and "fma." in ptx:
            raise TypeError("lo + (hi - lo) * u contracted to an FMA")
    except Exception as e:
        bad += 1
        print("FAIL", name, sig, " | ".join(str(e).splitlines()[:6]))
print(len(jobs), "kernels,", bad, "failed")
raise SystemExit(1 if bad else 0)
"""


def test_rng_draw_kernels_compile_to_ptx():
    """The rng / rng-get-and-update-state kernels compile for a GPU (NVVM, no device
    needed): integer kernels stay integer, and the uniform transform has no FMA (one would
    round differently from numpy's multiply then add)."""
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0",
               PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", _RNG_PTX_SCRIPT], capture_output=True,
                       text=True, env=env, timeout=300, cwd=str(root))
    if p.returncode == 3:
        pytest.fail("NVVM unavailable (the test extra installs nvidia-cuda-nvcc-cu12): "
                    + p.stdout.strip())
    assert p.returncode == 0, p.stdout + p.stderr
