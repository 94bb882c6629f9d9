"""bf16, the f8/f4 formats and sub-byte integers on `--device cuda` (cuda/narrow.py).

The device holds these types' values in float32 / int8 / uint8; every kernel must leave them
canonical (rounded to the format, wrapped to the width).  The CPU backend -- verified against
XLA:CPU elsewhere -- is the oracle: each module runs on both and every output must be
bit-identical (same dtype, same bytes; NaN payloads included, since both backends produce
canonical NaNs).  A jax program checks the end-to-end path against XLA itself.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from xlaplug.backends.common.errors import ExecutionError
from xlaplug.backends.cuda import launch
from xlaplug.runtime.executor import run_module
from xlaplug.hlo import dtypes as D
from xlaplug.hlo.text.parser import parse_module

FLOATS = ("bf16", "f8e4m3fn", "f8e5m2", "f8e4m3fnuz", "f8e5m2fnuz", "f8e4m3", "f8e3m4",
          "f8e4m3b11fnuz", "f4e2m1fn")
INTS = ("s4", "u4", "s2", "u2")
_NARROW_FLOAT_DTYPES = {np.dtype(D.to_dtype(t)) for t in FLOATS}


def _values(t: str, shape, seed=0) -> np.ndarray:
    """Random values of type t, with zeros, negatives and (floats) out-of-range ones that
    the conversions must round or saturate."""
    r = np.random.default_rng(seed)
    if t in INTS:
        info = ml_dtypes.iinfo(D.to_dtype(t))
        return r.integers(info.min, info.max + 1, size=shape).astype(D.to_dtype(t))
    x = r.standard_normal(shape) * 3
    x.flat[0] = 0.0
    return x.astype(D.to_dtype(t))


def _run_both(text: str, args):
    gpu = run_module(parse_module(text), list(args), device="cuda")
    with np.errstate(all="ignore"):
        cpu = run_module(parse_module(text), list(args))
    return [np.asarray(x) for x in (gpu if isinstance(gpu, tuple) else (gpu,))], \
        [np.asarray(x) for x in (cpu if isinstance(cpu, tuple) else (cpu,))]


def _same_bits(text: str, args):
    gpu, cpu = _run_both(text, args)
    assert len(gpu) == len(cpu)
    for k, (g, c) in enumerate(zip(gpu, cpu)):
        assert g.dtype == c.dtype and g.shape == c.shape, (k, g.dtype, c.dtype)
        bad = np.flatnonzero(g.view(np.uint8) != c.view(np.uint8))
        if g.dtype in _NARROW_FLOAT_DTYPES and bad.size:
            # NaN payloads of the 8-bit formats do not survive the float32 the device holds
            # their values in (cuda/narrow.py); NaN-ness and sign must.
            gf, cf = g.astype(np.float32).ravel(), c.astype(np.float32).ravel()
            nan = np.isnan(gf) & np.isnan(cf) & (np.signbit(gf) == np.signbit(cf))
            bad = bad[~nan[bad]]
        assert not bad.size, (f"output {k} ({g.dtype}) differs at bytes {bad[:8]}: "
                              f"cuda {g.ravel()[:8]} cpu {c.ravel()[:8]}")


_FLOAT_OPS = """
HloModule m
add {{
  x = {t}[] parameter(0)
  y = {t}[] parameter(1)
  ROOT s = {t}[] add(x, y)
}}
less {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT l = pred[] compare(a, b), direction=LT
}}
ENTRY e {{
  a = {t}[4,3] parameter(0)
  b = {t}[4,3] parameter(1)
  w = f32[4,3] parameter(2)
  s = {t}[4,3] add(a, b)
  m = {t}[4,3] multiply(a, b)
  q = {t}[4,3] divide(a, b)
  x = {t}[4,3] exponential(a)
  n = {t}[4,3] convert(w)
  bf = bf16[4,3] convert(a)
  back = {t}[4,3] convert(bf)
  d = {t}[4,4] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{1}}
  z = {t}[] constant(0)
  r = {t}[4] reduce(a, z), dimensions={{1}}, to_apply=add
  rw = {t}[4,2] reduce-window(a, z), window={{size=1x2}}, to_apply=add
  srt = {t}[4,3] sort(a), dimensions={{1}}, to_apply=less
  io = {t}[40] iota(), iota_dimension=0
  rp = {t}[4,3] reduce-precision(w), exponent_bits=3, mantissa_bits=1
  tr = {t}[3,4] transpose(a), dimensions={{1,0}}
  cat = {t}[8,3] concatenate(a, b), dimensions={{0}}
  p = {t}[6,3] pad(a, z), padding=1_1x0_0
  cmp = pred[4,3] compare(a, b), direction=GT
  sel = {t}[4,3] select(cmp, a, b)
  ROOT t = ({t}[4,3], {t}[4,3], {t}[4,3], {t}[4,3], {t}[4,3], bf16[4,3], {t}[4,3], {t}[4,4],
            {t}[4], {t}[4,2], {t}[4,3], {t}[40], {t}[4,3], {t}[3,4], {t}[8,3], {t}[6,3],
            pred[4,3], {t}[4,3]) tuple(s, m, q, x, n, bf, back, d, r, rw, srt, io, rp, tr,
            cat, p, cmp, sel)
}}
"""


@pytest.mark.parametrize("t", FLOATS)
def test_float_formats_match_cpu(t):
    # rp's input is f32: convert first through the format's own reduce-precision
    text = _FLOAT_OPS.format(t=t).replace(f"{t}[4,3] reduce-precision(w)",
                                          f"{t}[4,3] reduce-precision(n)")
    w = np.random.default_rng(3).standard_normal((4, 3)).astype(np.float32) * 500
    _same_bits(text, [_values(t, (4, 3)), _values(t, (4, 3), 1), w])


_INT_OPS = """
HloModule m
add {{
  x = {t}[] parameter(0)
  y = {t}[] parameter(1)
  ROOT s = {t}[] add(x, y)
}}
ENTRY e {{
  a = {t}[4,3] parameter(0)
  b = {t}[4,3] parameter(1)
  w = s32[4,3] parameter(2)
  s = {t}[4,3] add(a, b)
  m = {t}[4,3] multiply(a, b)
  n = {t}[4,3] convert(w)
  f = f32[4,3] convert(a)
  d = {t}[4,4] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{1}}
  z = {t}[] constant(0)
  r = {t}[4] reduce(a, z), dimensions={{1}}, to_apply=add
  io = {t}[20] iota(), iota_dimension=0
  sh = {t}[4,3] shift-left(a, b)
  ROOT t = ({t}[4,3], {t}[4,3], {t}[4,3], f32[4,3], {t}[4,4], {t}[4], {t}[20], {t}[4,3])
           tuple(s, m, n, f, d, r, io, sh)
}}
"""


@pytest.mark.parametrize("t", INTS)
def test_sub_byte_integers_match_cpu(t):
    w = np.arange(-6, 6, dtype=np.int32).reshape(4, 3) * 7
    _same_bits(_INT_OPS.format(t=t), [_values(t, (4, 3)), _values(t, (4, 3), 1), w])


@pytest.mark.parametrize("src,dst,shape,out_shape", [
    ("bf16", "s16", (5,), (5,)), ("s16", "bf16", (5,), (5,)), ("bf16", "f16", (5,), (5,)),
    ("f8e4m3fn", "u8", (6,), (6,)), ("u8", "f8e5m2", (6,), (6,)),
    ("u8", "f8e4m3fnuz", (6,), (6,)), ("f32", "bf16", (3,), (3, 2)),
    ("bf16", "u8", (4,), (4, 2)), ("u8", "bf16", (3, 2), (3,)), ("s4", "u4", (5,), (5,)),
    ("u4", "f4e2m1fn", (6,), (6,)), ("f4e2m1fn", "s4", (6,), (6,)),
])
def test_bitcast_convert_bit_patterns(src, dst, shape, out_shape):
    def dims(s):
        return ",".join(map(str, s))
    text = (f"HloModule m\nENTRY e {{\n  a = {src}[{dims(shape)}] parameter(0)\n"
            f"  ROOT b = {dst}[{dims(out_shape)}] bitcast-convert(a)\n}}\n")
    if src in ("u8", "s16") or src in INTS:
        info = ml_dtypes.iinfo(D.to_dtype(src)) if src in INTS else np.iinfo(D.to_dtype(src))
        x = np.random.default_rng(0).integers(info.min, info.max + 1, size=shape)
        x = x.astype(D.to_dtype(src))
        if src == "u8":
            x.flat[:3] = [0x7F, 0x80, 0xFF]  # NaN / -0 patterns of the f8 formats
    else:
        x = _values(src, shape)
    _same_bits(text, [x])


def test_canonical_nan_and_saturation():
    # Out-of-range and NaN inputs through each float format's conversion rule.
    xs = np.array([np.nan, np.inf, -np.inf, 1e6, -1e6, 1e-30, -0.0, 0.3], np.float32)
    for t in FLOATS:
        text = (f"HloModule m\nENTRY e {{\n  a = f32[8] parameter(0)\n"
                f"  c = {t}[8] convert(a)\n  ROOT b = {t}[8] add(c, c)\n}}\n")
        _same_bits(text, [xs])


def test_inputs_and_results_keep_their_dtype():
    text = "HloModule m\nENTRY e {\n  a = bf16[3] parameter(0)\n  ROOT b = bf16[3] negate(a)\n}\n"
    x = np.array([1.5, -2.25, 3.0], ml_dtypes.bfloat16)
    out = run_module(parse_module(text), [x], device="cuda")
    assert out.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(out.astype(np.float32), -x.astype(np.float32))


def test_device_dtypes():
    assert launch.NARROW_TYPES >= {"bf16", "f8e4m3fn", "s4", "u2"}
    assert launch.device_dtype("bf16") == np.float32 and launch.device_dtype("s4") == np.int8
    assert launch.device_dtype("u4") == np.uint8 and launch.device_dtype("f16") == np.float16
    assert launch.device_dtype(ml_dtypes.float8_e5m2) == np.float32
    assert "bf16" in launch.SUPPORTED_TYPES and "c128" in launch.SUPPORTED_TYPES


def test_f8e8m0_computation_is_a_clear_error():
    # e8m0 (an exponent-only scale format) moves on the device, but no scalar code computes it
    text = ("HloModule m\nENTRY e {\n  a = f8e8m0fnu[3] parameter(0)\n"
            "  r = f8e8m0fnu[3] reverse(a), dimensions={0}\n"
            "  ROOT b = f8e8m0fnu[3] multiply(r, r)\n}\n")
    x = np.array([1.0, 2.0, 0.5], ml_dtypes.float8_e8m0fnu)
    with pytest.raises(ExecutionError, match="f8e8m0fnu"):
        run_module(parse_module(text), [x], device="cuda")


def test_bf16_program_matches_jax():
    # A bf16 MLP layer with softmax, lowered by jax: XLA's own outputs are the reference.
    def f(x, w):
        h = jnp.tanh(x @ w)
        return jax.nn.softmax(h, axis=-1)
    r = np.random.default_rng(0)
    x = r.standard_normal((4, 8)).astype(ml_dtypes.bfloat16)
    w = r.standard_normal((8, 5)).astype(ml_dtypes.bfloat16)
    text = jax.jit(f).lower(x, w).as_text(dialect="hlo")
    got = run_module(parse_module(text), [x, w], device="cuda")
    got = got[0] if isinstance(got, tuple) else got
    want = np.asarray(jax.jit(f)(x, w))
    assert got.dtype == want.dtype == ml_dtypes.bfloat16
    # bf16 has 8 significant bits: XLA fuses and reassociates, so allow 2 bf16 ULP
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32),
                               rtol=2 ** -7, atol=1e-3)
