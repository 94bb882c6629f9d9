"""Device fibers spread over several threads (device_fibers.py with threads > 1) and the
runner's choice between threads, fibers and fibers on one thread per core
(runner.devices_for): our own scheduling logic, with hand-computed expectations (the
collectives' values on such fibers are checked against XLA in test_spmd_collectives.py)."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from xlaplug.runtime.spmd import runner
from xlaplug.runtime.spmd.device_fibers import DeviceFibers
from xlaplug.runtime.spmd.device_threads import DeviceThreads
from xlaplug.backends.spmd.rendezvous import Aborted, CollectiveTimeout, Rendezvous
from xlaplug.hlo.text.parser import parse_module


class _Ins:
    opcode, name = "all-reduce", "r"


class _Other:
    opcode, name = "all-gather", "g"


def test_devices_go_to_threads_in_blocks():
    with DeviceFibers(5, threads=2) as fibers:
        assert [fibers.devices_of(s) for s in (0, 1)] == [[0, 1, 2], [3, 4]]
        assert fibers.parallel and not DeviceFibers(5).parallel
    with pytest.raises(ValueError):
        DeviceFibers(2, threads=3)


def test_each_block_runs_on_its_own_thread_the_first_on_the_caller():
    seen: dict[int, list] = {}
    with DeviceFibers(4, threads=2) as fibers:
        for _ in range(3):  # kept threads and greenlets, run after run
            fibers.run(lambda d: seen.setdefault(d, []).append(threading.get_ident()))
    me = threading.get_ident()
    assert all(len(set(v)) == 1 and len(v) == 3 for v in seen.values())
    assert seen[0][0] == seen[1][0] == me
    assert seen[2][0] == seen[3][0] != me


def test_a_meeting_across_threads_reduces_once_and_every_device_gets_it():
    calls = []
    with DeviceFibers(4, threads=2) as fibers:
        for run in range(3):
            r = Rendezvous(4, timeout=10, fibers=fibers)
            assert r.parallel
            got = {}

            def device(d):
                every = r.share_by_last(d, _Ins, (0, 1, 2, 3), d + 1,
                                        lambda every: calls.append(sum(every)))
                got[d] = r.exchange(d, _Other, (0, 1, 2, 3), every[d] * 10)
            fibers.run(device)
            assert got == {d: [10, 20, 30, 40] for d in range(4)}
    assert calls == [10] * 3


def test_fibers_on_threads_that_wait_for_each_other_end_at_once():
    # device 0 (thread 0) waits at 'r', device 1 (thread 1) at 'g': no meeting can complete,
    # which the schedulers see together at once, long before the hour's timeout.
    errors = {}
    with DeviceFibers(2, threads=2) as fibers:
        r = Rendezvous(2, timeout=3600, fibers=fibers)

        def device(d):
            try:
                r.exchange(d, _Ins if d == 0 else _Other, (0, 1), d)
            except BaseException as e:  # noqa: BLE001 - checked below
                errors[d] = e
                r.abort(d, e)
        t0 = time.monotonic()
        fibers.run(device)
    assert time.monotonic() - t0 < 60
    first = next(e for e in errors.values() if isinstance(e, CollectiveTimeout))
    assert "cannot arrive (every device waits at a collective)" in str(first)
    assert sum(isinstance(e, Aborted) for e in errors.values()) == 1


def test_a_device_stuck_on_another_thread_times_the_wait_out():
    # Device 1 (thread 1) computes past the timeout: no stall (it is not waiting), so device
    # 0's wait ends by its clock, naming device 1 as still running.
    errors = {}
    with DeviceFibers(2, threads=2) as fibers:
        r = Rendezvous(2, timeout=0.2, fibers=fibers)

        def device(d):
            try:
                if d == 1:
                    time.sleep(1.0)
                    return
                r.exchange(d, _Ins, (0, 1), d)
            except BaseException as e:  # noqa: BLE001 - checked below
                errors[d] = e
                r.abort(d, e)
        fibers.run(device)
    assert list(errors) == [0] and isinstance(errors[0], CollectiveTimeout)
    assert "did not arrive within 0.2 s" in str(errors[0])
    assert "device 1 running" in str(errors[0])


_DOT = """HloModule m
ENTRY e {{
  a = f32[{m},{k}] parameter(0)
  b = f32[{k},{n}] parameter(1)
  ROOT d = f32[{m},{n}] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
"""


def test_flops_count_dots_and_convolutions():
    assert runner.dot_flops(parse_module(_DOT.format(m=3, k=5, n=7))) == 2 * 3 * 5 * 7
    conv = parse_module("""HloModule m
ENTRY e {
  x = f32[2,3,8,8] parameter(0)
  w = f32[4,3,3,3] parameter(1)
  ROOT c = f32[2,4,6,6] convolution(x, w), window={size=3x3}, dim_labels=bf01_oi01->bf01
}
""")
    assert runner.dot_flops(conv) == 2 * (2 * 4 * 6 * 6) * (3 * 3 * 3)


def test_compute_heavy_small_modules_get_one_thread_per_core(monkeypatch):
    monkeypatch.setattr(runner, "_cores", lambda: 2)
    heavy = parse_module(_DOT.format(m=256, k=256, n=256))  # 2^25 flops
    light = parse_module(_DOT.format(m=8, k=8, n=8))
    large = parse_module(_DOT.format(m=2048, k=8, n=1024))  # an 8 MiB result
    with runner.devices_for(heavy, 4) as a, runner.devices_for(light, 4) as b, \
            runner.devices_for(large, 4) as c, runner.devices_for(heavy, 1) as e:
        assert isinstance(a, DeviceFibers) and a.threads == 2
        assert isinstance(b, DeviceFibers) and b.threads == 1
        assert isinstance(c, DeviceThreads)
        assert e.threads == 1
    monkeypatch.setattr(runner, "_cores", lambda: 1)
    with runner.devices_for(heavy, 4) as one_core:
        assert one_core.threads == 1


def test_fibers_on_threads_run_a_module_as_one_thread_does():
    from xlaplug.backends.spmd.groups import DeviceGrid
    text = """HloModule m, replica_count=4
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[64,64] parameter(0)
  y = f32[64,64] dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT r = f32[64,64] all-reduce(y), replica_groups={}, to_apply=add
}
"""
    module = parse_module(text)
    rng = np.random.default_rng(0)
    args = [[rng.standard_normal((64, 64)).astype(np.float32)] for _ in range(4)]
    outs = []
    for threads in (1, 2):
        with DeviceFibers(4, threads=threads) as fibers:
            outs.append(runner.run_devices(module, args, DeviceGrid(4, 1), _context, 30,
                                           fibers))
    for a, b in zip(*outs):
        assert a.tobytes() == b.tobytes()


def _context(d):
    from xlaplug.runtime.executor import ExecContext
    return ExecContext("cpu", {})


def test_devices_running_at_once_run_fused_loops_serially_with_the_same_bits():
    # A 64K-element loop fusion runs on numba's threads on one device, and as a serial loop
    # where devices run at once (their threads already fill the cores): the same values.
    from xlaplug.runtime.executor import ExecContext
    from xlaplug.backends.spmd.groups import DeviceGrid
    text = """HloModule m, replica_count=2
f {
  w = f32[256,256] parameter(0)
  g = f32[256,256] parameter(1)
  c = f32[] constant(0.025)
  b = f32[256,256] broadcast(c), dimensions={}
  m = f32[256,256] multiply(g, b)
  ROOT s = f32[256,256] subtract(w, m)
}
ENTRY e {
  w = f32[256,256] parameter(0)
  g = f32[256,256] parameter(1)
  ROOT r = f32[256,256] fusion(w, g), kind=kLoop, calls=f
}
"""
    module = parse_module(text)
    rng = np.random.default_rng(1)
    args = [[rng.standard_normal((256, 256)).astype(np.float32) for _ in range(2)]
            for _ in range(2)]
    alone = [ExecContext("cpu", {}).run(module.entry, a) for a in args]
    contexts = [ExecContext("cpu", {}) for _ in range(2)]
    with DeviceFibers(2, threads=2) as fibers:
        both = runner.run_devices(module, args, DeviceGrid(2, 1), lambda d: contexts[d], 30,
                                  fibers)
    for a, b in zip(alone, both):
        assert a.tobytes() == b.tobytes()
    assert all(ctx.kernel_cache.table("_fused_serial_plans") for ctx in contexts)


def test_a_reduce_plan_serves_the_next_runs_place_of_the_same_device():
    from xlaplug.backends.spmd.groups import DeviceGrid
    from xlaplug.backends.spmd.all_reduce import Place, _plan_holds, _ReducePlan
    grid = DeviceGrid(4, 1)
    first, again = (Place(grid, 1, Rendezvous(4)) for _ in range(2))
    plan = _ReducePlan(first, (0, 1, 2, 3), None, None)
    assert _plan_holds(plan, first) and _plan_holds(plan, again)
    assert not _plan_holds(plan, Place(grid, 2, Rendezvous(4)))
    assert not _plan_holds(plan, Place(DeviceGrid(2, 2), 1, Rendezvous(4)))
    bound = _ReducePlan(first, (0, 1, 2, 3), None, "add", fast=lambda a: a)  # MPI's one call
    assert _plan_holds(bound, first) and not _plan_holds(bound, again)
