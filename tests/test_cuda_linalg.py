"""CUDA dot, convolution, cholesky and triangular-solve against the CPU backend.

Each program is lowered by jax (or written by hand) and run with device="cuda" (numba's
simulator unless NUMBA_ENABLE_CUDASIM=0) and device="cpu" (verified against XLA by
test_kernels_linalg.py).  Integer results must be identical; floating-point ones agree to
a few ulps of the largest magnitude: the tiled matmul accumulates in its own order (BLAS
uses another; a GPU may also contract to FMA).  The simulator runs every CUDA thread as a
Python thread, so the shapes are tiny (outputs of at most a few 16x16 tiles).
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
from oracle import cuda_and_cpu as both, leaves, lowered_module  # noqa: E402

# The simulator computes integer dots with numpy int64 scalars: wrap-around (wanted) warns.
pytestmark = pytest.mark.filterwarnings(
    "ignore:overflow encountered:RuntimeWarning",
    "ignore:invalid value encountered:RuntimeWarning",
    "ignore:divide by zero encountered:RuntimeWarning")

RNG = np.random.default_rng(11)


def rnd(*shape, dtype=np.float32):
    x = RNG.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * RNG.standard_normal(shape)
    return x.astype(dtype)


def rint(dtype, *shape):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def _tol(dt) -> float:
    dt = np.dtype(dt)
    if dt == np.float16:
        return 2e-3
    if dt in (np.float32, np.complex64):
        return 2e-6
    return 1e-14


def assert_same(got, want, what=""):
    g, w = leaves(got), leaves(want)
    assert len(g) == len(w), what
    for a, b in zip(g, w):
        assert a.dtype == b.dtype, f"{what}: dtype {a.dtype} != {b.dtype}"
        assert a.shape == b.shape, f"{what}: shape {a.shape} != {b.shape}"
        if a.dtype.kind in "iub":
            np.testing.assert_array_equal(a, b, err_msg=what)
            continue
        t = _tol(a.dtype)
        cdt = np.complex128 if a.dtype.kind == "c" else np.float64
        a64, b64 = a.astype(cdt), b.astype(cdt)
        assert np.array_equal(np.isnan(a64), np.isnan(b64)), f"{what}: NaN positions differ"
        scale = np.max(np.abs(b64[np.isfinite(b64)]), initial=1.0)
        np.testing.assert_allclose(a64, b64, rtol=t, atol=t * scale, err_msg=what,
                                   equal_nan=True)


def check(f, *args, x64=False, opcode=None):
    """Lower f with jax, run on cuda and cpu, compare; the module must use `opcode`."""
    text, module = lowered_module(f, *args, x64=x64, opcode=opcode)
    got, want = both(module, args)
    assert_same(got, want, text.splitlines()[-2] if text.count("\n") > 2 else text)


def check_text(text, *args):
    got, want = both(parse_module(text), args)
    assert_same(got, want, text)
    return got


# ---- dot -----------------------------------------------------------------------------------

def test_dot_forms():
    a, b, v = rnd(4, 5), rnd(5, 3), rnd(5)
    check(lambda a, b: a @ b, a, b, opcode="dot")
    check(lambda a, v: a @ v, a, v)
    check(lambda v: jnp.dot(v, v), v)                         # rank-0 result
    check(lambda a: jnp.einsum("ij,kj->ik", a, a), a)         # contracting dim 1 of both
    check(lambda a, b: lax.dot_general(a[:, :0], b[:0], (((1,), (0,)), ((), ()))), a, b)


def test_dot_multiple_tiles():
    # K spans three 16-wide tiles, M two tile rows, and a batch of 2 uses grid z.
    check(lambda a, b: a @ b, rnd(17, 40), rnd(40, 3))
    check(lambda a, b: jnp.einsum("bij,bjk->bik", a, b), rnd(2, 3, 18), rnd(2, 18, 17))


def test_dot_general_batch_and_contracting_orders():
    lhs, rhs = rnd(3, 2, 5, 4), rnd(4, 6, 2, 3)
    check(lambda x, y: lax.dot_general(x, y, (((3, 0), (0, 3)), ((1,), (2,)))), lhs, rhs)
    x, y = rnd(2, 3, 4, 5), rnd(3, 2, 5, 2)
    check(lambda x, y: lax.dot_general(x, y, (((3,), (2,)), ((1, 0), (0, 1)))), x, y)


def test_dot_integers_wrap():
    x, y = rint(np.int8, 4, 40), rint(np.int8, 40, 3)
    check(lambda x, y: lax.dot(x, y, preferred_element_type=jnp.int32), x, y)
    check(lambda x, y: lax.dot(x, y), x, y)                   # s8 result wraps
    u, w = rint(np.uint8, 2, 3, 6), rint(np.uint8, 2, 6, 2)
    check(lambda u, w: lax.dot_general(u, w, (((2,), (1,)), ((0,), (0,))),
                                       preferred_element_type=jnp.uint32), u, w)
    i, j = rint(np.int32, 3, 5), rint(np.int32, 5, 2)
    check(lambda i, j: i @ j, i, j)                           # wraps in int64 and in int32


def test_dot_64bit_integers_and_floats_x64():
    check(lambda x, y: x @ y, rint(np.int64, 3, 5), rint(np.int64, 5, 2), x64=True)
    check(lambda x, y: x @ y, rint(np.uint64, 3, 5), rint(np.uint64, 5, 2), x64=True)
    check(lambda x, y: x @ y, rnd(4, 6, dtype=np.float64), rnd(6, 3, dtype=np.float64),
          x64=True)
    check(lambda x, y: jnp.einsum("bij,bjk->bik", x, y), rnd(2, 3, 4, dtype=np.complex128),
          rnd(2, 4, 2, dtype=np.complex128), x64=True)


def test_dot_f16_complex_pred():
    x, y = rnd(4, 20), rnd(20, 3)
    xh, yh = x.astype(np.float16), y.astype(np.float16)
    check(lambda x, y: x @ y, xh, yh)                         # f32 accumulation, one rounding
    check(lambda x, y: lax.dot(x, y, preferred_element_type=jnp.float32), xh, yh)
    check(lambda x, y: x @ y, rnd(3, 4, dtype=np.complex64), rnd(4, 2, dtype=np.complex64))
    text = """
HloModule m
ENTRY e {
  a = pred[3,4] parameter(0)
  b = pred[4,2] parameter(1)
  ROOT d = pred[3,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}"""
    check_text(text, RNG.random((3, 4)) < 0.3, RNG.random((4, 2)) < 0.3)


def test_dot_mixed_operand_types():
    text = """
HloModule m
ENTRY e {
  a = s8[3,4] parameter(0)
  b = f32[4,2] parameter(1)
  ROOT d = f32[3,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}"""
    check_text(text, rint(np.int8, 3, 4), rnd(4, 2))
    text = """
HloModule m
ENTRY e {
  a = f16[3,4] parameter(0)
  b = f32[4,2] parameter(1)
  ROOT d = f64[3,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}"""
    check_text(text, rnd(3, 4, dtype=np.float16), rnd(4, 2))


# ---- convolution ---------------------------------------------------------------------------

def conv(dn, **kw):
    def f(x, w):
        return lax.conv_general_dilated(x, w, dimension_numbers=dn, **kw)
    return f


@pytest.mark.parametrize("kw", [
    dict(window_strides=(1, 1), padding="VALID"),
    dict(window_strides=(1, 1), padding="SAME"),
    dict(window_strides=(2, 3), padding=[(1, 2), (0, 1)]),
    dict(window_strides=(1, 2), padding=[(-1, 2), (3, -2)]),
    dict(window_strides=(2, 2), padding=[(2, 2), (1, 1)], lhs_dilation=(2, 3)),
    dict(window_strides=(2, 1), padding=[(1, -1), (2, 2)], lhs_dilation=(2, 1),
         rhs_dilation=(1, 2)),
    dict(window_strides=(1, 1), padding="SAME", rhs_dilation=(2, 1)),
], ids=["valid", "same", "strides_pad", "negative_pad", "lhs_dilation", "all_dilations",
        "rhs_dilation"])
def test_conv_nchw(kw):
    check(conv(("NCHW", "OIHW", "NCHW"), **kw), rnd(1, 2, 5, 5), rnd(3, 2, 3, 3),
          opcode="convolution")


def test_conv_dim_orders():
    check(conv(("NHWC", "HWIO", "NHWC"), window_strides=(1, 2), padding="SAME"),
          rnd(1, 5, 4, 2), rnd(3, 2, 2, 3))
    # every operand with its own odd order of batch/feature/spatial dimensions
    check(conv(("HNCW", "WIOH", "CWNH"), window_strides=(2, 1), padding=[(1, 0), (0, 2)],
               rhs_dilation=(2, 1)), rnd(5, 2, 2, 4), rnd(2, 2, 3, 2))


def test_conv_feature_and_batch_groups():
    check(conv(("NCHW", "OIHW", "NCHW"), window_strides=(1, 1), padding="SAME",
               feature_group_count=2), rnd(2, 4, 4, 4), rnd(4, 2, 3, 3))
    check(conv(("NCHW", "OIHW", "NCHW"), window_strides=(2, 2), padding="SAME",
               feature_group_count=3), rnd(1, 3, 5, 5), rnd(6, 1, 3, 3))   # depthwise x2
    check(conv(("NCHW", "OIHW", "NCHW"), window_strides=(1, 1), padding="VALID",
               batch_group_count=2), rnd(4, 2, 4, 4), rnd(4, 2, 3, 2))


def test_conv_weight_gradient_program():
    # jax's weight gradient of a grouped convolution uses batch_group_count; the program
    # also needs elementwise CUDA kernels (multiply, broadcast), written alongside.
    x, w = rnd(3, 4, 4, 4), rnd(4, 2, 3, 3)

    def loss(w, x):
        y = lax.conv_general_dilated(x, w, (1, 1), "SAME", feature_group_count=2)
        return jnp.sum(y * y)
    with jax.enable_x64(False):
        text = jax.jit(jax.grad(loss)).lower(w, x).as_text(dialect="hlo")
    assert "batch_group_count=2" in text
    check(jax.grad(loss), w, x)


def test_conv_1d_3d_and_no_spatial():
    check(conv(("NCH", "OIH", "NCH"), window_strides=(2,), padding=[(2, 1)],
               rhs_dilation=(2,)), rnd(1, 2, 9), rnd(3, 2, 3))
    check(conv(("NCDHW", "OIDHW", "NCDHW"), window_strides=(1, 2, 1), padding="SAME"),
          rnd(1, 2, 3, 4, 3), rnd(2, 2, 2, 3, 2))
    text = """
HloModule m
ENTRY e {
  x = f32[3,4] parameter(0)
  w = f32[4,2] parameter(1)
  ROOT c = f32[3,2] convolution(x, w), dim_labels=bf_io->bf
}"""
    check_text(text, rnd(3, 4), rnd(4, 2))


def test_conv_integer_f16_complex():
    xi, wi = rint(np.int8, 1, 2, 4, 4), rint(np.int8, 2, 2, 3, 3)
    check(lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                                preferred_element_type=jnp.int32), xi, wi)
    check(lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME"), xi, wi)  # s8 wraps
    check(lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME"),
          rnd(1, 2, 4, 4, dtype=np.float16), rnd(2, 2, 3, 3, dtype=np.float16))
    check(lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "VALID"),
          rnd(1, 2, 4, 4, dtype=np.complex64), rnd(2, 2, 3, 3, dtype=np.complex64))


def test_conv_window_reversal():
    text = """
HloModule m
ENTRY e {
  x = f32[1,2,6,5]{3,2,1,0} parameter(0)
  w = f32[3,2,3,2]{3,2,1,0} parameter(1)
  ROOT c = f32[1,3,4,5]{3,2,1,0} convolution(x, w), window={size=3x2 pad=0_0x1_0 rhs_reversal=1x0}, dim_labels=bf01_oi01->bf01
}"""
    check_text(text, rnd(1, 2, 6, 5), rnd(3, 2, 3, 2))


# ---- cholesky / triangular-solve -----------------------------------------------------------

def spd(*batch, n, dtype=np.float32):
    a = rnd(*batch, n, n, dtype=np.complex128 if np.dtype(dtype).kind == "c" else np.float64)
    m = a @ np.conj(np.swapaxes(a, -1, -2)) + n * np.eye(n)
    return m.astype(dtype)


_HLO_TYPES = {np.float16: "f16", np.float32: "f32", np.float64: "f64", np.complex64: "c64",
              np.complex128: "c128"}


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.complex64,
                                   np.complex128])
@pytest.mark.parametrize("lower", [True, False])
def test_cholesky_raw_op(dtype, lower):
    a = spd(2, 2, n=4, dtype=dtype)
    a[0, 1, 0, 0] = -4.0                      # not positive definite: all NaN
    junk = np.triu(np.full((4, 4), 9.0), 1) if lower else np.tril(np.full((4, 4), 9.0), -1)
    a[1, 0] += junk.astype(dtype)             # the triangle that is not read
    ht = f"{_HLO_TYPES[dtype]}[{','.join(map(str, a.shape))}]"
    got = check_text(f"""
HloModule m
ENTRY e {{
  a = {ht} parameter(0)
  ROOT c = {ht} cholesky(a), lower={str(lower).lower()}
}}""", a)
    assert np.isnan(got[0, 1]).all() and not np.isnan(got[1]).any()


def _lower_tpu(f, *args):
    # jax lowers linalg to LAPACK custom-calls on CPU; the TPU lowering keeps the HLO ops.
    return jax.jit(f).trace(*args).lower(lowering_platforms=("tpu",)).as_text(dialect="hlo")


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("trans", [False, True])
@pytest.mark.parametrize("conj", [False, True])
def test_triangular_solve_flags(left, lower, trans, conj):
    dtype = np.complex64 if conj else np.float32
    a = (rnd(2, 4, 4, dtype=dtype) * 0.3 + 2 * np.eye(4)).astype(dtype)
    b = rnd(2, 4, 3, dtype=dtype) if left else rnd(2, 3, 4, dtype=dtype)
    for unit in (False, True):
        def f(a, b):
            return lax.linalg.triangular_solve(a, b, left_side=left, lower=lower,
                                               transpose_a=trans, conjugate_a=conj,
                                               unit_diagonal=unit)
        module = parse_module(_lower_tpu(f, a, b))
        got, want = both(module, [a, b])
        assert_same(got, want, f"unit={unit}")


def test_triangular_solve_f64_and_mixed():
    a = (rnd(3, 4, 4, dtype=np.float64) * 0.3 + 2 * np.eye(4))
    b = rnd(3, 4, 2, dtype=np.float64)
    with jax.enable_x64(True):
        text = _lower_tpu(lambda a, b: lax.linalg.triangular_solve(
            a, b, left_side=True, lower=False, transpose_a=True), a, b)
    check_text(text, a, b)
    text = """
HloModule m
ENTRY e {
  a = f16[4,4] parameter(0)
  b = f16[4,2] parameter(1)
  ROOT x = f16[4,2] triangular-solve(a, b), left_side=true, lower=true, transpose_a=NO_TRANSPOSE
}"""
    check_text(text, a[0].astype(np.float16), b[0].astype(np.float16))


def test_cholesky_solve_program():
    # cholesky, then two triangular solves, as jax.scipy's cho_solve builds them
    a, b = spd(2, n=4), rnd(2, 4, 2)

    def f(a, b):
        c = lax.linalg.cholesky(a, symmetrize_input=False)
        y = lax.linalg.triangular_solve(c, b, left_side=True, lower=True)
        return lax.linalg.triangular_solve(c, y, left_side=True, lower=True,
                                           transpose_a=True, conjugate_a=True)
    got, want = both(parse_module(_lower_tpu(f, a, b)), [a, b])
    assert_same(got, want)
    np.testing.assert_allclose(a @ got, b, rtol=1e-4, atol=1e-4)


# ---- the kernels compile for a real GPU ----------------------------------------------------

def test_linalg_kernels_compile_to_ptx():
    """The simulator type-checks nothing: compile every linalg kernel with NVVM (no GPU)."""
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0",
               PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, str(Path(__file__).with_name("cuda_ptx_check.py")),
                        "linalg"], capture_output=True, text=True, env=env, timeout=300,
                       cwd=str(root))
    if p.returncode == 3:
        pytest.fail("NVVM unavailable (the test extra installs nvidia-cuda-nvcc-cu12): "
                    + p.stdout.strip())
    assert p.returncode == 0, p.stdout + p.stderr
