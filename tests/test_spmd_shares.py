"""The in-process all-reduce's division of work (shares.py), the rendezvous's two-step
meeting, kept device threads and device fibers: our own logic, checked against the whole-buffer reduction
(the collectives themselves are checked against XLA in test_spmd_collectives.py)."""
from __future__ import annotations

import threading

import ml_dtypes
import numpy as np
import pytest

from xlaplug.runtime.spmd.device_fibers import DeviceFibers
from xlaplug.runtime.spmd.device_threads import DeviceThreads
from xlaplug.backends.spmd.reducers import reduce_values, ufunc_combiner
from xlaplug.backends.spmd.rendezvous import Aborted, CollectiveTimeout, Rendezvous
from xlaplug.backends.spmd.buffers import BufferPool
from xlaplug.backends.spmd.shares import chunk, reduce_my_chunk


class _Ins:
    opcode, name = "all-reduce", "r"


def test_chunks_cover_the_buffer_as_xla_cuts_it():
    # ceil(5 / 4) = 2 elements each: the last rank gets nothing.
    assert [chunk(5, 4, r) for r in range(4)] == [slice(0, 2), slice(2, 4), slice(4, 5),
                                                  slice(5, 5)]
    for count, n in [(0, 3), (1, 4), (7, 2), (65541, 4)]:
        covered = np.concatenate([np.arange(count)[chunk(count, n, r)] for r in range(n)])
        assert covered.tolist() == list(range(count))


@pytest.mark.parametrize("dtype, et, uf", [
    (np.float32, "f32", np.add), (np.float16, "f16", np.add), (np.int32, "s32", np.maximum),
    (ml_dtypes.bfloat16, "bf16", np.add), (np.bool_, "pred", np.logical_or)])
def test_every_rank_reducing_its_chunk_gives_the_whole_reduction(dtype, et, uf):
    n, rng = 3, np.random.default_rng(0)
    inputs = [[(rng.standard_normal((7, 3)) * 50).astype(dtype)] for _ in range(n)]
    combine = ufunc_combiner(uf, et)
    every = [(x, [np.empty_like(v) for v in x]) for x in inputs]
    for rank in range(n):
        reduce_my_chunk(every, rank, combine, reduce_values)
    want = reduce_values([x[0] for x in inputs], combine, np.dtype(dtype))
    for _, (out,) in every:
        assert out.dtype == want.dtype and out.tobytes() == want.tobytes()


def test_a_group_of_one_gets_its_own_values():
    x = [np.arange(10, dtype=np.float32)]
    every = [(x, [np.empty_like(x[0])])]
    reduce_my_chunk(every, 0, ufunc_combiner(np.add, "f32"), reduce_values)
    assert every[0][1][0].tobytes() == x[0].tobytes()


def _on_threads(n, fn):
    errors = {}

    def run(d):
        try:
            fn(d)
        except BaseException as e:  # noqa: BLE001 - checked by the caller
            errors[d] = e
    threads = [threading.Thread(target=run, args=(d,)) for d in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return errors


def test_share_returns_only_when_every_share_is_done():
    r = Rendezvous(3, timeout=10)
    done = []

    def device(d):
        r.share(d, _Ins, (0, 1, 2), d, lambda every: done.append(d))
        assert len(done) == 3  # nobody leaves before all three did their work
    assert _on_threads(3, device) == {}


def test_a_failed_share_stops_the_others():
    r = Rendezvous(2, timeout=10)

    def device(d):
        def work(every):
            if d == 1:
                raise ValueError("boom")
        try:
            r.share(d, _Ins, (0, 1), d, work)
        except ValueError as e:
            r.abort(d, e)
            raise
    errors = _on_threads(2, device)
    assert isinstance(errors[1], ValueError) and isinstance(errors[0], Aborted)


def test_a_missing_member_times_out_naming_it():
    r = Rendezvous(2, timeout=0.2)
    errors = _on_threads(1, lambda d: r.share(d, _Ins, (0, 1), d, lambda every: None))
    assert isinstance(errors[0], CollectiveTimeout)
    assert "device 1 did not arrive within 0.2 s" in str(errors[0])


def test_kept_threads_run_many_jobs_and_report_errors():
    seen = []
    with DeviceThreads(3) as threads:
        for k in range(3):
            threads.run(lambda d, k=k: seen.append((k, d)))

        def failing(d):
            if d == 2:
                raise KeyError("x")
        with pytest.raises(KeyError):
            threads.run(failing)
        threads.run(lambda d: seen.append(("after", d)))
    assert sorted(seen[:9]) == [(k, d) for k in range(3) for d in range(3)]
    assert sorted(x[1] for x in seen[9:]) == [0, 1, 2]
    with pytest.raises(RuntimeError):
        threads.run(lambda d: None)


def test_pooled_buffers_are_reused_only_when_no_value_refers_to_them():
    pool = BufferPool()
    a = pool.take(np.float32, 1 << 20)
    assert a.ctypes.data % 4096 == 0
    kept = a[3:9].reshape(2, 3)  # a result's view keeps the buffer busy
    del a
    b = pool.take(np.float32, 1 << 20)
    assert not np.shares_memory(b, kept)
    del b, kept
    c = pool.take(np.float32, 1 << 20)
    assert any(c.base is owner for owner, _ in pool._owners[(np.dtype(np.float32), 1 << 20)])
    assert pool.take(np.float32, 1 << 22).ctypes.data % (2 << 20) == 0
    shaped = pool.like([np.zeros((3, 70000), np.int32)])[0]
    assert shaped.shape == (3, 70000) and shaped.dtype == np.int32


# ---- devices as fibers (device_fibers.py) --------------------------------------------------

def _on(kind: str, n: int):
    if kind == "threads":
        return DeviceThreads(n)
    return DeviceFibers(n, threads=2 if kind == "fibers on 2 threads" else 1)


@pytest.mark.parametrize("kind", ["threads", "fibers", "fibers on 2 threads"])
def test_the_last_to_arrive_does_the_work_once_before_anyone_leaves(kind):
    calls = []
    with _on(kind, 4) as devices:
        for run in range(3):  # kept threads or fibers, run after run
            r = Rendezvous(4, timeout=10, fibers=None if kind == "threads" else devices)
            seen = {}

            def device(d):
                every = r.share_by_last(d, _Ins, (0, 1, 2, 3), d * 10,
                                        lambda every: calls.append(list(every)))
                seen[d] = (every, len(calls))
            devices.run(device)
            assert seen == {d: ([0, 10, 20, 30], run + 1) for d in range(4)}
    assert calls == [[0, 10, 20, 30]] * 3


@pytest.mark.parametrize("kind", ["threads", "fibers", "fibers on 2 threads"])
def test_a_failed_share_by_last_stops_the_others(kind):
    with _on(kind, 3) as devices:
        r = Rendezvous(3, timeout=10, fibers=None if kind == "threads" else devices)
        errors = {}

        def work(every):
            raise ValueError("boom")

        def device(d):
            try:
                r.share_by_last(d, _Ins, (0, 1, 2), d, work)
            except BaseException as e:  # noqa: BLE001 - checked below
                errors[d] = e
                r.abort(d, e)
        devices.run(device)
    assert sorted(type(e).__name__ for e in errors.values()) == ["Aborted", "Aborted",
                                                                  "ValueError"]


def test_fibers_that_wait_for_each_other_end_at_once_naming_who_did_not_come():
    class Other:
        opcode, name = "all-gather", "g"
    fibers = DeviceFibers(2)
    r = Rendezvous(2, timeout=3600, fibers=fibers)  # no clock: the stall is seen at once
    errors = {}

    def device(d):
        try:  # device 0 waits at 'r', device 1 at 'g': neither meeting can complete
            r.exchange(d, _Ins if d == 0 else Other, (0, 1), d)
        except BaseException as e:  # noqa: BLE001 - checked below
            errors[d] = e
            r.abort(d, e)
    fibers.run(device)
    first = next(e for e in errors.values() if isinstance(e, CollectiveTimeout))
    assert "cannot arrive (every device waits at a collective)" in str(first)
    assert "waiting at all-gather 'g'" in str(first) or "waiting at all-reduce 'r'" in str(first)
    assert sum(isinstance(e, Aborted) for e in errors.values()) == 1
    fibers.close()


def test_fibers_belong_to_the_thread_that_runs_them():
    fibers, seen = DeviceFibers(3), []
    fibers.run(lambda d: seen.append(("main", d)))
    t = threading.Thread(target=lambda: fibers.run(lambda d: seen.append(("other", d))))
    t.start()
    t.join(30)
    fibers.run(lambda d: seen.append(("again", d)))
    assert sorted(seen) == sorted((w, d) for w in ("main", "other", "again") for d in range(3))
    fibers.close()


def test_small_modules_run_as_fibers_large_ones_as_threads():
    from xlaplug.runtime.spmd.runner import FIBERS_BELOW_BYTES, devices_for
    from xlaplug.hlo.text.parser import parse_module
    text = "HloModule m\nENTRY e {{\n  p = f32[{n}] parameter(0)\n  ROOT r = f32[{n}] negate(p)\n}}\n"
    small = parse_module(text.format(n=FIBERS_BELOW_BYTES // 4 - 1))
    large = parse_module(text.format(n=FIBERS_BELOW_BYTES // 4))
    with devices_for(small, 2) as a, devices_for(large, 2) as b:
        assert isinstance(a, DeviceFibers) and isinstance(b, DeviceThreads)
