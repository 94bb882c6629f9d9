"""A weight gradient's convolution as the transposed product (backends/cpu/conv_wgrad.py): the
forms jax lowers (f01b_i01o->01bf; kernel dilation from a strided forward convolution,
padding, 1-D, an RGB image's, f64) give XLA's values and the same bits at one thread or two;
many outputs keep conv_chunks' path."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
from jax import lax  # noqa: E402

from test_conv_chunks import numba_threads  # noqa: E402
from xlaplug.backends.cpu import conv_wgrad  # noqa: E402
from xlaplug.backends.cpu.gang_gemm import gemm_library  # noqa: E402
from xlaplug.hlo.text.parser import parse_module  # noqa: E402
from xlaplug.runtime.executor import ExecContext  # noqa: E402

pytestmark = [pytest.mark.jax, pytest.mark.skipif(
    gemm_library() is None, reason="no ILP64 OpenBLAS of numpy's to call (x86-64 Linux)")]
RNG = np.random.default_rng(37)


def _grad(dn, stride, pad, rhs_dilation):
    """jax's weight-gradient convolution: activations x, output gradient g."""
    return lambda x, g: lax.conv_general_dilated(x, g, stride, pad, rhs_dilation=rhs_dilation,
                                                 dimension_numbers=dn)


D2 = ("CHWN", "IHWO", "HWNC")
# (function, activations shape, output gradient shape)
CASES = {
    "stride2_forward": (_grad(D2, (1, 1), ((0, 1), (0, 1)), (2, 2)), (16, 32, 32, 32),
                        (16, 16, 16, 64)),
    "same_padding": (_grad(D2, (1, 1), ((1, 1), (1, 1)), (1, 1)), (8, 20, 20, 48),
                     (8, 20, 20, 24)),
    "one_d": (_grad(("CHN", "IHO", "HNC"), (1,), ((2, 2),), (1,)), (4, 200, 40), (4, 200, 16)),
    "rgb_image": (_grad(D2, (1, 1), ((1, 1), (1, 1)), (1, 1)), (16, 32, 32, 3),
                  (16, 32, 32, 32)),
}


def _run(f, x, g):
    """The result on a fresh context, and whether conv_wgrad ran."""
    ran = []
    real = conv_wgrad.gradient

    def spy(*a):
        ran.append(True)
        return real(*a)
    conv_wgrad.gradient = spy
    try:
        module = parse_module(jax.jit(f).lower(x, g).as_text(dialect="hlo"))
        return np.asarray(ExecContext("cpu").run(module.entry, [x, g])), bool(ran)
    finally:
        conv_wgrad.gradient = real


@pytest.mark.parametrize("case", sorted(CASES))
def test_weight_gradients(case):
    f, xs, gs = CASES[case]
    x, g = RNG.standard_normal(xs).astype(np.float32), RNG.standard_normal(gs).astype(np.float32)
    with numba_threads(1):
        one, ran = _run(f, x, g)
    assert ran
    with numba_threads(2):
        two, _ = _run(f, x, g)
    np.testing.assert_array_equal(one, two)
    want = np.asarray(jax.jit(f)(x, g))
    np.testing.assert_allclose(one, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


def test_f64_weight_gradient():
    f, xs, gs = CASES["same_padding"]
    with jax.enable_x64(True):
        x, g = RNG.standard_normal(xs), RNG.standard_normal(gs)
        got, ran = _run(f, x, g)
        want = np.asarray(jax.jit(f)(x, g))
    assert ran and got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())


def test_many_outputs_keep_the_row_chunks():
    """B*P*O over WHERE_MOST: each chunk's partial would be a pass over all the outputs."""
    f = _grad(D2, (1, 1), ((1, 1), (1, 1)), (1, 1))
    x = RNG.standard_normal((4, 12, 12, 256)).astype(np.float32)
    g = RNG.standard_normal((4, 12, 12, 256)).astype(np.float32)
    assert 256 * 9 * 256 > conv_wgrad.WHERE_MOST
    got, ran = _run(f, x, g)
    assert not ran
    want = np.asarray(jax.jit(f)(x, g))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
