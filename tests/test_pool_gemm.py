"""Large products on numba's threads (backends/cpu/pool_gemm.py): one BLAS thread's bits at
any thread count, under each kind of OpenBLAS kernel this CPU can run (a product split by
columns: numpy's gemms of its column chunks); a run on one device
with RunOptions(blas_pool=True) computes its large products there with numpy's OpenBLAS on
one thread (its team never wakes); by default, and where devices run at once, it does not."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import xlaplug
from xlaplug.backends.cpu import linalg, pool_gemm
from xlaplug.backends.cpu.blas_threads import _numpy_blas
from xlaplug.runtime.options import RunOptions

pytestmark = pytest.mark.skipif(pool_gemm.gemm_library() is None,
                                reason="numpy's BLAS has no ILP64 cblas gemm to call here")

# (lhs shape, rhs shape, lhs transposed in memory): the MLP's layer, rows that end off a
# tile, a tall product, attention heads (one and two batch dimensions), a short wide one,
# and two with too few rows for two chunks (split by columns).
CASES = [((512, 1024), (1024, 1024), False), ((1000, 300), (300, 500), True),
         ((2048, 256), (256, 256), False), ((32, 128, 64), (32, 64, 128), True),
         ((2, 4, 200, 512), (2, 4, 512, 512), False), ((96, 2048), (2048, 2048), True),
         ((16, 2048), (2048, 4096), False), ((40, 1000), (1000, 3000), True)]

CHECK = """
import sys, numpy as np
from threadpoolctl import threadpool_limits
from xlaplug.backends.cpu import pool_gemm
from test_pool_gemm import CASES, operands
bad = []
for case in CASES:
    for dt in (np.float32, np.float64):
        lhs, rhs = operands(*case, dt)
        (m, k), n = lhs.shape[-2:], rhs.shape[-1]
        for threads in (2, 3, 8):
            parts = -(-threads // (lhs.size // (m * k)))
            cols = pool_gemm.col_starts(m, k, n, parts)
            by_cols = len(pool_gemm.row_starts(m, k, n, parts)) == 2 and len(cols) > 2
            with threadpool_limits(1):  # the whole product, or numpy's of each column chunk
                want = np.concatenate([lhs @ rhs[..., a:b] for a, b in zip(cols, cols[1:])],
                                      axis=-1) if by_cols else np.matmul(lhs, rhs)
            if not np.array_equal(pool_gemm.matmul(lhs, rhs, threads), want):
                bad.append((case, dt.__name__, threads))
print(bad)
sys.exit(1 if bad else 0)
"""


def operands(ls, rs, transposed, dt):
    rng = np.random.default_rng(0)
    lhs = rng.standard_normal(ls).astype(dt)
    if transposed:  # the same values, lying column by column (gemm's transposed form)
        lhs = np.ascontiguousarray(np.swapaxes(lhs, -1, -2)).swapaxes(-1, -2)
    return lhs, rng.standard_normal(rs).astype(dt)


def _cpu_flags() -> set:
    try:
        with open("/proc/cpuinfo") as f:
            return next((set(ln.split(":")[1].split()) for ln in f if ln.startswith("flags")),
                        set())
    except OSError:
        return set()


# OpenBLAS's kernel families by the instructions they need (a forced core type this CPU
# lacks dies of SIGILL).
CORETYPES = {"Haswell": {"avx2", "fma"}, "Zen": {"avx2", "fma"},
             "SkylakeX": {"avx512f", "avx512bw", "avx512dq", "avx512vl"}}


@pytest.mark.parametrize("coretype", sorted(CORETYPES))
def test_pooled_products_have_one_blas_threads_bits(coretype):
    if not CORETYPES[coretype] <= _cpu_flags():
        pytest.skip(f"this CPU cannot run OpenBLAS's {coretype} kernels")
    env = dict(os.environ, OPENBLAS_CORETYPE=coretype,
               PYTHONPATH=os.pathsep.join([os.path.dirname(__file__)] + sys.path))
    p = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, env=env,
                       timeout=300)
    assert p.returncode == 0, (p.stdout, p.stderr[-2000:])


def test_rows_and_columns_split_at_tiles_with_enough_work_each():
    for m, k, n, parts in [(512, 1024, 1024, 2), (1000, 300, 500, 13), (96, 2048, 2048, 8),
                           (47, 4096, 4096, 4), (5000, 64, 64, 13), (16, 2048, 4096, 13)]:
        for starts, tile, other in [(pool_gemm.row_starts(m, k, n, parts), pool_gemm.TILE_ROWS,
                                     n),
                                    (pool_gemm.col_starts(m, k, n, parts), pool_gemm.COL_TILE,
                                     m)]:
            assert starts[0] == 0 and len(starts) - 1 <= parts
            assert all(s % tile == 0 for s in starts[:-1])
            if len(starts) > 2:
                assert all((b - a) * k * other >= pool_gemm.MIN_MNK
                           for a, b in zip(starts, starts[1:]))
    assert len(pool_gemm.row_starts(16, 2048, 4096, 13)) == 2  # too few rows: columns
    assert len(pool_gemm.col_starts(16, 2048, 4096, 13)) == 14


def test_a_matrix_times_its_own_transpose_is_numpys_syrk():
    x = np.random.default_rng(1).standard_normal((512, 1024)).astype(np.float32)
    np.testing.assert_array_equal(pool_gemm.matmul(x, x.T, 2), x @ x.T)


def _mlp(n: int) -> str:
    return (f"HloModule mlp\n\nENTRY e {{\n  x = f32[{n},{n}] parameter(0)\n"
            f"  w = f32[{n},{n}] parameter(1)\n"
            f"  d = f32[{n},{n}] dot(x, w), lhs_contracting_dims={{1}}, "
            "rhs_contracting_dims={0}\n"
            f"  ROOT t = f32[{n},{n}] tanh(d)\n}}\n")


def test_a_run_pools_its_large_products_with_openblas_on_one_thread(monkeypatch):
    seen = []
    real = linalg.pooled_matmul

    def spy(lhs, rhs, threads):
        seen.append((threads, _numpy_blas().num_threads))
        return real(lhs, rhs, threads)

    monkeypatch.setattr(linalg, "pooled_matmul", spy)
    rng = np.random.default_rng(2)
    x, w = (rng.standard_normal((512, 512)).astype(np.float32) / 16 for _ in range(2))
    exe = xlaplug.compile(_mlp(512))
    got = exe.run(x, w, options=RunOptions(blas_threads=2, blas_pool=True)).outputs[0]
    assert seen and all(s == (2, 1) for s in seen), seen
    seen.clear()
    one = exe.run(x, w, options=RunOptions(blas_threads=1, blas_pool=True)).outputs[0]
    assert seen == []  # one thread: numpy's own product
    np.testing.assert_array_equal(got, one)  # and the same bits
    exe.run(x, w, options=RunOptions(blas_threads=2))
    assert seen == []  # not asked for: OpenBLAS's own threads


def test_devices_that_run_at_once_do_not_pool(monkeypatch):
    calls = []
    monkeypatch.setattr(linalg, "pooled_matmul",
                        lambda *a: calls.append(a) or pool_gemm.matmul(*a))
    text = _mlp(512).replace("HloModule mlp", "HloModule mlp, replica_count=2")
    x = np.ones((512, 512), np.float32) / 512
    exe = xlaplug.compile(text)
    outs = exe.run(x, x, options=RunOptions(blas_threads=2, blas_pool=True)).outputs
    assert calls == []
    with threadpool_limits(1):
        want = np.tanh(x @ x)
    np.testing.assert_allclose(np.asarray(outs[0]), np.stack([want, want]), rtol=1e-6)


def test_a_pooled_product_flushes_subnormals_throughout_as_xla_does():
    """Products of 1e-20s are subnormal; XLA:CPU's dot flushes them to 0.  OpenBLAS's workers
    kept IEEE arithmetic (denormals.py), so a product on its team flushed only the calling
    thread's share; each pooled gemm runs under the bits."""
    import jax
    x = np.full((512, 512), 1e-20, np.float32)
    want = np.asarray(jax.jit(lambda a, b: a @ b)(x, x))
    exe = xlaplug.compile(_mlp(512).replace("ROOT t = f32[512,512] tanh(d)",
                                            "ROOT t = f32[512,512] negate(d)"))
    got = exe.run(x, x, options=RunOptions(blas_threads=2, blas_pool=True)).outputs[0]
    np.testing.assert_array_equal(got, -want)
    assert not want.any()


def test_a_grouped_convolutions_products_pool_with_one_threads_bits(monkeypatch):
    """The convolutions numpy multiplies whole (here grouped: no chunks of its own) pool
    their products too, with the bits of one thread, and XLA's values."""
    import jax
    from jax import lax
    from xlaplug.backends.cpu import convolution
    seen = []
    real = convolution.pooled_matmul
    monkeypatch.setattr(convolution, "pooled_matmul",
                        lambda a, b, t: seen.append(t) or real(a, b, t))

    def f(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), "SAME", feature_group_count=2,
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))

    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 32, 32, 64)).astype(np.float32)
    w = rng.standard_normal((3, 3, 32, 64)).astype(np.float32) / 17
    exe = xlaplug.compile(jax.jit(f).lower(x, w).as_text(dialect="hlo"))
    got = exe.run(x, w, options=RunOptions(blas_threads=2, blas_pool=True)).outputs[0]
    assert seen == [2]
    one = exe.run(x, w, options=RunOptions(blas_threads=1, blas_pool=True)).outputs[0]
    np.testing.assert_array_equal(got, one)
    np.testing.assert_allclose(got, np.asarray(jax.jit(f)(x, w)), rtol=2e-5, atol=2e-5)
