"""Per-call cost of the Python API (issue 21, item 7): `exe(*arrays)` against `exe.run(...)`
and `jax.jit`, on a one-op module, on the data-parallel training step (models.py's
`data_parallel`: XLA's partitioned module on 4 devices) and on examples/horovod_allreduce4.hlo
(a plugin all-reduce on 4 replicas).

    python benchmarks/api_call.py [--calls N] [--rounds R] [--json] [--device-threads 1,2,4]

Every callable is called once first (numba compiles, cache loads, XLA's compile), then timed
in R rounds that alternate the callables, N calls each (so a change in the machine's load
hits all of them alike); the per-call figure is the median over the rounds.  jax.jit's call
includes `block_until_ready` and no copy back to numpy (xlaplug's outputs are numpy arrays
already: its figure includes everything a numpy user waits for).  The load (`uptime`) is
printed before and after: quote ratios from one run, and only on a quiet machine.
`--device-threads K,...` adds, for each K, `exe.run` with RunOptions(device_threads=K) (the
devices on K threads; 1: fibers on one thread, their products ganged: runtime/spmd/gang.py)
to the multi-device workloads' rounds.  The voluntary context switches per call (threads
that blocked: GIL and futex waits) are printed too: a count the load does not change much,
each of which costs a system call or two and a wake-up.
"""
from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=4").strip()

import argparse  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from xlaplug.runtime.options import RunOptions  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def switches() -> int:
    """The process's voluntary context switches so far: each is a thread that blocked (a
    GIL or futex wait), the hand-offs that cost most where a system call is dear."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw


def per_call(fns: dict, calls: int, rounds: int, waits: dict | None = None) -> dict:
    """{name: median seconds per call}: one warm-up call each, then `rounds` rounds in
    which each callable is called `calls` times in turn.  `waits`, when given, gets
    {name: median voluntary context switches per call} (`switches`)."""
    for fn in fns.values():
        fn()
    samples: dict = {name: [] for name in fns}
    blocked: dict = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            s0, t0 = switches(), time.perf_counter()
            for _ in range(calls):
                fn()
            samples[name].append((time.perf_counter() - t0) / calls)
            blocked[name].append((switches() - s0) / calls)
    if waits is not None:
        waits.update({name: statistics.median(b) for name, b in blocked.items()})
    return {name: statistics.median(s) for name, s in samples.items()}


def one_op(rng):
    import jax
    import xlaplug
    a = rng.standard_normal(1024).astype(np.float32)
    b = rng.standard_normal(1024).astype(np.float32)
    jf = jax.jit(lambda x, y: x + y)
    exe = xlaplug.compile(jf.lower(a, b).as_text(dialect="hlo"))
    ja, jb = jax.device_put(a), jax.device_put(b)
    return exe, [a, b], lambda: jf(ja, jb).block_until_ready()


def data_parallel(rng):
    import jax
    import models
    import xlaplug
    from multi_device import device_shards
    w = models.data_parallel(False, rng, 4)
    jf = jax.jit(w.jf)
    compiled = jf.lower(*w.args).compile()
    exe = xlaplug.compile(compiled.as_text())
    shards = device_shards(jax, compiled, w.args, 4)
    stacked = [np.stack([shards[d][k] for d in range(4)]) for k in range(len(w.args))]
    placed = [jax.device_put(a, s) for a, s in zip(w.args, compiled.input_shardings[0])]
    return exe, stacked, lambda: jax.block_until_ready(compiled(*placed))


def horovod(rng):
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P
    import xlaplug
    try:
        from jax import shard_map
    except ImportError:  # pragma: no cover - older jax
        from jax.experimental.shard_map import shard_map
    exe = xlaplug.compile(HERE.parent / "examples" / "horovod_allreduce4.hlo")
    w = rng.standard_normal((4, 1024)).astype(np.float32)
    g = rng.standard_normal((4, 1024)).astype(np.float32)
    mesh = Mesh(np.array(jax.devices()[:4]), ("x",))

    def step(w, g):  # the same step: each device's gradient averaged, then applied
        return w - jnp.float32(0.1) * jax.lax.pmean(g, "x")
    jf = jax.jit(shard_map(step, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x")))
    sh = NamedSharding(mesh, P("x"))
    jw, jg = jax.device_put(w.reshape(4096), sh), jax.device_put(g.reshape(4096), sh)
    return exe, [w, g], lambda: jf(jw, jg).block_until_ready()


WORKLOADS = {"one_op": one_op, "data_parallel": data_parallel, "horovod_allreduce4": horovod}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--only", default=None, help="comma-separated workloads")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--device-threads", default="",
                    help="comma-separated thread counts to time exe.run on as well")
    a = ap.parse_args(argv)
    counts = [int(k) for k in a.device_threads.split(",") if k]
    rng = np.random.default_rng(0)
    before = uptime()
    records = []
    for name in (a.only.split(",") if a.only else WORKLOADS):
        exe, arrays, jax_call = WORKLOADS[name](rng)
        fns = {"exe(*arrays)": lambda: exe(*arrays),
               "exe.run(*arrays)": lambda: exe.run(*arrays), "jax.jit": jax_call}
        for k in counts if exe.num_devices > 1 else ():
            fns[k] = functools.partial(exe.run, *arrays,
                                       options=RunOptions(device_threads=k))
        waits: dict = {}
        t = per_call(fns, a.calls, a.rounds, waits)
        call, run, jit = t["exe(*arrays)"], t["exe.run(*arrays)"], t["jax.jit"]
        records.append({"workload": name, "devices": exe.num_devices,
                        "call_ms": call * 1e3, "run_ms": run * 1e3, "jit_ms": jit * 1e3,
                        "call_over_run": call / run, "call_over_jit": call / jit,
                        "device_threads_ms": {k: t[k] * 1e3 for k in counts if k in t},
                        "switches_per_call": {str(k): w for k, w in waits.items()}})
    after = uptime()
    if a.json:
        print(json.dumps({"uptime_before": before, "uptime_after": after,
                          "records": records}))
        return 0
    print(f"before: {before}")
    print(f"{'workload':20} {'D':>2} {'exe(*a) ms':>11} {'exe.run ms':>11} {'jax.jit ms':>11}"
          f" {'/run':>6} {'/jit':>6}")
    for r in records:
        print(f"{r['workload']:20} {r['devices']:>2} {r['call_ms']:>11.3f} {r['run_ms']:>11.3f}"
              f" {r['jit_ms']:>11.3f} {r['call_over_run']:>6.2f} {r['call_over_jit']:>6.2f}")
        for k, ms in r["device_threads_ms"].items():
            print(f"{'':20} {'':>2}   exe.run(device_threads={k}): {ms:.3f} ms "
                  f"({ms / r['jit_ms']:.2f}x jax.jit)")
        print(f"{'':20} {'':>2}   voluntary context switches per call: " + ", ".join(
            f"{k} {w:.1f}" for k, w in r["switches_per_call"].items()))
    print(f"after:  {after}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
