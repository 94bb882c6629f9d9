"""Every collective and group mode on many devices in one process (a thread or a fiber per
device), against XLA:CPU running the same module on as many host devices
(tests/xla_devices.py)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from xlaplug.runtime.spmd.device_fibers import DeviceFibers
from xlaplug.runtime.spmd.device_threads import DeviceThreads
from xlaplug.backends.spmd.groups import DeviceGrid
from xlaplug.runtime.spmd.runner import run_module_devices
from xlaplug.hlo.text.parser import parse_module

from xla_devices import _raw, _typed

pytest.importorskip("jax")
pytestmark = [pytest.mark.jax, pytest.mark.slow]

ADD = "add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }\n"
ADDI = "addi { a = s32[] parameter(0)  b = s32[] parameter(1)  ROOT s = s32[] add(a, b) }\n"
MAXI = "maxi { a = s32[] parameter(0)  b = s32[] parameter(1)  ROOT s = s32[] maximum(a, b) }\n"
ADDB = "addb { a = bf16[] parameter(0)  b = bf16[] parameter(1)  ROOT s = bf16[] add(a, b) }\n"
def _module(r, p, body, comps=ADD):
    return f"HloModule m, replica_count={r}, num_partitions={p}\n{comps}ENTRY e {{\n{body}\n}}\n"


# (name, R, P, HLO text, argument shapes/dtypes)
CASES = [
    ("cross_replica_all_reduce", 4, 1, _module(4, 1, """
  p = f32[5] parameter(0)
  q = s32[4] parameter(1)
  a = f32[5] all-reduce(p), replica_groups={}, to_apply=add
  b = s32[4] all-reduce(q), replica_groups={{0,2},{1,3}}, to_apply=maxi
  n = f32[5] negate(p)
  c = (f32[5], f32[5]) all-reduce(p, n), replica_groups={{3,1,0,2}}, to_apply=add
  ROOT t = (f32[5], s32[4], (f32[5], f32[5])) tuple(a, b, c)""", ADD + MAXI),
        [("f32", (5,)), ("s32", (4,))]),
    ("gather_scatter_all_to_all", 4, 1, _module(4, 1, """
  p = f32[2,8] parameter(0)
  g = f32[4,8] all-gather(p), replica_groups={{0,1},{2,3}}, dimensions={0}
  rs = f32[2,2] reduce-scatter(p), replica_groups={}, dimensions={1}, to_apply=add
  aa = f32[2,8] all-to-all(p), replica_groups={{0,1,2,3}}, dimensions={1}
  ROOT t = (f32[4,8], f32[2,2], f32[2,8]) tuple(g, rs, aa)"""), [("f32", (2, 8))]),
    ("tuple_all_to_all_permute", 4, 1, _module(4, 1, """
  p = s32[3] parameter(0)
  q = s32[3] negate(p)
  r = s32[3] add(p, p)
  s = s32[3] multiply(p, p)
  aa = (s32[3], s32[3], s32[3], s32[3]) all-to-all(p, q, r, s), replica_groups={}
  cp = s32[3] collective-permute(p), source_target_pairs={{0,1},{1,2},{2,3}}
  id = u32[] replica-id()
  ROOT t = ((s32[3], s32[3], s32[3], s32[3]), s32[3], u32[]) tuple(aa, cp, id)"""),
        [("s32", (3,))]),
    ("partitions_channel_modes", 1, 4, _module(1, 4, """
  p = f32[4] parameter(0)
  a = f32[4] all-reduce(p), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  g = f32[16] all-gather(p), channel_id=2, replica_groups={}, dimensions={0}
  cp = f32[4] collective-permute(p), channel_id=3, source_target_pairs={{0,3},{3,0},{1,1}}
  aa = f32[4] all-to-all(p), channel_id=4, replica_groups={{0,1},{2,3}}, dimensions={0}
  id = u32[] partition-id()
  ROOT t = (f32[4], f32[16], f32[4], f32[4], u32[]) tuple(a, g, cp, aa, id)"""), [("f32", (4,))]),
    # Cross-replica-and-partition lists every partition of each replica, replica-major
    # (0,1,2,3 here; the StableHLO spec's partition-major order would give 0,2,1,3).
    ("replica_and_partition_2x2", 2, 2, _module(2, 2, """
  p = f32[3] parameter(0)
  g = f32[12] all-gather(p), channel_id=1, replica_groups={{0,1}}, dimensions={0}
  g2 = f32[6] all-gather(p), channel_id=2, replica_groups={{0},{1}}, dimensions={0}
  r = f32[3] all-reduce(p), replica_groups={}, to_apply=add
  f = f32[3] all-reduce(p), channel_id=3, replica_groups={{0,3},{1,2}}, use_global_device_ids=true, to_apply=add
  cp = f32[3] collective-permute(p), channel_id=4, source_target_pairs={{0,1},{1,0}}
  cpr = f32[3] collective-permute(p), source_target_pairs={{1,0}}
  ri = u32[] replica-id()
  pi = u32[] partition-id()
  ROOT t = (f32[12], f32[6], f32[3], f32[3], f32[3], f32[3], u32[], u32[]) tuple(g, g2, r, f, cp, cpr, ri, pi)"""),
        [("f32", (3,))]),
    ("iota_groups_2x4", 2, 4, _module(2, 4, """
  p = f32[2] parameter(0)
  q = f32[8] parameter(1)
  g = f32[8] all-gather(p), channel_id=1, replica_groups=[2,4]<=[8], dimensions={0}, use_global_device_ids=true
  h = f32[4] all-gather(p), channel_id=2, replica_groups=[4,2]<=[2,4]T(1,0), dimensions={0}, use_global_device_ids=true
  rs = f32[2] reduce-scatter(q), channel_id=3, replica_groups={{0},{1}}, dimensions={0}, to_apply=add
  ROOT t = (f32[8], f32[4], f32[2]) tuple(g, h, rs)"""), [("f32", (2,)), ("f32", (8,))]),
    # Replica groups as mesh axes: the mesh's own device order, sub-axes, axes named out of
    # mesh order (the group lists devices in naming order).
    ("mesh_axes_groups", 8, 1, _module(8, 1, """
  p = f32[4] parameter(0)
  a = f32[4] all-reduce(p), replica_groups=mesh['x'=2,'y'=4] {'y'}, to_apply=add
  c = f32[4] all-reduce(p), replica_groups=mesh['x'=2,'y'=4] {'y':(2)2}, to_apply=add
  h = f32[32] all-gather(p), replica_groups=mesh['x'=2,'y'=4] {'y','x'}, dimensions={0}
  ROOT t = (f32[4], f32[4], f32[32]) tuple(a, c, h)"""), [("f32", (4,))]),
    ("mesh_sub_axes", 8, 1, _module(8, 1, """
  p = f32[4] parameter(0)
  ROOT g = f32[16] all-gather(p), replica_groups=mesh['a'=8] {'a':(1)2,'a':(4)2}, dimensions={0}"""),
        [("f32", (4,))]),
    # XLA:CPU sums bf16 in f32 and rounds once, f16 in f16 steps.
    ("narrow_float_sums", 4, 1, _module(4, 1, """
  p = bf16[64] parameter(0)
  q = f16[64] parameter(1)
  a = bf16[64] all-reduce(p), replica_groups={}, to_apply=addb
  b = f16[64] all-reduce(q), replica_groups={}, to_apply=addh
  ROOT t = (bf16[64], f16[64]) tuple(a, b)""", ADDB + ADDB.replace("bf16", "f16").replace(
        "addb", "addh")), [("bf16", (64,)), ("f16", (64,))]),
    # From 256 KiB per device each participant reduces one chunk into everyone's output
    # (shares.py): lengths that 4 does not divide, a fused tuple, subgroups (of one device
    # too), bf16 in f32.
    ("chunked_all_reduce", 4, 1, _module(4, 1, """
  p = f32[65541] parameter(0)
  q = s32[70001] parameter(1)
  h = bf16[131075] parameter(2)
  a = f32[65541] all-reduce(p), replica_groups={}, to_apply=add
  b = s32[70001] all-reduce(q), replica_groups={{0,2},{1,3}}, to_apply=maxi
  c = (f32[65541], f32[65541]) all-reduce(p, p), replica_groups={{3,1,0,2}}, to_apply=add
  d = bf16[131075] all-reduce(h), replica_groups={}, to_apply=addb
  e = f32[65541] all-reduce(p), replica_groups={{0},{1},{2},{3}}, to_apply=add
  ROOT t = (f32[65541], s32[70001], (f32[65541], f32[65541]), bf16[131075], f32[65541]) tuple(a, b, c, d, e)""",
        ADD + MAXI + ADDB), [("f32", (65541,)), ("s32", (70001,)), ("bf16", (131075,))]),
    ("permute_in_while_ring", 4, 1, _module(4, 1, """
  p = f32[3] parameter(0)
  z = s32[] constant(0)
  init = (s32[], f32[3], f32[3]) tuple(z, p, p)
  w = (s32[], f32[3], f32[3]) while(init), condition=cond, body=body
  ROOT r = f32[3] get-tuple-element(w), index=2""", ADD + """
cond { s = (s32[], f32[3], f32[3]) parameter(0)  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)  ROOT lt = pred[] compare(i, n), direction=LT }
body { s = (s32[], f32[3], f32[3]) parameter(0)  i = s32[] get-tuple-element(s), index=0
  x = f32[3] get-tuple-element(s), index=1  acc = f32[3] get-tuple-element(s), index=2
  one = s32[] constant(1)  j = s32[] add(i, one)
  y = f32[3] collective-permute(x), source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  a = f32[3] add(acc, y)
  ROOT t = (s32[], f32[3], f32[3]) tuple(j, y, a) }
"""), [("f32", (3,))]),
    ("rank_0_operands", 4, 1, _module(4, 1, """
  p = f32[] parameter(0)
  q = s32[] parameter(1)
  a = f32[] all-reduce(p), replica_groups={}, to_apply=add
  b = s32[] all-reduce(q), replica_groups={{0,2},{1,3}}, to_apply=maxi
  c = (f32[], f32[]) all-reduce(p, p), replica_groups={}, to_apply=add
  c1 = f32[] get-tuple-element(c), index=1
  cp = s32[] collective-permute(q), source_target_pairs={{0,1},{1,2},{3,0}}
  ROOT t = (f32[], s32[], f32[], s32[]) tuple(a, b, c1, cp)""", ADD + MAXI),
        [("f32", ()), ("s32", ())]),
]


def _args(case_index: int, specs, n: int) -> list[list[np.ndarray]]:
    from xlaplug.hlo import dtypes as D
    g = np.random.default_rng(1000 + case_index)
    out = []
    for d in range(n):
        row = []
        for t, dims in specs:
            if t == "s32":
                row.append(g.integers(-50, 50, dims).astype(np.int32))
            else:
                row.append(g.standard_normal(dims).astype(np.float32).astype(D.to_dtype(t)))
        out.append(row)
    return out


@pytest.fixture(scope="module")
def xla_results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("xla_devices")
    data = {"n": np.array(len(CASES))}
    for i, (_, r, p, text, specs) in enumerate(CASES):
        data[f"text_{i}"] = np.array(text)
        data[f"grid_{i}"] = np.array([r, p])
        data[f"nargs_{i}"] = np.array(len(specs))
        for d, row in enumerate(_args(i, specs, r * p)):
            for k, a in enumerate(row):
                data[f"arg_{i}_{k}_{d}"], data[f"dtype_{i}_{k}"] = _raw(a)
    np.savez(tmp / "cases.npz", **data)
    script = Path(__file__).with_name("xla_devices.py")
    subprocess.run([sys.executable, str(script), str(tmp / "cases.npz"), str(tmp / "out.npz")],
                   check=True, timeout=600)
    return np.load(tmp / "out.npz")


def _leaves(v):
    if isinstance(v, tuple):
        return [x for e in v for x in _leaves(e)]
    return [np.asarray(v)]


# Cases on the CPU only: numba's CUDA simulator moves 64K-element buffers in minutes, and the
# chunked all-reduce is host code that CUDA runs the same (it stages through the host).
CPU_ONLY = {"chunked_all_reduce"}


# Devices as threads, as fibers, and as fibers on 2 threads (runner.devices_for chooses by
# array size and compute) on the CPU.
@pytest.mark.parametrize("i, device, kind", [
    pytest.param(i, dev, kind, id=f"{dev}-{kind}-{c[0]}",
                 marks=[pytest.mark.cuda] if dev == "cuda" else [])
    for dev, kind in (("cpu", "threads"), ("cpu", "fibers"), ("cpu", "gangs"),
                      ("cuda", "chosen"))
    for i, c in enumerate(CASES) if dev == "cpu" or c[0] not in CPU_ONLY])
def test_against_xla(i, device, kind, xla_results):
    name, r, p, text, specs = CASES[i]
    assert f"error_{i}" not in xla_results, str(xla_results[f"error_{i}"])
    n = r * p
    module = parse_module(text)
    devices = {"threads": DeviceThreads, "fibers": DeviceFibers,
               "gangs": lambda n: DeviceFibers(n, threads=min(n, 2))}.get(kind, lambda n: None)(n)
    ours = run_module_devices(module, _args(i, specs, n), DeviceGrid(r, p), device=device,
                              timeout=30, threads=devices)
    if devices is not None:
        devices.close()
    for d in range(n):
        for j, leaf in enumerate(_leaves(ours[d])):
            want = _typed(xla_results[f"out_{i}_{j}_{d}"], str(xla_results[f"dtype_{i}_{j}"]))
            assert leaf.dtype == want.dtype and leaf.shape == want.shape, (name, d, j)
            assert leaf.tobytes() == want.tobytes(), (
                f"{name}: device {d}, output {j}:\nours {leaf}\nxla  {want}")


def test_mesh_device_ids_follow_xlas_rule():
    """A mesh's own device order (`device_ids=`).  jaxlib's HLO -> StableHLO conversion drops
    device_ids (its sdy.mesh has none), so XLA cannot be the oracle through jax here; the
    expectation follows xla/hlo/ir/replica_group.cc: the groups are those of the device array
    (row-major `device_ids`, or iota reshaped and transposed), not of device numbers."""
    from xlaplug.hlo.text.mesh_groups import parse_mesh_groups
    explicit = parse_mesh_groups("mesh['x'=2,'y'=2,'z'=2], device_ids=(0,2,1,3,4,6,5,7) {'y'}")
    assert explicit.expanded() == ((0, 1), (2, 3), (4, 5), (6, 7))
    iota = parse_mesh_groups("mesh['a'=2,'b'=4], device_ids=([4,2]T(1,0)) {'a'}")
    assert iota.devices().tolist() == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert iota.expanded() == ((0, 1), (2, 3), (4, 5), (6, 7))
