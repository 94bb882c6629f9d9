"""The convolution's compiled patch gather and chunked product (backends/cpu/conv_chunks.py):
patch rows gathered and multiplied a chunk at a time on numba's threads, or gathered whole
for one numpy product, give the bits of the im2col product as numpy computes it (padded
input, a strided slice per tap, one matmul on one BLAS thread), the same bits at any thread
count, XLA's values (padding, strides, dilation, 1-D, f64), and XLA's flushed subnormals."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

jax = pytest.importorskip("jax")
from jax import lax  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from xlaplug.backends.cpu import conv_chunks, conv_wgrad  # noqa: E402
from xlaplug.backends.cpu.gang_gemm import gemm_library  # noqa: E402
from xlaplug.backends.cpu.transpose_copy import omatcopy_transposed  # noqa: E402
from xlaplug.hlo.text.parser import parse_module  # noqa: E402
from xlaplug.runtime.executor import ExecContext  # noqa: E402

pytestmark = pytest.mark.jax
# the chunks call numpy's own OpenBLAS (gang_gemm.py): x86-64 Linux with numpy's wheels
needs_gemm = pytest.mark.skipif(gemm_library() is None,
                                reason="no ILP64 OpenBLAS of numpy's to call (x86-64 Linux)")

RNG = np.random.default_rng(23)


@contextlib.contextmanager
def numba_threads(n: int):
    """numba's thread count (the chunks' threads) n inside, as it was after."""
    import numba
    before = numba.get_num_threads()
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    try:
        yield
    finally:
        numba.set_num_threads(before)


def _conv(dn, **kw):
    f = lambda x, w: lax.conv_general_dilated(x, w, dimension_numbers=dn, **kw)  # noqa: E731
    f.dn, f.kw = dn, kw
    return f


def _im2col(f, x, w):
    """f(x, w) as numpy's im2col product: x and w channels-last, x padded, a strided slice
    per tap into [N*P, KK*C], times w [KK*C, O] on one BLAS thread, the result put back in
    f's output layout."""
    dn, kw = f.dn, f.kw

    def order(spec, first, last):  # the permutation to [first, spatial..., last]
        return [spec.index(first)] + [i for i, a in enumerate(spec) if a not in first + last] \
            + [spec.index(a) for a in last]
    xl = np.ascontiguousarray(x.transpose(order(dn[0], "N", "C")))
    wl = np.ascontiguousarray(w.transpose(order(dn[1], "", "IO")[1:]))
    nsp = xl.ndim - 2
    stride = kw.get("window_strides", (1,) * nsp)
    dil = kw.get("rhs_dilation", (1,) * nsp)
    pad = kw["padding"]
    ksz = wl.shape[:nsp]
    if pad == "SAME":
        pad = [((k - 1) // 2, k // 2) for k in ksz]
    xp = np.pad(xl, [(0, 0)] + [(max(lo, 0), max(hi, 0)) for lo, hi in pad] + [(0, 0)])
    xp = xp[(slice(None),) + tuple(slice(max(-lo, 0), xp.shape[1 + d] - max(-hi, 0))
                                   for d, (lo, hi) in enumerate(pad))]  # negative: a crop
    out = [(xp.shape[1 + d] - (ksz[d] - 1) * dil[d] - 1) // stride[d] + 1 for d in range(nsp)]
    taps = []
    for off in np.ndindex(*ksz):
        taps.append(xp[(slice(None),) + tuple(
            slice(o * dl, o * dl + (n - 1) * s + 1, s)
            for o, dl, n, s in zip(off, dil, out, stride))])
    cols = np.stack(taps, axis=-2).reshape(-1, int(np.prod(ksz)) * xl.shape[-1])
    with threadpool_limits(1):
        y = cols @ wl.reshape(-1, wl.shape[-1])
    y = y.reshape((xl.shape[0],) + tuple(out) + (wl.shape[-1],))
    return np.ascontiguousarray(y.transpose(np.argsort(order(dn[2], "N", "C"))))


# (function, input shape, kernel shape): each has rows enough for several chunks
CASES = {
    "nchw_same": (_conv(("NCHW", "OIHW", "NCHW"), window_strides=(1, 1), padding="SAME"),
                  (2, 48, 30, 30), (64, 48, 3, 3)),
    "nhwc_stride2": (_conv(("NHWC", "HWIO", "NHWC"), window_strides=(2, 2),
                           padding=[(0, 1), (0, 1)]), (8, 32, 32, 32), (3, 3, 32, 64)),
    "three_channels": (_conv(("NHWC", "HWIO", "NHWC"), window_strides=(1, 1), padding="SAME"),
                       (40, 32, 32, 3), (3, 3, 3, 32)),
    "dilated_uneven_pad": (_conv(("NHWC", "HWIO", "NHWC"), window_strides=(1, 2),
                                 padding=[(2, 1), (0, 3)], rhs_dilation=(2, 1)),
                           (8, 30, 40, 24), (3, 2, 24, 48)),
    "one_d": (_conv(("NCH", "OIH", "NCH"), window_strides=(2,), padding=[(2, 1)]),
              (4, 32, 1500), (64, 32, 5)),
    # a strided convolution's weight gradient as jax lowers it (f01b_i01o->01bf): the
    # images are the contracted "channels", read through a transposed copy
    "weight_gradient": (_conv(("CHWN", "IHWO", "HWNC"), window_strides=(1, 1),
                              padding=[(0, 1), (0, 1)], rhs_dilation=(2, 2)),
                        (16, 32, 32, 32), (16, 16, 16, 64)),
}


def _module(f, x, w):
    return parse_module(jax.jit(f).lower(x, w).as_text(dialect="hlo"))


def _run(module, args, chunked: bool, monkeypatch) -> tuple[np.ndarray, bool]:
    """The result on a fresh context, with the chunked path allowed or not, and whether it
    ran (its buffers are the context's scratch)."""
    with monkeypatch.context() as m:
        m.setattr(conv_wgrad, "applies", lambda *a: False)  # its own test: test_conv_wgrad
        if not chunked:
            m.setattr(conv_chunks, "applies", lambda *a: False)
        ctx = ExecContext("cpu")
        got = np.asarray(ctx.run(module.entry, list(args)))
    ran = any(k[0] == "chunks" for k in ctx.kernel_cache.table("conv_patches"))
    return got, ran


@needs_gemm
@pytest.mark.parametrize("case", sorted(CASES))
def test_chunks_give_the_whole_products_bits(case, monkeypatch):
    f, xs, ws = CASES[case]
    x, w = RNG.standard_normal(xs).astype(np.float32), RNG.standard_normal(ws).astype(np.float32)
    module = _module(f, x, w)
    whole = _im2col(f, x, w)
    with threadpool_limits(1):
        got, ran = _run(module, (x, w), False, monkeypatch)  # gathered whole, one product
        assert not ran
        np.testing.assert_array_equal(got, whole)
        got, ran = _run(module, (x, w), True, monkeypatch)
    assert ran, "the chunked path did not run"
    np.testing.assert_array_equal(got, whole)
    with numba_threads(2):  # two threads, each its own chunks: the same bits
        np.testing.assert_array_equal(_run(module, (x, w), True, monkeypatch)[0], whole)
    with numba_threads(1):
        np.testing.assert_array_equal(_run(module, (x, w), True, monkeypatch)[0], whole)
    want = np.asarray(jax.jit(f)(x, w))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


SMALL = [
    (_conv(("NHWC", "HWIO", "NHWC"), window_strides=(2, 1), padding=[(3, 2), (0, 4)]),
     (2, 7, 5, 3), (3, 2, 3, 4)),
    (_conv(("NCHW", "OIHW", "NCHW"), window_strides=(1, 3), padding=[(1, 1), (2, 0)],
           rhs_dilation=(1, 2)), (3, 5, 9, 11), (6, 5, 2, 3)),
    (_conv(("NCH", "OIH", "NCH"), window_strides=(1,), padding=[(0, 2)]), (2, 4, 9), (3, 4, 4)),
    # negative padding: a crop
    (_conv(("NHWC", "HWIO", "NHWC"), window_strides=(1, 1), padding=[(-1, 2), (1, -2)]),
     (2, 8, 9, 3), (3, 3, 3, 4)),
    # channels side by side, the other axes in another order: read in place
    (_conv(("HNWC", "HWIO", "NHWC"), window_strides=(1, 2), padding=[(1, 1), (2, 1)]),
     (6, 3, 9, 4), (3, 3, 4, 5)),
    # a weight gradient's form: more taps than output positions
    (_conv(("NHWC", "HWIO", "NHWC"), window_strides=(1, 1), padding=[(1, 1), (1, 1)]),
     (3, 12, 12, 5), (11, 11, 5, 7)),
]


@pytest.mark.parametrize("case", range(len(SMALL)))
def test_small_products_gather_the_same_patches(case, monkeypatch):
    """Too few rows for two chunks: the patches gathered whole (padding as zeros, strides,
    kernel dilation, 1-D) and one product -- im2col's bits."""
    f, xs, ws = SMALL[case]
    x, w = RNG.standard_normal(xs).astype(np.float32), RNG.standard_normal(ws).astype(np.float32)
    with threadpool_limits(1):
        got, ran = _run(_module(f, x, w), (x, w), True, monkeypatch)
    assert not ran
    np.testing.assert_array_equal(got, _im2col(f, x, w))


@needs_gemm
def test_f64_and_kernel_reversal(monkeypatch):
    """f64 through dgemm; a kernel reversed by the window (an input gradient's form)."""
    with jax.enable_x64(True):  # scoped: other files in this worker set the flag globally
        f, xs, ws = CASES["nchw_same"]
        x, w = RNG.standard_normal(xs), RNG.standard_normal(ws)
        module = _module(f, x, w)
        want = np.asarray(jax.jit(f)(x, w))
    with threadpool_limits(1):
        got, ran = _run(module, (x, w), True, monkeypatch)
        whole, _ = _run(module, (x, w), False, monkeypatch)
    assert ran and got.dtype == np.float64
    np.testing.assert_array_equal(got, whole)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
    text = """HloModule m
ENTRY e {
  x = f32[4,24,20,20]{3,2,1,0} parameter(0)
  w = f32[3,3,24,64]{3,2,1,0} parameter(1)
  ROOT c = f32[4,20,20,64]{3,2,1,0} convolution(x, w), window={size=3x3 pad=1_1x1_1 rhs_reversal=1x1}, dim_labels=bf01_01io->b01f
}"""
    x, w = RNG.standard_normal((4, 24, 20, 20)).astype(np.float32), \
        RNG.standard_normal((3, 3, 24, 64)).astype(np.float32)
    got, ran = _run(parse_module(text), (x, w), True, monkeypatch)
    assert ran
    want = np.asarray(lax.conv_general_dilated(x, w[::-1, ::-1], (1, 1), [(1, 1), (1, 1)],
                                               dimension_numbers=("NCHW", "HWIO", "NHWC")))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@needs_gemm
def test_chunks_flush_subnormals_as_xla(monkeypatch):
    """Every chunk's gemm runs with FTZ and DAZ set, on whichever thread: subnormal
    inputs count as zeros, as in XLA:CPU's convolution (cpu/denormals.py)."""
    f, xs, ws = CASES["nhwc_stride2"]
    x = np.full(xs, 1e-39, np.float32)  # 288 such products add up to a normal ~1e-37
    x[:, :16] = RNG.standard_normal(x[:, :16].shape)  # output rows 8.. see subnormals only
    w = RNG.standard_normal(ws).astype(np.float32)
    module = _module(f, x, w)
    want = np.asarray(jax.jit(f)(x, w))
    for threads in (1, 2):
        with numba_threads(threads):
            got, ran = _run(module, (x, w), True, monkeypatch)
        assert ran
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
        # the rows whose patches hold only subnormals
        only = np.asarray(jax.jit(f)(np.where(np.abs(x) < 1e-30, x, 0), w))
        assert not np.any(only), "XLA kept subnormal products"
        mask = np.asarray(jax.jit(f)((np.abs(x) >= 1e-30).astype(np.float32), np.abs(w)))
        assert np.any(mask == 0) and np.all(got[mask == 0] == 0)


def test_chunk_count_leaves_small_products_whole():
    """A product under two chunks' worth of multiply-adds keeps the whole-matrix path; a
    chunk is never below MIN_MNK multiply-adds, nor starts off a TILE_ROWS boundary."""
    assert conv_chunks.chunk_count(200, 27, 32, 4) < 2
    for m, k, o in [(25088, 576, 64), (288, 4096, 64), (4096, 288, 64), (20000, 27, 1000)]:
        starts = conv_chunks.chunk_starts(m, k, o, 4)
        sizes = np.diff(starts)
        assert len(sizes) >= 2 and sizes.min() * k * o >= conv_chunks.MIN_MNK
        assert sizes.min() * k * 4 >= conv_chunks.BLOCK_BYTES or sizes.min() == 48
        assert all(s % conv_chunks.TILE_ROWS == 0 for s in starts[:-1]) and starts[-1] == m
    assert len(conv_chunks.chunk_starts(288, 4096, 64, 4)) == 7  # 6 chunks of 48 rows


@needs_gemm
def test_bf16_result_rounded_once(monkeypatch):
    """bf16 operands: products in f32, chunked, rounded once to bf16 -- the whole path's
    bits."""
    import ml_dtypes
    f, xs, ws = CASES["nchw_same"]
    x = RNG.standard_normal(xs).astype(ml_dtypes.bfloat16)
    w = RNG.standard_normal(ws).astype(ml_dtypes.bfloat16)
    module = _module(f, x, w)
    with threadpool_limits(1):
        got, ran = _run(module, (x, w), True, monkeypatch)
        whole, _ = _run(module, (x, w), False, monkeypatch)
    assert ran and got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got.view(np.uint16), whole.view(np.uint16))
    want = _im2col(f, x.astype(np.float32), w.astype(np.float32)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


@needs_gemm
def test_transposed_planes_are_numpys_transpose():
    """NCHW operands and results move by OpenBLAS's omatcopy: the very values of numpy's
    transpose, signed zeros, infinities and NaNs among them."""
    for dt in (np.float32, np.float64):
        src = RNG.standard_normal((3, 17, 40)).astype(dt)
        src[0, 0, :4] = [-0.0, np.inf, -np.inf, np.nan]
        got = omatcopy_transposed(src)
        want = np.ascontiguousarray(src.transpose(0, 2, 1))
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
        into = np.empty_like(want)
        assert omatcopy_transposed(src, into) is into
        np.testing.assert_array_equal(into.view(np.uint8), want.view(np.uint8))
