"""dot, convolution, cholesky and triangular-solve on every device (tests/devices.py).

dot and convolution programs are lowered by jax.  On cpu they run both as lowered HLO and
as XLA:CPU's optimized HLO and are compared with jax's result.  On cuda the lowered HLO is
compared with the cpu's result: integers identical, floats to a few ulps of the largest
magnitude (the tiled matmul accumulates in its own order; a GPU may also contract to FMA).
jax lowers cholesky and triangular_solve to LAPACK custom-calls on CPU, so those programs
are lowered for TPU (which keeps the HLO ops); the expected values come from jax on CPU
and, where the raw op's result matters (the other triangle, non-positive-definite input),
from XLA:CPU itself compiling the same StableHLO.

One case table per op; where a case's input shape differs by device, the cuda shape is the
smaller (the simulator runs every CUDA thread as a Python thread: outputs of at most a few
16x16 tiles).
"""
from __future__ import annotations


import ml_dtypes
import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from devices import assert_same_bits, check_on, cuda_against_cpu, on_each_device  # noqa: E402,E501
from oracle import assert_same, leaf_pairs, leaves, xla_cpu_run  # noqa: E402
from xlaplug.runtime.executor import run_module  # noqa: E402
from xlaplug.hlo.text.parser import parse_module  # noqa: E402

pytestmark = [
    pytest.mark.jax,
    # The simulator computes integer dots with numpy int64 scalars: wrap-around (wanted) warns.
    pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning",
                               "ignore:invalid value encountered:RuntimeWarning",
                               "ignore:divide by zero encountered:RuntimeWarning")]

RNG = np.random.default_rng(7)


def _tol(dt):
    """Against jax: its kernels (Eigen / LAPACK) round differently."""
    dt = np.dtype(dt)
    if dt == ml_dtypes.bfloat16:
        return 2e-2
    if dt == np.float16:
        return 2e-3
    if dt in (np.float32, np.complex64):
        return 2e-5
    return 1e-12


def _cuda_tol(dt):
    """cuda against cpu: the same algorithms, another accumulation order."""
    dt = np.dtype(dt)
    if dt == ml_dtypes.bfloat16:
        return 2e-2
    if dt == np.float16:
        return 2e-3
    if dt in (np.float32, np.complex64):
        return 2e-6
    return 1e-14


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


def assert_cuda_close(got, want, what=""):
    g, w = leaves(got), leaves(want)
    assert len(g) == len(w), what
    for a, b in zip(g, w):
        assert a.dtype == b.dtype, f"{what}: dtype {a.dtype} != {b.dtype}"
        assert a.shape == b.shape, f"{what}: shape {a.shape} != {b.shape}"
        if a.dtype.kind in "iub":
            np.testing.assert_array_equal(a, b, err_msg=what)
            continue
        t = _cuda_tol(a.dtype)
        cdt = np.complex128 if a.dtype.kind == "c" else np.float64
        a64, b64 = a.astype(cdt), b.astype(cdt)
        assert np.array_equal(np.isnan(a64), np.isnan(b64)), f"{what}: NaN positions differ"
        scale = np.max(np.abs(b64[np.isfinite(b64)]), initial=1.0)
        np.testing.assert_allclose(a64, b64, rtol=t, atol=t * scale, err_msg=what,
                                   equal_nan=True)


def check(device, f, *args, x64=False, modes=("lowered", "compiled"), rtol=None, opcode=None):
    """cpu: both HLO forms against jax; cuda: the lowered form against the cpu."""
    check_on(device, f, args, lambda got, want, mode: assert_close(got, want, mode, rtol=rtol),
             x64=x64, modes=modes if device == "cpu" else ("lowered",), expect_op=opcode,
             cuda_compare=assert_cuda_close)


def check_text(device, text, *args, want=None, rtol=None):
    """Hand-written HLO: cuda against the cpu; cpu against `want()` (jax or XLA:CPU)."""
    if device == "cuda":
        return cuda_against_cpu(text, args, assert_cuda_close)
    got = run_module(parse_module(text), list(args))
    assert_close(got, want(), rtol=rtol)
    return got


def rnd(*shape, dtype=np.float32):
    x = RNG.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * RNG.standard_normal(shape)
    return x.astype(dtype)


def rint(dtype, *shape):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


# ---- dot ---------------------------------------------------------------------------------

@on_each_device
def test_dot_matmul_and_vector_forms(device):
    a, b, v = rnd(5, 7), rnd(7, 3), rnd(7)
    check(device, lambda a, b: a @ b, a, b, opcode="dot")
    check(device, lambda a, v: a @ v, a, v)
    check(device, lambda v: jnp.dot(v, v), v)                    # rank-0 result
    check(device, lambda a: jnp.einsum("ij,kj->ik", a, a), a)    # contracting dim 1 of both
    check(device, lambda a, b: lax.dot_general(a[:, :0], b[:0], (((1,), (0,)), ((), ()))), a, b)


@on_each_device
def test_dot_multiple_tiles(device):
    # K spans three 16-wide tiles, M two tile rows, and a batch of 2 uses grid z (cuda).
    check(device, lambda a, b: a @ b, rnd(17, 40), rnd(40, 3))
    check(device, lambda a, b: jnp.einsum("bij,bjk->bik", a, b), rnd(2, 3, 18), rnd(2, 18, 17))


@on_each_device
def test_dot_general_batch_and_contracting_orders(device):
    lhs, rhs = rnd(3, 2, 5, 4), rnd(4, 6, 2, 3)
    # batch dims (1 | 2), contracting dims (3, 0 | 0, 3), free dims in between.
    dn = (((3, 0), (0, 3)), ((1,), (2,)))
    check(device, lambda x, y: lax.dot_general(x, y, dn), lhs, rhs)
    x, y = rnd(2, 3, 4, 5), rnd(3, 2, 5, 6)
    dn2 = (((3,), (2,)), ((1, 0), (0, 1)))
    check(device, lambda x, y: lax.dot_general(x, y, dn2), x, y)


@on_each_device
def test_dot_int8_to_int32(device):
    x, y = rint(np.int8, 6, 40), rint(np.int8, 40, 5)
    check(device, lambda x, y: lax.dot(x, y, preferred_element_type=jnp.int32), x, y)
    u, w = rint(np.uint8, 3, 4, 50), rint(np.uint8, 3, 50, 2)
    dn = (((2,), (1,)), ((0,), (0,)))
    check(device, lambda u, w: lax.dot_general(u, w, dn, preferred_element_type=jnp.uint32),
          u, w)
    check(device, lambda x, y: lax.dot(x, y), x, y)               # s8 result: wraps


@on_each_device
def test_dot_int32_wraps(device):
    x, y = rint(np.int32, 4, 9), rint(np.int32, 9, 3)
    check(device, lambda x, y: x @ y, x, y)                       # wraps in int64 and in int32
    check(device, lambda x, y: lax.dot(x.astype(jnp.int16), y.astype(jnp.int16),
                                       preferred_element_type=jnp.int32), x, y)


@on_each_device
def test_dot_int64_and_uint64_wrap_x64(device):
    x, y = rint(np.int64, 3, 5), rint(np.int64, 5, 2)
    check(device, lambda x, y: x @ y, x, y, x64=True)
    u, w = rint(np.uint64, 3, 5), rint(np.uint64, 5, 2)
    check(device, lambda u, w: u @ w, u, w, x64=True)


@on_each_device
def test_dot_narrow_floats(device):
    x, y = rnd(8, 64), rnd(64, 4)
    xb, yb = x.astype(ml_dtypes.bfloat16), y.astype(ml_dtypes.bfloat16)
    check(device, lambda x, y: lax.dot(x, y, preferred_element_type=jnp.float32), xb, yb)
    check(device, lambda x, y: x @ y, xb, yb, rtol=1e-2)
    xh, yh = x.astype(np.float16), y.astype(np.float16)
    check(device, lambda x, y: x @ y, xh, yh, rtol=5e-3)          # f32 accumulation, one rounding
    check(device, lambda x, y: lax.dot(x, y, preferred_element_type=jnp.float32), xh, yh)


@pytest.mark.parametrize("dtype", ["bf16", np.float32, np.float64])
@pytest.mark.parametrize("t,h,d", [(16, 3, 8), (128, 4, 64)])
def test_attention_products_on_strided_operands(monkeypatch, dtype, t, h, d):
    """Batched products of transposed operands (the attention's bthd,bshd->bhts and
    bhts,bshd->bthd): each operand (bf16 widened in its own layout) handed to BLAS as
    strided matrices (linalg._strided), no copy in the product's order -- the bits of the
    path that copies (taken when no view will do), and XLA's values."""
    from xlaplug.backends.cpu import linalg
    dt = ml_dtypes.bfloat16 if dtype == "bf16" else dtype
    q, k, p = (rnd(2, t, h, d).astype(dt), rnd(2, t, h, d).astype(dt),
               rnd(2, h, t, t).astype(dt))
    views, real = [], linalg._strided
    monkeypatch.setattr(linalg, "_strided", lambda *a: views.append(real(*a)) or views[-1])
    for spec, a, b in (("bthd,bshd->bhts", q, k), ("bhts,bshd->bthd", p, k)):
        with jax.enable_x64(dt == np.float64):
            f = jax.jit(lambda a, b, spec=spec: jnp.einsum(spec, a, b))
            m = parse_module(f.lower(a, b).as_text(dialect="hlo"))
            want = np.asarray(f(a, b))
        views.clear()
        got = np.asarray(run_module(m, [a, b]))
        assert len(views) == 2 and all(v is not None for v in views) and \
            not all(v.flags.c_contiguous for v in views), "no strided operand was taken"
        with monkeypatch.context() as mp:
            mp.setattr(linalg, "_strided", lambda *a: None)
            copied = np.asarray(run_module(m, [a, b]))
        np.testing.assert_array_equal(got.view(np.uint8), copied.view(np.uint8))
        assert got.dtype == want.dtype
        assert_close(got, want)


def test_a_matrix_times_its_own_transpose_keeps_gemm(monkeypatch):
    """x @ x^T per batch reads one buffer twice: no strided views then (numpy would take
    it to syrk, whose bits are not gemm's); the copying path runs."""
    from xlaplug.backends.cpu import linalg
    views, real = [], linalg._strided
    monkeypatch.setattr(linalg, "_strided", lambda *a: views.append(real(*a)) or views[-1])
    f = jax.jit(lambda x: jnp.einsum("bik,bjk->bij", x, x))
    x = rnd(3, 24, 16)
    m = parse_module(f.lower(x).as_text(dialect="hlo"))
    assert_close(np.asarray(run_module(m, [x])), np.asarray(f(x)))
    assert views == []


@on_each_device
def test_dot_f64_and_complex(device):
    check(device, lambda x, y: x @ y, rnd(4, 6, dtype=np.float64), rnd(6, 3, dtype=np.float64),
          x64=True)
    check(device, lambda x, y: x @ y, rnd(4, 6, dtype=np.complex64),
          rnd(6, 3, dtype=np.complex64))
    check(device, lambda x, y: jnp.einsum("bij,bjk->bik", x, y),
          rnd(2, 4, 6, dtype=np.complex128), rnd(2, 6, 3, dtype=np.complex128), x64=True)


# Shapes where Eigen (XLA:CPU's complex dot) adds k in plain sequence, so the four-sum order
# (cpu/dot_complex.py) gives XLA's bits: k below its 8-step unrolling, or rows past its last
# full packet (not vector products, which XLA runs as a gemv); the suite's 4x3x6
# real-by-complex dots among them.
_COMPLEX_DOT_SHAPES = [(4, 3, 6), (3, 17, 6), (16, 5, 16)]


@on_each_device
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_dot_complex_in_xla_order(device, dtype):
    for m, k, n in _COMPLEX_DOT_SHAPES if device == "cpu" else _COMPLEX_DOT_SHAPES[:1]:
        real = rnd(m, k, dtype=np.float32 if dtype == np.complex64 else np.float64)
        a, b = rnd(m, k, dtype=dtype), rnd(k, n, dtype=dtype)
        b[0, 0] = np.inf  # an infinity spreads as XLA's sums spread it
        for f, x in ((lambda x, y: x.astype(y.dtype) @ y, real), (lambda x, y: x @ y, a)):
            with jax.enable_x64(dtype == np.complex128):
                lowered = jax.jit(f).lower(x, b)
                text = lowered.as_text(dialect="hlo")
                want = np.asarray(lowered.compile()(x, b))
            if device == "cuda":
                cuda_against_cpu(text, [x, b], assert_same_bits)
                continue
            with np.errstate(all="ignore"):
                got = np.asarray(run_module(parse_module(text), [x, b]))
            assert_same(got, want, 0, f"{dtype.__name__} {x.dtype} [{m},{k}]x[{k},{n}]")


@on_each_device
def test_dot_mixed_input_types(device):
    # int8 x bf16 and f32 x f16 mix through converts jax inserts; the dot sees one type.
    x, y = rint(np.int8, 4, 8), rnd(8, 3)
    check(device, lambda x, y: lax.dot(x.astype(jnp.float32), y), x, y)


_PRED_DOT = """
HloModule m
ENTRY e {
  a = pred[3,4] parameter(0)
  b = pred[4,2] parameter(1)
  ROOT d = pred[3,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}"""
_MIXED_DOTS = ["""
HloModule m
ENTRY e {
  a = s8[3,4] parameter(0)
  b = f32[4,2] parameter(1)
  ROOT d = f32[3,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}""", """
HloModule m
ENTRY e {
  a = f16[3,4] parameter(0)
  b = f32[4,2] parameter(1)
  ROOT d = f64[3,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}"""]


@pytest.mark.cuda
def test_dot_pred_and_mixed_operand_types_on_cuda():
    """Dots jax never emits (pred operands; operands of two types and a third result type),
    against the cpu kernels, which read them as XLA does."""
    cuda_against_cpu(_PRED_DOT, [RNG.random((3, 4)) < 0.3, RNG.random((4, 2)) < 0.3],
                     assert_cuda_close)
    cuda_against_cpu(_MIXED_DOTS[0], [rint(np.int8, 3, 4), rnd(4, 2)], assert_cuda_close)
    cuda_against_cpu(_MIXED_DOTS[1], [rnd(3, 4, dtype=np.float16), rnd(4, 2)],
                     assert_cuda_close)


# ---- convolution -------------------------------------------------------------------------

def conv(dn, **kw):
    def f(x, w):
        return lax.conv_general_dilated(x, w, dimension_numbers=dn, **kw)
    return f


def shapes(device, cpu, cuda):
    """The input shapes of a case on `device` (cuda's are the simulator-sized ones)."""
    return cpu if device == "cpu" else cuda


# The union of what the cpu and the cuda tables held (strides with lhs dilation, rhs
# dilation along one and along both spatial dimensions).
CONV_CASES = {
    "valid": dict(window_strides=(1, 1), padding="VALID"),
    "same": dict(window_strides=(1, 1), padding="SAME"),
    "strides_pad": dict(window_strides=(2, 3), padding=[(1, 2), (0, 1)]),
    "negative_pad": dict(window_strides=(1, 2), padding=[(-1, 2), (3, -2)]),
    "lhs_dilation": dict(window_strides=(1, 1), padding=[(2, 2), (1, 1)], lhs_dilation=(2, 3)),
    "lhs_dilation_strided": dict(window_strides=(2, 2), padding=[(2, 2), (1, 1)],
                                 lhs_dilation=(2, 3)),
    "all_dilations": dict(window_strides=(2, 1), padding=[(1, -1), (2, 2)],
                          lhs_dilation=(2, 1), rhs_dilation=(1, 2)),
    "rhs_dilation": dict(window_strides=(1, 1), padding="SAME", rhs_dilation=(2, 3)),
    "rhs_dilation_one_dim": dict(window_strides=(1, 1), padding="SAME", rhs_dilation=(2, 1)),
}


@pytest.mark.parametrize("case", list(CONV_CASES))
@on_each_device
def test_conv_nchw(device, case):
    (xs, ws) = shapes(device, ((2, 3, 9, 10), (4, 3, 3, 2)), ((1, 2, 5, 5), (3, 2, 3, 3)))
    check(device, conv(("NCHW", "OIHW", "NCHW"), **CONV_CASES[case]), rnd(*xs), rnd(*ws),
          opcode="convolution")


@on_each_device
def test_conv_nhwc_and_odd_orders(device):
    xs, ws = shapes(device, ((2, 8, 7, 3), (3, 2, 3, 5)), ((1, 5, 4, 2), (3, 2, 2, 3)))
    check(device, conv(("NHWC", "HWIO", "NHWC"), window_strides=(1, 2), padding="SAME"),
          rnd(*xs), rnd(*ws))
    # every operand with its own odd order of batch/feature/spatial dimensions
    xs, ws = shapes(device, ((7, 2, 3, 8), (2, 3, 5, 3)),      # H N C W,  W I O H
                    ((5, 2, 2, 4), (2, 2, 3, 2)))
    check(device, conv(("HNCW", "WIOH", "CWNH"), window_strides=(2, 1),
                       padding=[(1, 0), (0, 2)], rhs_dilation=(2, 1)), rnd(*xs), rnd(*ws))


@on_each_device
def test_conv_feature_groups(device):
    # 3 groups of 2 input / 3 output features (cuda: 2 groups of 2 / 2)
    xs, ws, g = shapes(device, ((2, 6, 8, 8), (9, 2, 3, 3), 3), ((2, 4, 4, 4), (4, 2, 3, 3), 2))
    x = rnd(*xs)
    check(device, conv(("NCHW", "OIHW", "NCHW"), window_strides=(1, 1), padding="SAME",
                       feature_group_count=g), x, rnd(*ws))
    # depthwise, multiplier 2
    (xs, ws, g) = shapes(device, ((2, 6, 8, 8), (12, 1, 3, 3), 6), ((1, 3, 5, 5), (6, 1, 3, 3), 3))
    check(device, conv(("NCHW", "OIHW", "NCHW"), window_strides=(2, 2), padding="SAME",
                       feature_group_count=g), rnd(*xs), rnd(*ws))


@on_each_device
def test_conv_batch_groups(device):
    # 2 batch groups of 2, 3 outputs each (cuda: 2 outputs each)
    xs, ws = shapes(device, ((4, 3, 7, 6), (6, 3, 3, 2)), ((4, 2, 4, 4), (4, 2, 3, 2)))
    check(device, conv(("NCHW", "OIHW", "NCHW"), window_strides=(1, 1), padding="VALID",
                       batch_group_count=2), rnd(*xs), rnd(*ws))
    # the weight-gradient convolution jax builds for grouped convolutions
    xs = shapes(device, (3, 4, 6, 6), (3, 4, 4, 4))
    x3, w3 = rnd(*xs), rnd(4, 2, 3, 3)

    def loss(w, x):
        y = lax.conv_general_dilated(x, w, (1, 1), "SAME", feature_group_count=2)
        return jnp.sum(y * y)
    assert "batch_group_count=2" in jax.jit(jax.grad(loss)).lower(w3, x3).as_text(dialect="hlo")
    check(device, jax.grad(loss), w3, x3)


_CONV_NO_SPATIAL = """
HloModule m
ENTRY e {
  x = f32[3,4] parameter(0)
  w = f32[4,2] parameter(1)
  ROOT c = f32[3,2] convolution(x, w), dim_labels=bf_io->bf
}"""


@on_each_device
def test_conv_1d_3d_and_no_spatial(device):
    xs, ws = shapes(device, ((2, 3, 17), (5, 3, 4)), ((1, 2, 9), (3, 2, 3)))
    check(device, conv(("NCH", "OIH", "NCH"), window_strides=(2,), padding=[(2, 1)],
                       rhs_dilation=(2,)), rnd(*xs), rnd(*ws))
    xs, ws = shapes(device, ((1, 2, 5, 6, 4), (3, 2, 3, 3, 2)), ((1, 2, 3, 4, 3), (2, 2, 2, 3, 2)))
    check(device, conv(("NCDHW", "OIDHW", "NCDHW"), window_strides=(1, 2, 1), padding="SAME"),
          rnd(*xs), rnd(*ws))
    # no spatial dimension at all: a matrix product
    x, w = rnd(3, 4), rnd(4, 2)
    check_text(device, _CONV_NO_SPATIAL, x, w, want=lambda: jnp.matmul(x, w))


@on_each_device
def test_conv_integer_narrow_and_complex_types(device):
    xs, ws = shapes(device, ((2, 3, 6, 6), (4, 3, 3, 3)), ((1, 2, 4, 4), (2, 2, 3, 3)))
    xi, wi = rint(np.int8, *xs), rint(np.int8, *ws)
    check(device, lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                                        preferred_element_type=jnp.int32), xi, wi)
    check(device, lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME"), xi, wi)  # wraps
    xb, wb = rnd(*xs).astype(ml_dtypes.bfloat16), rnd(*ws).astype(ml_dtypes.bfloat16)
    check(device, lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                                        preferred_element_type=jnp.float32),
          xb, wb)
    check(device, lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME"), xb, wb,
          rtol=2e-2)
    check(device, lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME"),
          rnd(*xs, dtype=np.float16), rnd(*ws, dtype=np.float16), rtol=5e-3)
    check(device, lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "VALID"),
          rnd(*xs, dtype=np.complex64), rnd(*ws, dtype=np.complex64))


@on_each_device
def test_conv_transpose_gradient(device):
    xs, ws = shapes(device, ((2, 4, 8, 8), (5, 4, 3, 3)), ((1, 2, 5, 5), (3, 2, 3, 3)))
    x, w = rnd(*xs), rnd(*ws)

    def loss(x, w):
        y = lax.conv_general_dilated(x, w, (2, 2), [(1, 1), (1, 1)])
        return jnp.sum(jnp.sin(y))
    check(device, jax.grad(loss, argnums=(0, 1)), x, w, rtol=1e-4)


def test_conv_input_dilated_by_phases_and_nonfinite_kernel():
    """An input-dilated convolution at stride 1 (a strided convolution's input gradient)
    runs by output phases, skipping the zeros between input samples (cpu/convolution.py),
    as XLA's sums do: an inf tap gives NaN over padding, never over a hole."""
    x, w = rnd(2, 7, 6, 3), rnd(3, 4, 3, 5)
    f = conv(("NHWC", "HWIO", "NHWC"), window_strides=(1, 1), padding=[(2, 1), (3, -1)],
             lhs_dilation=(2, 3))
    check("cpu", f, x, w)
    w[1, 2, 0, 3] = np.inf
    check("cpu", f, x, w)


def test_conv_by_phases_reuses_its_patches_and_fills_tapless_phases():
    """By phases, each phase writes only its own outputs into an unzeroed result, and a
    phase that no tap reaches (a kernel narrower than the dilation) is filled with zeros;
    the phases' patch buffers are the context's scratch, kept from run to run: two runs on
    one context with other values give XLA's values each time."""
    from xlaplug.runtime.executor import ExecContext
    f = jax.jit(conv(("NHWC", "HWIO", "NHWC"), window_strides=(1, 1),
                     padding=[(1, 2), (0, 1)], lhs_dilation=(3, 2)))
    x0, w0 = rnd(2, 5, 6, 4), rnd(2, 3, 4, 3)
    module = parse_module(f.lower(x0, w0).as_text(dialect="hlo"))
    ctx = ExecContext("cpu")
    for x, w in ((x0, w0), (rnd(2, 5, 6, 4), rnd(2, 3, 4, 3))):
        got = np.asarray(ctx.run(module.entry, [x, w]))
        assert_close(got, np.asarray(f(x, w)))
    assert ctx.kernel_cache.table("conv_patches"), "the phases kept no patch buffer"


_CONV_REVERSAL = """
HloModule m
ENTRY e {
  x = f32[1,2,6,5]{3,2,1,0} parameter(0)
  w = f32[3,2,3,2]{3,2,1,0} parameter(1)
  ROOT c = f32[1,3,4,5]{3,2,1,0} convolution(x, w), window={size=3x2 pad=0_0x1_0 rhs_reversal=1x0}, dim_labels=bf01_oi01->bf01
}"""


@on_each_device
def test_conv_window_reversal(device):
    x, w = rnd(1, 2, 6, 5), rnd(3, 2, 3, 2)
    # window reversal == convolving with the kernel reversed along that dimension
    check_text(device, _CONV_REVERSAL, x, w,
               want=lambda: lax.conv_general_dilated(x, lax.rev(w, (2,)), (1, 1),
                                                     [(0, 0), (1, 0)]))


def test_conv_patch_buffer_is_kept_between_runs():
    """The patch matrix is scratch the context keeps (cpu/convolution.py: a fresh one each
    run cost page faults that outweighed the product); a second run with other operands
    reuses that very buffer and gives what a fresh context gives."""
    from xlaplug.runtime.executor import ExecContext
    module = parse_module(_CONV_REVERSAL)
    ctx = ExecContext("cpu")
    ctx.run(module.entry, [rnd(1, 2, 6, 5), rnd(3, 2, 3, 2)])
    table = ctx.kernel_cache.table("conv_patches")
    (buf,) = table.values()
    b = [rnd(1, 2, 6, 5), rnd(3, 2, 3, 2)]
    got = ctx.run(module.entry, b)
    assert len(table) == 1 and next(iter(table.values())) is buf
    assert_same(np.asarray(got), np.asarray(run_module(module, b)), 0, "second run")


def test_conv_large_matches_xla():
    """The benchmark's convolution (its speed is benchmarks/run.py's to measure, never a
    test's): the im2col/BLAS path on a large input gives XLA's values."""
    x, w = rnd(8, 64, 56, 56), rnd(64, 64, 3, 3)
    text = """
HloModule m
ENTRY e {
  x = f32[8,64,56,56]{3,2,1,0} parameter(0)
  w = f32[64,64,3,3]{3,2,1,0} parameter(1)
  ROOT c = f32[8,64,56,56]{3,2,1,0} convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01
}"""
    module = parse_module(text)
    got = run_module(module, [x, w])
    want = jax.jit(lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME"))(x, w)
    assert_close(got, want, rtol=1e-4)


# ---- cholesky / triangular-solve ---------------------------------------------------------

def _lower_tpu(f, *args):
    # jax lowers linalg to LAPACK custom-calls on CPU; the TPU lowering keeps the HLO ops.
    return jax.jit(f).trace(*args).lower(lowering_platforms=("tpu",))


def spd(*batch, n, dtype=np.float32):
    a = rnd(*batch, n, n, dtype=np.complex128 if np.dtype(dtype).kind == "c" else np.float64)
    m = a @ np.conj(np.swapaxes(a, -1, -2)) + n * np.eye(n)
    return m.astype(dtype)


_MLIR_TYPES = {np.float16: "f16", np.float32: "f32", np.float64: "f64",
               np.complex64: "complex<f32>", np.complex128: "complex<f64>"}
_HLO_TYPES = {np.float16: "f16", np.float32: "f32", np.float64: "f64", np.complex64: "c64",
              np.complex128: "c128"}


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.complex64,
                                   np.complex128])
@pytest.mark.parametrize("lower", [True, False])
@on_each_device
def test_cholesky_raw_op_matches_xla_cpu(device, dtype, lower):
    n = shapes(device, 5, 4)
    a = spd(2, 3, n=n, dtype=dtype)
    a[0, 1, 0, 0] = -4.0                      # not positive definite: all NaN in XLA
    junk = np.triu(np.full((n, n), 9.0), 1) if lower else np.tril(np.full((n, n), 9.0), -1)
    a[1, 2] += junk.astype(dtype)             # the triangle that is not read
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

    def want():
        with jax.enable_x64(True):
            return xla_cpu_run(mlir_text, a)[0]
    got = check_text(device, hlo, a, want=want)
    assert np.isnan(got[0, 1]).all() and not np.isnan(got[1]).any()


@on_each_device
def test_cholesky_jax(device):
    a = spd(3, n=6)
    f = lambda a: lax.linalg.cholesky(a, symmetrize_input=False)  # noqa: E731
    bad = a.copy()
    bad[1, 2, 2] = -1.0
    for m in (a, bad):
        check_text(device, _lower_tpu(f, m).as_text(dialect="hlo"), m,
                   want=lambda: jax.jit(f)(m), rtol=1e-4)


_TS_CASES = [(left, lower, trans, conj, unit)
             for left in (True, False) for lower in (True, False)
             for trans in (False, True) for conj in (False, True)
             for unit in (False, True)]


def _tri(n, batch, dtype):
    a = rnd(*batch, n, n, dtype=dtype) * 0.3
    return a + 2 * np.eye(n, dtype=dtype)


@pytest.mark.parametrize("left,lower,trans,conj,unit", _TS_CASES)
@on_each_device
def test_triangular_solve_flags(device, left, lower, trans, conj, unit):
    dtype = np.complex64 if conj else np.float32
    a = _tri(5, (2,), dtype)
    b = rnd(2, 5, 3, dtype=dtype) if left else rnd(2, 3, 5, dtype=dtype)

    def f(a, b):
        return lax.linalg.triangular_solve(a, b, left_side=left, lower=lower,
                                           transpose_a=trans, conjugate_a=conj,
                                           unit_diagonal=unit)
    lowered = _lower_tpu(f, a, b)
    got = check_text(device, lowered.as_text(dialect="hlo"), a, b,
                     want=lambda: jax.jit(f)(a, b), rtol=1e-4)
    if device == "cpu":
        (xla,) = xla_cpu_run(lowered.as_text(), a, b)
        assert_close(got, xla, rtol=1e-4)


@on_each_device
def test_triangular_solve_f64_broadcast_batch(device):
    a = _tri(4, (), np.float64)
    b = rnd(3, 4, 2, dtype=np.float64)

    def f(a, b):
        return lax.linalg.triangular_solve(jnp.broadcast_to(a, (3, 4, 4)), b,
                                           left_side=True, lower=False, transpose_a=True)
    with jax.enable_x64(True):
        text = _lower_tpu(f, a, b).as_text(dialect="hlo")
        check_text(device, text, a, b, want=lambda: jax.jit(f)(a, b), rtol=1e-10)
    a3 = (rnd(3, 4, 4, dtype=np.float64) * 0.3 + 2 * np.eye(4))

    def g(a, b):
        return lax.linalg.triangular_solve(a, b, left_side=True, lower=False, transpose_a=True)
    with jax.enable_x64(True):
        text = _lower_tpu(g, a3, b).as_text(dialect="hlo")
        check_text(device, text, a3, b, want=lambda: jax.jit(g)(a3, b), rtol=1e-10)


_F16_TRIANGULAR_SOLVE = """
HloModule m
ENTRY e {
  a = f16[4,4] parameter(0)
  b = f16[4,2] parameter(1)
  ROOT x = f16[4,2] triangular-solve(a, b), left_side=true, lower=true, transpose_a=NO_TRANSPOSE
}"""


@pytest.mark.cuda
def test_triangular_solve_f16_on_cuda():
    """(No oracle for an f16 triangular-solve on cpu: jax runs LAPACK, which has none.)"""
    a = _tri(4, (), np.float64)
    cuda_against_cpu(_F16_TRIANGULAR_SOLVE, [a.astype(np.float16),
                                             rnd(4, 2, dtype=np.float16)], assert_cuda_close)


@on_each_device
def test_cholesky_solve_program(device):
    # cholesky, then two triangular solves, as jax.scipy's cho_solve builds them
    a, b = spd(2, n=4), rnd(2, 4, 2)

    def f(a, b):
        c = lax.linalg.cholesky(a, symmetrize_input=False)
        y = lax.linalg.triangular_solve(c, b, left_side=True, lower=True)
        return lax.linalg.triangular_solve(c, y, left_side=True, lower=True,
                                           transpose_a=True, conjugate_a=True)
    got = check_text(device, _lower_tpu(f, a, b).as_text(dialect="hlo"), a, b,
                     want=lambda: jax.jit(f)(a, b), rtol=1e-4)
    np.testing.assert_allclose(a @ got, b, rtol=1e-4, atol=1e-4)
