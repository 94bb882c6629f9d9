"""dot, convolution, cholesky and triangular-solve kernels against jax / XLA:CPU.

dot and convolution programs are lowered by jax and run both as lowered HLO and as
XLA:CPU's optimized HLO.  jax lowers cholesky and triangular_solve to LAPACK custom-calls
on CPU, so those programs are lowered for TPU (which keeps the HLO ops); the expected
values come from jax on CPU and, where the raw op's result matters (the other triangle,
non-positive-definite input), from XLA:CPU itself compiling the same StableHLO.
"""
from __future__ import annotations

import time

import ml_dtypes
import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from oracle import check_against_jax, leaf_pairs, xla_cpu_run  # noqa: E402
from xlaplug.backends.executor import run_module  # noqa: E402
from xlaplug.hlo.parser import parse_module  # noqa: E402

RNG = np.random.default_rng(7)


def _tol(dt):
    dt = np.dtype(dt)
    if dt == ml_dtypes.bfloat16:
        return 2e-2
    if dt == np.float16:
        return 2e-3
    if dt in (np.float32, np.complex64):
        return 2e-5
    return 1e-12


def assert_close(got, want, what="", rtol=None, atol=None):
    for _, a, b in leaf_pairs(got, want, what, indexed=False):
        if a.dtype.kind in "iub":
            np.testing.assert_array_equal(a, b, err_msg=what)
            continue
        t = _tol(a.dtype) if rtol is None else rtol
        cdt = np.complex128 if a.dtype.kind == "c" else np.float64
        a64, b64 = a.astype(cdt), b.astype(cdt)
        scale = np.max(np.abs(b64[np.isfinite(b64)]), initial=1.0)
        np.testing.assert_allclose(a64, b64, rtol=t, atol=t * scale if atol is None else atol,
                                   err_msg=what, equal_nan=True)


def check(f, *args, x64=False, modes=("lowered", "compiled"), rtol=None):
    check_against_jax(f, args, lambda got, want, mode: assert_close(got, want, mode, rtol=rtol),
                      x64=x64, modes=modes)


def rnd(*shape, dtype=np.float32):
    x = RNG.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * RNG.standard_normal(shape)
    return x.astype(dtype)


def rint(dtype, *shape):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


# ---- dot ---------------------------------------------------------------------------------

def test_dot_matmul_and_vector_forms():
    a, b, v = rnd(5, 7), rnd(7, 3), rnd(7)
    check(lambda a, b: a @ b, a, b)
    check(lambda a, v: a @ v, a, v)
    check(lambda v: jnp.dot(v, v), v)                    # rank-0 result
    check(lambda a: jnp.einsum("ij,kj->ik", a, a), a)
    check(lambda a, b: lax.dot_general(a[:, :0], b[:0], (((1,), (0,)), ((), ()))), a, b)


def test_dot_general_batch_and_contracting_orders():
    lhs, rhs = rnd(3, 2, 5, 4), rnd(4, 6, 2, 3)
    # batch dims (1 | 2), contracting dims (3, 0 | 0, 3), free dims in between.
    dn = (((3, 0), (0, 3)), ((1,), (2,)))
    check(lambda x, y: lax.dot_general(x, y, dn), lhs, rhs)
    x, y = rnd(2, 3, 4, 5), rnd(3, 2, 5, 6)
    dn2 = (((3,), (2,)), ((1, 0), (0, 1)))
    check(lambda x, y: lax.dot_general(x, y, dn2), x, y)


def test_dot_int8_to_int32():
    x, y = rint(np.int8, 6, 40), rint(np.int8, 40, 5)
    check(lambda x, y: lax.dot(x, y, preferred_element_type=jnp.int32), x, y)
    u, w = rint(np.uint8, 3, 4, 50), rint(np.uint8, 3, 50, 2)
    dn = (((2,), (1,)), ((0,), (0,)))
    check(lambda u, w: lax.dot_general(u, w, dn, preferred_element_type=jnp.uint32), u, w)
    check(lambda x, y: lax.dot(x, y), x, y)               # s8 result: wraps


def test_dot_int32_wraps():
    x, y = rint(np.int32, 4, 9), rint(np.int32, 9, 3)
    check(lambda x, y: x @ y, x, y)
    check(lambda x, y: lax.dot(x.astype(jnp.int16), y.astype(jnp.int16),
                               preferred_element_type=jnp.int32), x, y)


def test_dot_int64_and_uint64_wrap_x64():
    x, y = rint(np.int64, 3, 5), rint(np.int64, 5, 2)
    check(lambda x, y: x @ y, x, y, x64=True)
    u, w = rint(np.uint64, 3, 5), rint(np.uint64, 5, 2)
    check(lambda u, w: u @ w, u, w, x64=True)


def test_dot_narrow_floats():
    x, y = rnd(8, 64), rnd(64, 4)
    xb, yb = x.astype(ml_dtypes.bfloat16), y.astype(ml_dtypes.bfloat16)
    check(lambda x, y: lax.dot(x, y, preferred_element_type=jnp.float32), xb, yb)
    check(lambda x, y: x @ y, xb, yb, rtol=1e-2)
    xh, yh = x.astype(np.float16), y.astype(np.float16)
    check(lambda x, y: x @ y, xh, yh, rtol=5e-3)
    check(lambda x, y: lax.dot(x, y, preferred_element_type=jnp.float32), xh, yh)


def test_dot_f64_and_complex():
    check(lambda x, y: x @ y, rnd(4, 6, dtype=np.float64), rnd(6, 3, dtype=np.float64),
          x64=True)
    check(lambda x, y: x @ y, rnd(4, 6, dtype=np.complex64), rnd(6, 3, dtype=np.complex64))
    check(lambda x, y: jnp.einsum("bij,bjk->bik", x, y), rnd(2, 4, 6, dtype=np.complex128),
          rnd(2, 6, 3, dtype=np.complex128), x64=True)


def test_dot_mixed_input_types():
    # int8 x bf16 and f32 x f16 mix through converts jax inserts; the dot sees one type.
    x, y = rint(np.int8, 4, 8), rnd(8, 3)
    check(lambda x, y: lax.dot(x.astype(jnp.float32), y), x, y)


# ---- convolution -------------------------------------------------------------------------

def conv(dn, **kw):
    def f(x, w):
        return lax.conv_general_dilated(x, w, dimension_numbers=dn, **kw)
    return f


@pytest.mark.parametrize("kw", [
    dict(window_strides=(1, 1), padding="VALID"),
    dict(window_strides=(1, 1), padding="SAME"),
    dict(window_strides=(2, 3), padding=[(1, 2), (0, 1)]),
    dict(window_strides=(1, 2), padding=[(-1, 2), (3, -2)]),
    dict(window_strides=(1, 1), padding=[(2, 2), (1, 1)], lhs_dilation=(2, 3)),
    dict(window_strides=(2, 1), padding=[(1, -1), (2, 2)], lhs_dilation=(2, 1),
         rhs_dilation=(1, 2)),
    dict(window_strides=(1, 1), padding="SAME", rhs_dilation=(2, 3)),
])
def test_conv_nchw(kw):
    x, w = rnd(2, 3, 9, 10), rnd(4, 3, 3, 2)
    check(conv(("NCHW", "OIHW", "NCHW"), **kw), x, w)


def test_conv_nhwc_and_odd_orders():
    x, w = rnd(2, 8, 7, 3), rnd(3, 2, 3, 5)
    check(conv(("NHWC", "HWIO", "NHWC"), window_strides=(1, 2), padding="SAME"), x, w)
    # every operand with its own odd order of batch/feature/spatial dimensions
    x2 = rnd(7, 2, 3, 8)      # H N C W
    w2 = rnd(2, 3, 5, 3)      # W I O H
    check(conv(("HNCW", "WIOH", "CWNH"), window_strides=(2, 1), padding=[(1, 0), (0, 2)],
               rhs_dilation=(2, 1)), x2, w2)


def test_conv_feature_groups():
    x, w = rnd(2, 6, 8, 8), rnd(9, 2, 3, 3)     # 3 groups of 2 input / 3 output features
    check(conv(("NCHW", "OIHW", "NCHW"), window_strides=(1, 1), padding="SAME",
               feature_group_count=3), x, w)
    dw = rnd(12, 1, 3, 3)                        # depthwise, multiplier 2
    check(conv(("NCHW", "OIHW", "NCHW"), window_strides=(2, 2), padding="SAME",
               feature_group_count=6), x, dw)


def test_conv_batch_groups():
    x, w = rnd(4, 3, 7, 6), rnd(6, 3, 3, 2)      # 2 batch groups of 2, 3 outputs each
    check(conv(("NCHW", "OIHW", "NCHW"), window_strides=(1, 1), padding="VALID",
               batch_group_count=2), x, w)
    # the weight-gradient convolution jax builds for grouped convolutions
    x3, w3 = rnd(3, 4, 6, 6), rnd(4, 2, 3, 3)

    def loss(w, x):
        y = lax.conv_general_dilated(x, w, (1, 1), "SAME", feature_group_count=2)
        return jnp.sum(y * y)
    check(jax.grad(loss), w3, x3)


def test_conv_1d_and_3d():
    check(conv(("NCH", "OIH", "NCH"), window_strides=(2,), padding=[(2, 1)],
               rhs_dilation=(2,)), rnd(2, 3, 17), rnd(5, 3, 4))
    check(conv(("NCDHW", "OIDHW", "NCDHW"), window_strides=(1, 2, 1), padding="SAME"),
          rnd(1, 2, 5, 6, 4), rnd(3, 2, 3, 3, 2))


def test_conv_int8_and_bf16():
    x, w = rint(np.int8, 2, 3, 6, 6), rint(np.int8, 4, 3, 3, 3)
    check(lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                                preferred_element_type=jnp.int32), x, w)
    xb, wb = rnd(2, 3, 6, 6).astype(ml_dtypes.bfloat16), rnd(4, 3, 3, 3).astype(
        ml_dtypes.bfloat16)
    check(lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                                preferred_element_type=jnp.float32), xb, wb)
    check(lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME"), xb, wb, rtol=2e-2)


def test_conv_transpose_gradient():
    x, w = rnd(2, 4, 8, 8), rnd(5, 4, 3, 3)

    def loss(x, w):
        y = lax.conv_general_dilated(x, w, (2, 2), [(1, 1), (1, 1)])
        return jnp.sum(jnp.sin(y))
    check(jax.grad(loss, argnums=(0, 1)), x, w, rtol=1e-4)


def test_conv_window_reversal():
    x, w = rnd(1, 2, 6, 5), rnd(3, 2, 3, 2)
    text = """
HloModule m
ENTRY e {
  x = f32[1,2,6,5]{3,2,1,0} parameter(0)
  w = f32[3,2,3,2]{3,2,1,0} parameter(1)
  ROOT c = f32[1,3,4,5]{3,2,1,0} convolution(x, w), window={size=3x2 pad=0_0x1_0 rhs_reversal=1x0}, dim_labels=bf01_oi01->bf01
}"""
    got = run_module(parse_module(text), [x, w])
    # window reversal == convolving with the kernel reversed along that dimension
    want = lax.conv_general_dilated(x, lax.rev(w, (2,)), (1, 1), [(0, 0), (1, 0)])
    assert_close(got, want)


def test_conv_large_is_fast():
    x, w = rnd(8, 64, 56, 56), rnd(64, 64, 3, 3)
    text = """
HloModule m
ENTRY e {
  x = f32[8,64,56,56]{3,2,1,0} parameter(0)
  w = f32[64,64,3,3]{3,2,1,0} parameter(1)
  ROOT c = f32[8,64,56,56]{3,2,1,0} convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01
}"""
    module = parse_module(text)
    t0 = time.perf_counter()
    got = run_module(module, [x, w])
    elapsed = time.perf_counter() - t0
    want = jax.jit(lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME"))(x, w)
    assert_close(got, want, rtol=1e-4)
    assert elapsed < 10.0, f"8x64x56x56 3x3 convolution took {elapsed:.2f}s"


# ---- cholesky / triangular-solve ---------------------------------------------------------

def _lower_tpu(f, *args):
    return jax.jit(f).trace(*args).lower(lowering_platforms=("tpu",))


def spd(*batch, n, dtype=np.float32):
    a = rnd(*batch, n, n, dtype=np.complex128 if np.dtype(dtype).kind == "c" else np.float64)
    m = a @ np.conj(np.swapaxes(a, -1, -2)) + n * np.eye(n)
    return m.astype(dtype)


_MLIR_TYPES = {np.float32: "f32", np.float64: "f64", np.complex64: "complex<f32>",
               np.complex128: "complex<f64>"}
_HLO_TYPES = {np.float32: "f32", np.float64: "f64", np.complex64: "c64", np.complex128: "c128"}


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("lower", [True, False])
def test_cholesky_raw_op_matches_xla_cpu(dtype, lower):
    a = spd(2, 3, n=5, dtype=dtype)
    a[0, 1, 0, 0] = -4.0                      # not positive definite: all NaN in XLA
    a[1, 2] += np.triu(np.full((5, 5), 9.0), 1) if lower else np.tril(np.full((5, 5), 9), -1)
    shape = "x".join(map(str, a.shape))
    mt = f"tensor<{shape}x{_MLIR_TYPES[dtype]}>"
    mlir_text = f"""
module @m {{
  func.func public @main(%arg0: {mt}) -> {mt} {{
    %0 = stablehlo.cholesky %arg0, lower = {str(lower).lower()} : {mt}
    return %0 : {mt}
  }}
}}"""
    ht = f"{_HLO_TYPES[dtype]}[{','.join(map(str, a.shape))}]"
    hlo = f"""
HloModule m
ENTRY e {{
  a = {ht} parameter(0)
  ROOT c = {ht} cholesky(a), lower={str(lower).lower()}
}}"""
    with jax.enable_x64(True):
        (want,) = xla_cpu_run(mlir_text, a)
    got = run_module(parse_module(hlo), [a])
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert_close(got, want)


def test_cholesky_jax():
    a = spd(3, n=6)
    f = lambda a: lax.linalg.cholesky(a, symmetrize_input=False)  # noqa: E731
    got = run_module(parse_module(_lower_tpu(f, a).as_text(dialect="hlo")), [a])
    assert_close(got, jax.jit(f)(a), rtol=1e-4)
    bad = a.copy()
    bad[1, 2, 2] = -1.0
    got = run_module(parse_module(_lower_tpu(f, bad).as_text(dialect="hlo")), [bad])
    assert_close(got, jax.jit(f)(bad), rtol=1e-4)


_TS_CASES = [(left, lower, trans, conj, unit)
             for left in (True, False) for lower in (True, False)
             for trans in (False, True) for conj in (False, True)
             for unit in (False, True)]


def _tri(n, batch, dtype):
    a = rnd(*batch, n, n, dtype=dtype) * 0.3
    return a + 2 * np.eye(n, dtype=dtype)


@pytest.mark.parametrize("left,lower,trans,conj,unit", _TS_CASES)
def test_triangular_solve_flags(left, lower, trans, conj, unit):
    dtype = np.complex64 if conj else np.float32
    a = _tri(5, (2,), dtype)
    b = rnd(2, 5, 3, dtype=dtype) if left else rnd(2, 3, 5, dtype=dtype)

    def f(a, b):
        return lax.linalg.triangular_solve(a, b, left_side=left, lower=lower,
                                           transpose_a=trans, conjugate_a=conj,
                                           unit_diagonal=unit)
    lowered = _lower_tpu(f, a, b)
    got = run_module(parse_module(lowered.as_text(dialect="hlo")), [a, b])
    assert_close(got, jax.jit(f)(a, b), rtol=1e-4)
    (xla,) = xla_cpu_run(lowered.as_text(), a, b)
    assert_close(got, xla, rtol=1e-4)


def test_triangular_solve_f64_broadcast_batch():
    a = _tri(4, (), np.float64)
    b = rnd(3, 4, 2, dtype=np.float64)

    def f(a, b):
        return lax.linalg.triangular_solve(jnp.broadcast_to(a, (3, 4, 4)), b,
                                           left_side=True, lower=False, transpose_a=True)
    with jax.enable_x64(True):
        lowered = _lower_tpu(f, a, b)
        got = run_module(parse_module(lowered.as_text(dialect="hlo")), [a, b])
        assert_close(got, jax.jit(f)(a, b), rtol=1e-10)
