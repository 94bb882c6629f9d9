"""How many of numba's threads a parallel kernel works on (backends/cpu/team_size.py): XLA's
parallel task count from the kernel's cost, handed to numba as a chunk size (the team keeps
its size), the same bits as on every thread, and RunOptions(loop_teams=...) checked."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from xlaplug.backends.cpu import hardware_flush
from xlaplug.backends.cpu.team_size import computation_cost, team_for
from xlaplug.hlo import parse_module
from xlaplug.runtime.options import RunError, RunOptions

MB = 1 << 20


def test_memory_bound_kernels_take_a_thread_per_256k_up_to_sqrt_cores():
    # flops <= bytes: ceil(sqrt(cores)) at most, one thread per 256 KiB accessed
    assert team_for(1 * MB, 0, 12 * MB, 13) == math.ceil(math.sqrt(13)) == 4
    assert team_for(1 * MB, 0, 12 * MB, 64) == 8
    assert team_for(1000, 0, 3 * 256 * 1024, 13) == 3
    assert team_for(10, 0, 100, 13) == 1
    assert team_for(0, 5 * MB, 12 * MB, 13) == 4  # transcendentals are not flops here
    assert team_for(1 * MB, 0, 12 * MB, 2) == 2
    assert team_for(1 * MB, 0, 12 * MB, 1) == 1


def test_compute_bound_kernels_take_a_thread_per_100k_cycles_up_to_every_core():
    # cost = flops + 2 transcendentals + 10 bytes, 100,000 a thread
    assert team_for(400_000, 0, 20_000, 13) == 6
    assert team_for(400_000, 50_000, 20_000, 13) == 7
    assert team_for(50 * MB, 0, 1 * MB, 13) == 13
    assert team_for(150_000, 0, 1_000, 13) == 1


def test_computation_cost_counts_as_xlas_cost_analysis():
    module = parse_module("""HloModule m

body {
  a = f32[256,1024] parameter(0)
  b = f32[1024] parameter(1)
  bb = f32[256,1024] broadcast(b), dimensions={1}
  e = f32[256,1024] exponential(a)
  s = f32[256,1024] add(e, bb)
  ROOT t = f32[256,1024] tanh(s)
}

ENTRY main {
  x = f32[256,1024] parameter(0)
  y = f32[1024] parameter(1)
  ROOT f = f32[256,1024] fusion(x, y), kind=kLoop, calls=body
}
""")
    body = module.computation("body")
    n = 256 * 1024
    # add: flops; exponential and tanh: transcendentals; broadcast: nothing; bytes: the
    # parameters' and the result's
    assert computation_cost(body) == (n, 2 * n, 4 * (n + 1024 + n))


def test_a_reduce_costs_its_reducer_per_element_reduced():
    module = parse_module("""HloModule m

add {
  p = f32[] parameter(0)
  q = f32[] parameter(1)
  ROOT r = f32[] add(p, q)
}

rows {
  a = f32[64,512] parameter(0)
  z = f32[] constant(0)
  ROOT s = f32[64] reduce(a, z), dimensions={1}, to_apply=add
}

ENTRY main {
  x = f32[64,512] parameter(0)
  ROOT f = f32[64] fusion(x), kind=kInput, calls=rows
}
""")
    assert computation_cost(module.computation("rows")) == (64 * 512, 0, 4 * (64 * 512 + 64))


def test_loop_teams_must_be_cost_or_all():
    assert RunOptions(loop_teams="all").executor_options()["loop_teams"] == "all"
    assert RunOptions().executor_options()["loop_teams"] == "cost"
    with pytest.raises(RunError, match="loop_teams: must be 'cost' or 'all'"):
        RunOptions(loop_teams="some")


# On four numba threads: a memory-bound loop fusion (2 of 4 threads: ceil(sqrt(4))), a
# compute-bound one (every thread: no chunk size set), a row reduction and a convolution
# (a gang of chunk gemms); each chunk size set is recorded, every output has the bits the
# whole team gives, and the process's threads are the same ones throughout.
SPREAD = r"""
import json, os, numpy as np, numba
import xlaplug
from xlaplug.runtime.options import RunOptions
seen = []
plain = numba.set_parallel_chunksize
def recording(n):
    seen.append(int(n))
    return plain(n)
numba.set_parallel_chunksize = recording
text = '''HloModule m

mem {
  a = f32[1024,1024] parameter(0)
  b = f32[1024,1024] parameter(1)
  ROOT s = f32[1024,1024] add(a, b)
}

busy {
  a = f32[512,512] parameter(0)
  t1 = f32[512,512] multiply(a, a)
  t2 = f32[512,512] add(t1, a)
  t3 = f32[512,512] multiply(t2, t1)
  t4 = f32[512,512] subtract(t3, t2)
  t5 = f32[512,512] multiply(t4, t4)
  t6 = f32[512,512] add(t5, t3)
  t7 = f32[512,512] multiply(t6, a)
  t8 = f32[512,512] add(t7, t6)
  t9 = f32[512,512] multiply(t8, t7)
  t10 = f32[512,512] subtract(t9, t8)
  t11 = f32[512,512] multiply(t10, t9)
  t12 = f32[512,512] add(t11, t10)
  t13 = f32[512,512] multiply(t12, t11)
  t14 = f32[512,512] subtract(t13, t12)
  t15 = f32[512,512] multiply(t14, t13)
  ROOT t16 = f32[512,512] add(t15, t14)
}

max {
  p = f32[] parameter(0)
  q = f32[] parameter(1)
  ROOT r = f32[] maximum(p, q)
}

ENTRY main {
  x = f32[1024,1024] parameter(0)
  y = f32[1024,1024] parameter(1)
  z = f32[512,512] parameter(2)
  v = f32[2,16,16,64] parameter(3)
  w = f32[3,3,64,64] parameter(4)
  k = f32[2,16,16,64] convolution(v, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  m = f32[1024,1024] fusion(x, y), kind=kLoop, calls=mem
  c = f32[512,512] fusion(z), kind=kLoop, calls=busy
  lo = f32[] constant(-inf)
  r = f32[1024] reduce(m, lo), dimensions={1}, to_apply=max
  ROOT t = (f32[1024,1024], f32[512,512], f32[1024], f32[2,16,16,64]) tuple(m, c, r, k)
}
'''
rng = np.random.default_rng(0)
args = [rng.standard_normal(s, np.float32) for s in
        ((1024, 1024), (1024, 1024), (512, 512), (2, 16, 16, 64), (3, 3, 64, 64))]
exe = xlaplug.compile(text)
for mode in ("all", "cost"):  # warm: compiled, and the team started
    exe.run(*args, options=RunOptions(loop_teams=mode))
threads = set(os.listdir("/proc/self/task"))
outs = {}
for mode in ("all", "cost"):
    del seen[:]
    outs[mode] = exe.run(*args, options=RunOptions(loop_teams=mode, repeat=3)).outputs
    outs[mode + "_chunks"] = list(seen)
    threads |= set(os.listdir("/proc/self/task"))
print(json.dumps({"threads": numba.get_num_threads(), "ids": len(threads),
                  "ids_now": len(os.listdir("/proc/self/task")),
                  "same": all(np.array_equal(a, b) for a, b in zip(outs["all"], outs["cost"])),
                  "all": outs["all_chunks"], "cost": outs["cost_chunks"]}))
"""


def test_kernels_spread_over_their_share_of_a_team_of_four_with_the_same_bits():
    env = dict(os.environ, NUMBA_NUM_THREADS="4")
    proc = subprocess.run([sys.executable, "-c", SPREAD], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["threads"] == 4 and got["same"]
    # no thread ended and was created again between kernels (libgomp ends the threads a
    # smaller team leaves out: the convolution's gang shrank the team to its chunk count)
    assert got["ids"] == got["ids_now"], got
    assert got["all"] == []  # every kernel on the whole team: no chunk size set
    # set and put back (0) around each kernel of each run: the memory-bound fusion (1M
    # elements, 12 MiB: 2 of 4 threads) in two chunks of its blocks of hardware_flush.BLOCK
    # elements, the row reduction (a 4 MiB operand: 2 threads) in two chunks of its 32 blocks
    # of 32 rows; nothing for the compute-bound fusion (16 flops an element: every thread)
    blocks = (1 << 20) // hardware_flush.BLOCK
    assert sorted(set(got["cost"])) == sorted({0, blocks // 2, 32 // 2}), got["cost"]
