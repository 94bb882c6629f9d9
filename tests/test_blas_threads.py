"""The BLAS thread policy (backends/cpu/blas_threads.py): our own logic, so the expectations
are hand-written; that products give XLA's values is test_linalg.py's business."""
from __future__ import annotations

import numpy as np
import pytest

from xlaplug.backends.cpu import blas_threads as B


class _Ctx:
    spmd = None
    blas_threads = None


class _Place:
    def __init__(self, parallel):
        self.transport = type("T", (), {"parallel": parallel})()


@pytest.fixture
def libs():
    np.ones((2, 2)) @ np.ones((2, 2))  # numpy's BLAS is loaded
    libs = B.blas_libraries()
    if not libs:
        pytest.fail("threadpoolctl finds no BLAS library under numpy")
    before = [(lib, lib.num_threads) for lib, _ in libs]
    yield libs
    B.restore(before)


def _counts(libs):
    return [lib.num_threads for lib, _ in libs]


def test_threads_follow_the_products_work_and_a_runs_own_count_wins():
    ctx = _Ctx()
    assert B.threads_for(2 * 128 * 128 * 64, ctx) == 1         # 2^21 flops: one thread
    assert B.threads_for(3 * B.FLOPS_PER_THREAD + 5, ctx) == 3  # one per FLOPS_PER_THREAD
    assert B.threads_for(2 * 4096 * 4096 * 2048, ctx) == 4096   # set_threads caps it
    ctx.blas_threads = 2                                         # RunOptions(blas_threads=2)
    assert B.threads_for(2 * 128 * 128 * 64, ctx) == 2
    assert B.threads_for(2 * 4096 * 4096 * 2048, ctx) == 2


def test_small_products_run_on_one_thread_large_ones_on_the_librarys_own(libs):
    ctx = _Ctx()
    B.set_threads(None)
    with B.for_product(ctx, 128, 128, 64):  # 2 * 128 * 128 * 64 = 2^21 flops
        assert _counts(libs) == [1] * len(libs)
    assert _counts(libs) == [most for _, most in libs]  # as it was, for the process's numpy
    B.set_threads(1)
    with B.for_product(ctx, 4096, 4096, 2048):  # 2^36 flops
        assert _counts(libs) == [most for _, most in libs]
    assert _counts(libs) == [1] * len(libs)


def test_devices_on_threads_keep_the_runners_division(libs):
    ctx = _Ctx()
    B.set_threads(1)
    ctx.spmd = _Place(parallel=True)   # several device threads call BLAS at once
    with B.for_product(ctx, 4096, 4096, 2048):
        assert _counts(libs) == [1] * len(libs)
    ctx.spmd = _Place(parallel=False)  # devices as fibers: one call at a time
    with B.for_product(ctx, 4096, 4096, 2048):
        assert _counts(libs) == [most for _, most in libs]


def test_set_and_restore_report_what_changed(libs):
    B.set_threads(None)
    changed = B.set_threads(1)
    assert all(lib.num_threads == 1 for lib, _ in libs)
    assert len(changed) == sum(most != 1 for _, most in libs)
    B.restore(changed)
    assert all(lib.num_threads == most for lib, most in libs)
