"""An input-dilated convolution by output phases (backends/cpu/conv_phases.py): the phases'
chunks on numba's threads give the bits of one numpy product per phase, at one thread or
two, and XLA's values; the convolutions that thread themselves stay out of the run's BLAS
count (blas_threads.largest_product), the others do not."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
from jax import lax  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from test_conv_chunks import numba_threads  # noqa: E402
from xlaplug.backends.cpu import blas_threads, conv_phases  # noqa: E402
from xlaplug.backends.cpu.gang_gemm import gemm_library  # noqa: E402
from xlaplug.hlo.text.parser import parse_module  # noqa: E402
from xlaplug.runtime.executor import ExecContext  # noqa: E402

pytestmark = pytest.mark.jax
needs_gemm = pytest.mark.skipif(gemm_library() is None,
                                reason="no ILP64 OpenBLAS of numpy's to call (x86-64 Linux)")
RNG = np.random.default_rng(29)

# (input shape, kernel shape, strides, padding, lhs dilation, dimension numbers)
CASES = {
    # the input gradient of a stride-2 3x3 convolution, as jax lowers it (phases of 4, 2, 2
    # and 1 taps)
    "stride2_gradient": ((16, 16, 16, 64), (3, 3, 32, 64), (1, 1), ((2, 1), (2, 1)), (2, 2),
                         ("NHWC", "HWOI", "NHWC")),
    # one dimension dilated by 3 (a phase with no taps at pad 0), the other strided
    "mixed": ((4, 15, 40, 8), (2, 3, 6, 8), (1, 2), ((0, 2), (1, 1)), (3, 1),
              ("NHWC", "HWOI", "NHWC")),
    "one_d": ((3, 300, 8), (5, 4, 8), (1,), ((3, 2),), (2,), ("NHC", "HOI", "NHC")),
    "nchw": ((2, 24, 20, 18), (16, 24, 4, 4), (1, 1), ((3, 3), (3, 3)), (2, 2),
             ("NCHW", "OIHW", "NCHW")),
}


def _conv(case):
    _, _, st, pad, ld, dn = CASES[case]
    return lambda x, w: lax.conv_general_dilated(x, w, st, pad, lhs_dilation=ld,
                                                 dimension_numbers=dn)


def _run(module, args, chunked: bool, monkeypatch):
    """The result on a fresh context, the phases' chunked path allowed or not, and whether
    it ran."""
    ran = []
    with monkeypatch.context() as m:
        real = conv_phases.chunked

        def spy(*a):
            y = real(*a) if chunked else None
            ran.append(y is not None)
            return y
        m.setattr(conv_phases, "chunked", spy)
        got = np.asarray(ExecContext("cpu").run(module.entry, list(args)))
    return got, any(ran)


@needs_gemm
@pytest.mark.parametrize("case", sorted(CASES))
def test_phase_chunks_give_each_phases_product_bits(case, monkeypatch):
    xs, ws = CASES[case][:2]
    x, w = RNG.standard_normal(xs).astype(np.float32), RNG.standard_normal(ws).astype(np.float32)
    f = _conv(case)
    module = parse_module(jax.jit(f).lower(x, w).as_text(dialect="hlo"))
    with threadpool_limits(1):
        whole, ran = _run(module, (x, w), False, monkeypatch)  # one numpy product a phase
    assert not ran
    for threads in (1, 2):
        with numba_threads(threads):
            got, ran = _run(module, (x, w), True, monkeypatch)
        assert ran, "the phases' chunks did not run"
        np.testing.assert_array_equal(got, whole)
    want = np.asarray(jax.jit(f)(x, w))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@needs_gemm
def test_f64_phases(monkeypatch):
    with jax.enable_x64(True):  # scoped: other files in this worker set the flag globally
        xs, ws = CASES["stride2_gradient"][:2]
        x, w = RNG.standard_normal(xs), RNG.standard_normal(ws)
        f = _conv("stride2_gradient")
        module = parse_module(jax.jit(f).lower(x, w).as_text(dialect="hlo"))
        want = np.asarray(jax.jit(f)(x, w))
    got, ran = _run(module, (x, w), True, monkeypatch)
    assert ran and got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())


def _module(conv: str):
    return parse_module(f"""HloModule m
ENTRY e {{
  {conv}
}}""")


@needs_gemm
def test_self_threaded_convolutions_leave_the_blas_count():
    """A chunked forward convolution and a phases one are not the BLAS count's; a 3-D, a
    grouped and a small one (one chunk: numpy's product on the run's BLAS threads) are."""
    own = [
        "x = f32[16,32,32,32] parameter(0)\n  w = f32[3,3,32,64] parameter(1)\n  ROOT c = "
        "f32[16,16,16,64] convolution(x, w), window={size=3x3 stride=2x2 pad=0_1x0_1}, "
        "dim_labels=b01f_01io->b01f",
        "x = f32[16,16,16,64] parameter(0)\n  w = f32[3,3,32,64] parameter(1)\n  ROOT c = "
        "f32[16,32,32,32] convolution(x, w), window={size=3x3 pad=2_1x2_1 lhs_dilate=2x2}, "
        "dim_labels=b01f_01oi->b01f",
    ]
    counted = [
        "x = f32[2,8,8,8,16] parameter(0)\n  w = f32[3,3,3,16,32] parameter(1)\n  ROOT c = "
        "f32[2,8,8,8,32] convolution(x, w), window={size=3x3x3 pad=1_1x1_1x1_1}, "
        "dim_labels=b012f_012io->b012f",
        "x = f32[16,32,32,64] parameter(0)\n  w = f32[3,3,32,64] parameter(1)\n  ROOT c = "
        "f32[16,32,32,64] convolution(x, w), window={size=3x3 pad=1_1x1_1}, "
        "dim_labels=b01f_01io->b01f, feature_group_count=2",
        "x = f32[16,32,32,3] parameter(0)\n  w = f32[3,3,3,32] parameter(1)\n  ROOT c = "
        "f32[16,32,32,32] convolution(x, w), window={size=3x3 pad=1_1x1_1}, "
        "dim_labels=b01f_01io->b01f",
    ]
    for text in own:
        m = _module(text)
        assert conv_phases.threads_itself(m.entry.root)
        assert blas_threads.largest_product(m) == 1  # one BLAS thread, not left alone
        assert blas_threads.run_threads(1, None) == 1
    for text in counted:
        m = _module(text)
        assert not conv_phases.threads_itself(m.entry.root)
        assert blas_threads.largest_product(m) == blas_threads.product_flops(m.entry.root)[1]
