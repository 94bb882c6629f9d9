"""Devices on one thread computing their products together (runtime/spmd/gang.py,
backends/cpu/gang_gemm.py): which dots may gang, the gang's gemms against numpy's `@` bit for
bit (what the dot kernel computes otherwise; the dot's values are checked against XLA in
test_linalg.py and the multi-device runs in test_spmd_jax.py), and whole runs with
RunOptions.device_threads=1 against the default's outputs."""
from __future__ import annotations

import numpy as np
import pytest

import xlaplug
from xlaplug.backends.cpu import gang_gemm
from xlaplug.backends.cpu.blas_threads import cores
from xlaplug.backends.cpu.denormals import Env, available
from xlaplug.hlo.text.parser import parse_module
from xlaplug.runtime.options import RunError, RunOptions
from xlaplug.runtime.spmd.gang import lockstep_products

needs_gemm = pytest.mark.skipif(gang_gemm.gemm_library() is None,
                                reason="no ILP64 cblas in numpy's BLAS on this platform")

MODULE = """HloModule gang, num_partitions=4

%fused (a: f32[64,128], b: f32[128,64]) -> f32[64,64] {
  %a = f32[64,128] parameter(0)
  %b = f32[128,64] parameter(1)
  ROOT %in_fusion = f32[64,64] dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%body (s: (s32[], f32[64,64], f32[64,64])) -> (s32[], f32[64,64], f32[64,64]) {
  %s = (s32[], f32[64,64], f32[64,64]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %m = f32[64,64] get-tuple-element(%s), index=1
  %w = f32[64,64] get-tuple-element(%s), index=2
  %in_loop = f32[64,64] dot(%m, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  ROOT %t = (s32[], f32[64,64], f32[64,64]) tuple(%next, %in_loop, %w)
}

%cond (s: (s32[], f32[64,64], f32[64,64])) -> pred[] {
  %s = (s32[], f32[64,64], f32[64,64]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %two = s32[] constant(2)
  ROOT %lt = pred[] compare(%i, %two), direction=LT
}

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

ENTRY %main (x: f32[64,128], w: f32[128,64], v: f32[64,64]) -> (f32[64,64], f32[64,64], f32[128,64]) {
  %x = f32[64,128] parameter(0)
  %w = f32[128,64] parameter(1)
  %v = f32[64,64] parameter(2)
  %top = f32[64,64] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %fusion = f32[64,64] fusion(%x, %w), kind=kCustom, calls=%fused
  %transposed = f32[128,64] dot(%x, %top), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  %small = f32[64,64] dot(%v, %v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %zero = s32[] constant(0)
  %init = (s32[], f32[64,64], f32[64,64]) tuple(%zero, %fusion, %small)
  %loop = (s32[], f32[64,64], f32[64,64]) while(%init), condition=%cond, body=%body
  %looped = f32[64,64] get-tuple-element(%loop), index=1
  %sum = f32[128,64] all-reduce(%transposed), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=%add
  ROOT %out = (f32[64,64], f32[64,64], f32[128,64]) tuple(%top, %looped, %sum)
}
"""


def _names(products) -> set[str]:
    return {ins.name for ins in products}


def test_only_dots_every_device_runs_once_per_run_gang():
    # in the entry and in a fusion of it: yes; in a loop body: no; under GANG_FROM_FLOPS
    # (64x64x64: 2^19 flops): no
    got = _names(lockstep_products(parse_module(MODULE, "<gang>")))
    assert got == {"top", "in_fusion", "transposed"}


def test_a_computation_also_reached_from_a_loop_does_not_gang():
    text = MODULE.replace("%in_loop = f32[64,64] dot(%m, %w), lhs_contracting_dims={1}, "
                          "rhs_contracting_dims={0}",
                          "%in_loop = f32[64,64] call(%m, %w), to_apply=%sq")
    text = text.replace("%body (s:", """%sq (p: f32[64,64], q: f32[64,64]) -> f32[64,64] {
  %p = f32[64,64] parameter(0)
  %q = f32[64,64] parameter(1)
  ROOT %called = f32[64,64] dot(%p, %q), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%body (s:""", 1)
    got = _names(lockstep_products(parse_module(text, "<gang>")))
    assert "called" not in got and {"top", "in_fusion"} <= got


def _members(dtype, rng, m, k, n, lhs_t, rhs_t, count=4):
    out = []
    for _ in range(count):
        a = rng.standard_normal((k, m) if lhs_t else (m, k)).astype(dtype)
        b = rng.standard_normal((n, k) if rhs_t else (k, n)).astype(dtype)
        out.append((a.T if lhs_t else a, b.T if rhs_t else b, np.empty((m, n), dtype)))
    return out


@needs_gemm
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("lhs_t,rhs_t", [(False, False), (True, False), (False, True),
                                         (True, True)])
def test_the_gangs_gemms_have_the_bits_of_numpys_matmul(dtype, lhs_t, rhs_t):
    rng = np.random.default_rng(3)
    members = _members(dtype, rng, 64, 96, 80, lhs_t, rhs_t)
    tiny = np.finfo(dtype).tiny / 4  # subnormal inputs: flushed (DAZ) on every thread
    for a, _, _ in members:  # (each member: whichever thread computes it)
        a[:3, :] = tiny
    # numba's threads start here, if not yet, with IEEE arithmetic (a thread starts with its
    # creator's MXCSR): the gang must set FTZ and DAZ on them itself
    gang_gemm.run_gang(_members(dtype, rng, 64, 96, 80, lhs_t, rhs_t), 4)
    env = Env() if available() else None
    changed = env.flush() if env else False
    try:
        gang_gemm.run_gang(members, 4)
        expected = [a @ b for a, b, _ in members]
    finally:
        if env:
            env.restore(changed)
    for (_, _, out), e in zip(members, expected):
        assert out.tobytes() == e.tobytes()


@needs_gemm
def test_members_numpy_sends_elsewhere_are_computed_by_numpy():
    rng = np.random.default_rng(4)
    members = _members(np.float32, rng, 64, 64, 64, False, False)
    a = members[0][0]
    members[0] = (a, a.T, members[0][2])  # a matrix times its own transpose: numpy's syrk
    strided = rng.standard_normal((64, 128)).astype(np.float32)[:, ::2]  # no unit stride
    members[1] = (strided, members[1][1], members[1][2])
    gang_gemm.run_gang(members, 2)
    for a, b, out in members:
        assert out.tobytes() == (a @ b).tobytes()


def _run(exe, args, **options):
    return [np.asarray(o) for o in exe.run(*args, options=RunOptions(**options)).outputs]


@needs_gemm
def test_devices_on_one_thread_gang_and_give_the_same_bits(monkeypatch):
    exe = xlaplug.compile(MODULE)
    rng = np.random.default_rng(5)
    args = [rng.standard_normal((4, 64, 128)).astype(np.float32),
            rng.standard_normal((4, 128, 64)).astype(np.float32),
            rng.standard_normal((4, 64, 64)).astype(np.float32)]
    default = _run(exe, args)
    calls = []
    real = gang_gemm.run_gang
    monkeypatch.setattr(gang_gemm, "run_gang",
                        lambda members, threads: calls.append(len(members)) or
                        real(members, threads))
    for _ in range(2):  # kept fibers and contexts, run after run
        ganged = _run(exe, args, device_threads=1)
        assert [g.tobytes() for g in ganged] == [d.tobytes() for d in default]
    # one meeting of all four devices per ganged dot and run, where there are cores for it
    assert calls == ([4] * 6 if cores() >= 2 else [])


def test_device_threads_must_be_positive():
    with pytest.raises(RunError, match="device_threads: must be at least 1"):
        RunOptions(device_threads=0)
