"""Products on OpenBLAS's team against products on numba's threads (backends/cpu/pool_gemm.py).

For each f32 product, on every core this process may use: `@` with numpy's OpenBLAS on all of
them ("team"), and pool_gemm.matmul with numba's threads on all of them and OpenBLAS on one
("pool"); then the same product followed by a parallel numba loop over 4M elements, as a
fused loop follows a product in a model ("+loop": OpenBLAS's team spins after its product
while numba's threads run the loop).  XLA:CPU's time for the product (jax.jit of lax.dot,
every core) is printed beside them.  Each figure is the median of `--rounds` rounds that
alternate the variants, enough calls a round for ~20 ms.

    python benchmarks/pool_gemm.py [--rounds 9] [--json]
    python benchmarks/pool_gemm.py --models mlp,transformer_f32,transformer_train [--rounds 7]

`--models` times whole steps of run.py's workloads (benchmarks/workloads.py) instead: the
executable's call with RunOptions(blas_pool=True), with the default options (products on
OpenBLAS's team) and jax.jit; rounds alternate the three, each the best of 5 calls; wall and
process CPU time (the team's spinning shows in the latter) a step.

The load (`uptime`) is printed before and after: quote figures from a quiet machine only.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

# (batch, M, K, N): the MLP's layer, a transformer's projections and attention, a tall one.
SHAPES = [(1, 512, 1024, 1024), (1, 256, 512, 2048), (1, 2048, 256, 256),
          (8, 128, 64, 128), (32, 128, 64, 128), (1, 96, 2048, 2048)]


# Between variants: OpenBLAS's team spins for 2^28 cycles (~0.1 s) after its last product,
# and would take the cores from whatever variant is timed next.
SETTLE_S = 0.25


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def _timed(fn, budget: float = 0.02) -> float:
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-6)
    calls = max(1, int(budget / one))
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def models(names: list[str], rounds: int) -> list[dict]:
    """Per workload: median wall and CPU ms a step, pooled / team / XLA."""
    import jax
    import xlaplug
    from workloads import make_workload
    from xlaplug.runtime.options import RunOptions
    rows = []
    for name in names:
        w = make_workload(name, False, np.random.default_rng(0))
        exe = xlaplug.compile(jax.jit(w.jf).lower(*w.args).as_text(dialect="hlo"))
        args = [np.asarray(x) for x in w.args]
        jf, jargs = jax.jit(w.jf), [jax.device_put(x) for x in w.args]
        sides = {"pool": (lambda: exe(*args), RunOptions(blas_pool=True)),
                 "team": (lambda: exe(*args), RunOptions()),
                 "xla": (lambda: jax.block_until_ready(jf(*jargs)), RunOptions())}
        wall = {k: [] for k in sides}
        cpu = {k: [] for k in sides}
        for _ in range(rounds + 1):
            for k, (fn, options) in sides.items():
                exe.run_options = options
                time.sleep(SETTLE_S)  # the previous side's spinning threads asleep
                fn()
                ts, c0 = [], time.process_time()
                for _ in range(5):
                    t0 = time.perf_counter()
                    fn()
                    ts.append(time.perf_counter() - t0)
                wall[k].append(min(ts))
                cpu[k].append((time.process_time() - c0) / 5)
        row = {"name": name, "load": os.getloadavg()[0],
               "wall_ms": {k: statistics.median(v[1:]) * 1e3 for k, v in wall.items()},
               "cpu_ms": {k: statistics.median(v[1:]) * 1e3 for k, v in cpu.items()}}
        rows.append(row)
        m, c = row["wall_ms"], row["cpu_ms"]
        print(f"{name:18s} wall pool {m['pool']:7.2f} team {m['team']:7.2f} xla {m['xla']:7.2f} ms"
              f" (pool/team {m['pool'] / m['team']:.2f}, pool/xla {m['pool'] / m['xla']:.2f},"
              f" team/xla {m['team'] / m['xla']:.2f});  cpu pool {c['pool']:7.2f} team"
              f" {c['team']:7.2f} xla {c['xla']:7.2f} ms;  load {row['load']:.2f}", flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--models", default="")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    if a.models:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        print(uptime(), file=sys.stderr)
        rows = models(a.models.split(","), a.rounds)
        print(uptime(), file=sys.stderr)
        if a.json:
            print(json.dumps(rows))
        return 0
    import jax
    import numba
    from jax import lax
    from threadpoolctl import threadpool_limits
    from xlaplug.backends.cpu import pool_gemm

    print(uptime(), file=sys.stderr)
    threads = numba.get_num_threads()

    @numba.njit(parallel=True, nogil=True, cache=False)
    def loop(x, y):
        for i in numba.prange(x.size):
            y[i] = np.tanh(x[i])

    lx = np.random.default_rng(1).standard_normal(1 << 22).astype(np.float32)
    ly = np.empty_like(lx)
    loop(lx, ly)
    rows = []
    for b, m, k, n in SHAPES:
        rng = np.random.default_rng(0)
        L = rng.standard_normal((b, m, k), dtype=np.float32)
        R = rng.standard_normal((b, k, n), dtype=np.float32)
        L2, R2 = (L[0], R[0]) if b == 1 else (L, R)
        f = jax.jit(lambda x, y: lax.dot_general(
            x, y, (((x.ndim - 1,), (y.ndim - 2,)), ((0,), (0,)) if x.ndim == 3 else ((), ()))))
        jl, jr = jax.device_put(L2), jax.device_put(R2)
        f(jl, jr).block_until_ready()
        variants = {
            "team": lambda: np.matmul(L2, R2),
            "pool": lambda: pool_gemm.matmul(L2, R2, threads),
            "team+loop": lambda: (np.matmul(L2, R2), loop(lx, ly)),
            "pool+loop": lambda: (pool_gemm.matmul(L2, R2, threads), loop(lx, ly)),
            "xla": lambda: f(jl, jr).block_until_ready(),
        }
        times = {v: [] for v in variants}
        with threadpool_limits(threads, user_api="blas"):
            for fn in variants.values():
                fn()
            for _ in range(a.rounds):
                for v, fn in variants.items():
                    time.sleep(SETTLE_S)  # the previous variant's spinning threads asleep
                    times[v].append(_timed(fn))
        med = {v: statistics.median(t) * 1e3 for v, t in times.items()}
        rows.append({"shape": (b, m, k, n), "ms": med})
        if not a.json:
            print(f"{b:3d}x{m:5d}x{k:5d}x{n:5d}  team {med['team']:7.3f}  pool {med['pool']:7.3f}"
                  f"  ({med['pool'] / med['team']:.2f}x)  team+loop {med['team+loop']:7.3f}"
                  f"  pool+loop {med['pool+loop']:7.3f}"
                  f" ({med['pool+loop'] / med['team+loop']:.2f}x)"
                  f"  xla {med['xla']:7.3f} ms  pool/xla {med['pool'] / med['xla']:.2f}x",
                  flush=True)
    print(uptime(), file=sys.stderr)
    if a.json:
        print(json.dumps({"threads": threads, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
