"""BLAS threads are set once per run, from RunOptions or the module's largest product, and
restored after it -- never flipped per product (issue 21, item 8).  The policy is our own
logic (backends/cpu/blas_threads.py), so its expectations are hand-written; that products
give XLA's values is test_linalg.py's business."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

import xlaplug
from xlaplug.backends.cpu import blas_threads as B
from xlaplug.runtime.options import RunOptions
from xlaplug.runtime.spmd import runner


class _Lib:
    """A BLAS library's controller as threadpoolctl gives it, recording every count set."""
    filepath = "libfake_openblas.so"

    def __init__(self, n: int):
        self.num_threads = n
        self.calls: list[int] = []

    def set_num_threads(self, n: int) -> None:
        self.calls.append(n)
        self.num_threads = n


@pytest.fixture
def lib(monkeypatch):
    """One fake library of 8 threads on an 8-core machine, in place of the real ones."""
    fake = _Lib(8)
    monkeypatch.setattr(B, "blas_libraries", lambda: ((fake, 8),))
    monkeypatch.setattr(B, "cores", lambda: 8, raising=False)
    monkeypatch.setattr(runner, "_cores", lambda: 8)
    monkeypatch.setattr(B, "busy_elsewhere", lambda: 0)  # a quiet machine
    return fake


def _dots(n: int, count: int, replicas: int = 1) -> str:
    """`count` chained n x n x n f32 dots."""
    lines = [f"HloModule dots, replica_count={replicas}", "ENTRY e {",
             f"  x0 = f32[{n},{n}] parameter(0)", f"  w = f32[{n},{n}] parameter(1)"]
    for k in range(1, count + 1):
        root = "ROOT " if k == count else ""
        lines.append(f"  {root}x{k} = f32[{n},{n}] dot(x{k - 1}, w), "
                     "lhs_contracting_dims={1}, rhs_contracting_dims={0}")
    return "\n".join(lines + ["}"])


def _args(n: int):
    rng = np.random.default_rng(0)
    return [rng.standard_normal((n, n)).astype(np.float32) / n for _ in range(2)]


def test_one_set_and_one_restore_per_run_whatever_the_number_of_products(lib):
    exe = xlaplug.compile(_dots(16, 5))      # five small products: one thread for the run
    a = _args(16)
    exe(*a)
    exe(*a)
    assert lib.calls == [1, 8, 1, 8]
    lib.calls.clear()
    exe.run(*a, repeat=3)
    assert lib.calls == [1, 8] * 3


def test_run_options_blas_threads_is_honoured_on_one_device(lib):
    exe = xlaplug.compile(_dots(16, 4))
    got = exe.run(*_args(16), options=RunOptions(blas_threads=3, repeat=2))
    assert lib.calls == [3, 8, 3, 8]
    np.testing.assert_array_equal(got.outputs[0], exe(*_args(16))[0])


def test_run_options_blas_threads_is_honoured_on_devices_in_one_process(lib):
    exe = xlaplug.compile(_dots(16, 3, replicas=4))
    exe.run(*_args(16), options=RunOptions(blas_threads=3, repeat=2))
    assert lib.calls == [3, 8, 3, 8]   # once per run for all four devices, not per product
    lib.calls.clear()
    exe.run(*_args(16))                # derived: small products, one thread
    assert lib.calls == [1, 8]


def test_a_large_product_takes_the_cores_divided_among_the_devices(lib):
    big = 2 * 512 ** 3                 # 2^28 flops: 16 threads' worth, 8 cores
    assert B.run_threads(big, None) == 8
    assert B.run_threads(big, None, sharing=4) == 2
    exe = xlaplug.compile(_dots(512, 2, replicas=4))
    exe.run(*_args(512))               # fibers on one thread per core (4): 8 // 4 each
    assert lib.calls == [2, 8]


def test_the_count_follows_the_largest_product_and_the_runs_own_wins():
    assert B.run_threads(0, None) is None                           # no product: left alone
    assert B.run_threads(2 * 128 * 128 * 64, None) == 1             # 2^21 flops: one thread
    assert B.run_threads(3 * B.FLOPS_PER_THREAD + 5, None, 1) == min(3, B.cores())
    assert B.run_threads(2 * 128 * 128 * 64, 5) == 5                # RunOptions wins
    assert B.run_threads(0, 2, sharing=4) == 2


def test_largest_product_is_one_gemm_of_a_batch():
    batched = xlaplug.compile("""HloModule b
ENTRY e {
  a = f32[4,32,64] parameter(0)
  b = f32[4,64,16] parameter(1)
  ROOT d = f32[4,32,16] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
}""", passes="none")
    assert B.largest_product(batched.module) == 2 * 32 * 16 * 64
    assert B.largest_product(xlaplug.compile(_dots(8, 1)).module) == 2 * 8 ** 3


def test_scipys_blas_is_controlled_once_loaded():
    """numba's np.dot (compiled while loops) runs on scipy's OpenBLAS, not numpy's."""
    import scipy.linalg.cython_blas  # noqa: F401 - what numba loads for np.dot
    from threadpoolctl import ThreadpoolController
    seen = {lib.filepath for lib in ThreadpoolController().select(user_api="blas").lib_controllers}
    assert {lib.filepath for lib, _ in B.blas_libraries()} == seen


def test_set_and_restore_report_what_changed():
    np.ones((2, 2)) @ np.ones((2, 2))  # numpy's BLAS is loaded
    libs = B.blas_libraries()
    if not libs:
        pytest.fail("threadpoolctl finds no BLAS library under numpy")
    before = [(lib, lib.num_threads) for lib, _ in libs]
    try:
        B.set_threads(None)
        changed = B.set_threads(1)
        assert all(lib.num_threads == 1 for lib, _ in libs)
        assert len(changed) == sum(most != 1 for _, most in libs)
        B.restore(changed)
        assert all(lib.num_threads == most for lib, most in libs)
    finally:
        B.restore(before)


def test_with_blas_yield_a_derived_count_yields_the_cores_other_processes_hold(lib,
                                                                              monkeypatch):
    busy = {"n": 6}
    monkeypatch.setattr(B, "busy_elsewhere", lambda: busy["n"])
    exe = xlaplug.compile(_dots(512, 2))
    exe.run(*_args(512))               # by default the count does not follow the load
    assert lib.calls == []             # (8, the library's own count: nothing to set)
    yielding = RunOptions(blas_yield=True)
    exe.run(*_args(512), options=yielding)  # 8 cores, 6 taken elsewhere: 2 threads
    busy["n"] = 0
    exe.run(*_args(512), options=yielding)  # quiet again: all 8, decided per run
    busy["n"] = 9
    exe.run(*_args(512), options=yielding)  # more busy than cores: still one
    assert lib.calls == [2, 8, 1, 8]
    lib.calls.clear()
    exe.run(*_args(512), options=RunOptions(blas_threads=5, blas_yield=True))
    assert lib.calls == [5, 8]         # RunOptions' count is the user's: never cut
    lib.calls.clear()
    busy["n"] = 4
    exe4 = xlaplug.compile(_dots(512, 2, replicas=4))
    exe4.run(*_args(512), options=yielding)  # (8 - 4) // 4 devices
    assert lib.calls == [1, 8]


def test_products_round_the_same_whatever_the_load_by_default(monkeypatch):
    """OpenBLAS's bits depend on its thread count, so the count a run takes by default is
    the module's, not the load's: a run with every core busy elsewhere gives the bits of a
    run on a quiet machine.  (With blas_yield it takes one thread there: other bits.)"""
    rng = np.random.default_rng(0)
    x, w = (rng.standard_normal((512, 512)).astype(np.float32) for _ in range(2))
    exe = xlaplug.compile(_dots(512, 2))
    monkeypatch.setattr(B, "busy_elsewhere", lambda: 0)
    quiet = exe.run(x, w).outputs[0]
    monkeypatch.setattr(B, "busy_elsewhere", lambda: 64)
    assert exe.run(x, w).outputs[0].tobytes() == quiet.tobytes()


def test_busy_elsewhere_counts_other_processes_runnable_threads_not_ours(tmp_path):
    (tmp_path / "loadavg").write_text("3.10 2.00 1.50 5/210 4242\n")
    for tid, state in ((11, "R"), (12, "S"), (13, "R")):
        (tmp_path / "task" / str(tid)).mkdir(parents=True)
        # a thread's name may hold spaces and parentheses: the state follows the last ")"
        (tmp_path / "task" / str(tid) / "stat").write_text(f"{tid} (numba (w) 1) {state} 1 2")
    assert B.busy_elsewhere(str(tmp_path / "loadavg"), str(tmp_path / "task")) == 3
    assert B.busy_elsewhere(str(tmp_path / "absent"), str(tmp_path / "task")) == 0
    (tmp_path / "loadavg").write_text("0.00 0.00 0.00 0/0 0\n")  # as gVisor reports it
    assert B.busy_elsewhere(str(tmp_path / "loadavg"), str(tmp_path / "absent")) == 0


@pytest.mark.skipif(not os.path.exists("/proc/loadavg"), reason="needs Linux's /proc")
def test_busy_elsewhere_sees_a_spinning_process():
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        seen = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(seen):
            seen.append(B.busy_elsewhere())
            time.sleep(0.01)
        assert any(seen), seen
    finally:
        spin.kill()
        spin.wait()
