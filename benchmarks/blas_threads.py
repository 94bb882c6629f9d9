"""What one run-wide BLAS thread count costs each product (issue 21, item 8).

A run sets the BLAS threads once (backends/cpu/blas_threads.py): a module whose largest
product is large runs its small products under the same count.  OpenBLAS then decides per
gemm itself (one thread up to M*N*K = 2^18, at most M*N*K / 2^18 threads above): this times
f32 products of several sizes at each thread count, so the cost of a large count to a small
product can be read off.

    python benchmarks/blas_threads.py [--counts 1,2,4,13] [--rounds 7] [--numba] [--json]
    python benchmarks/blas_threads.py --modules [--counts 1,13]

Each (shape, count) is timed in rounds that alternate the counts (the machine's load hits
them alike), enough calls per round for ~20 ms; the figure is the median over the rounds.
`--numba` times numba's np.dot too (scipy's OpenBLAS: what compiled while loops call).
`--modules` times whole runs instead (`exe.run`) of examples/mlp.hlo and run.py's one-device
models (models.py; their jax lowering), with RunOptions(blas_threads=c) for each count and
with the count the run derives itself ("auto"): a module with large and small products
(the convnet's training step) shows what one run-wide count costs its small ones.
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

# (M, N, K): small, a transformer's attention product, medium, the MLP's layer, large.
SHAPES = [(64, 64, 64), (128, 128, 64), (128, 128, 128), (256, 256, 256),
          (256, 1024, 256), (512, 1024, 1024), (1024, 1024, 1024)]


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def libraries():
    from threadpoolctl import ThreadpoolController
    return ThreadpoolController().select(user_api="blas").lib_controllers


def timed(fn, a, b, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(a, b)
    return (time.perf_counter() - t0) / calls


def measure(fn, shape, counts, rounds: int, libs) -> dict:
    m, n, k = shape
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    fn(a, b)
    once = timed(fn, a, b, 3)
    calls = max(3, int(0.02 / max(once, 1e-7)))
    samples = {c: [] for c in counts}
    for _ in range(rounds):
        for c in counts:
            for lib in libs:
                lib.set_num_threads(c)
            fn(a, b)  # the pool at this count, warm
            samples[c].append(timed(fn, a, b, calls))
    return {c: statistics.median(s) for c, s in samples.items()}


def modules() -> dict:
    """{name: (Executable, arrays)}: examples/mlp.hlo and models.py's one-device models."""
    from pathlib import Path
    import xlaplug
    here = Path(__file__).resolve().parent
    sys.path.insert(0, str(here))
    rng = np.random.default_rng(0)
    mlp = xlaplug.compile(here.parent / "examples" / "mlp.hlo")
    out = {"mlp": (mlp, [rng.standard_normal(p.shape.dims).astype(p.shape.dtype)
                         for p in mlp.module.entry.parameters])}
    import jax
    import models
    for name in models.MODELS:
        if name in models.DEVICES:
            continue
        w = models.make_model(name, False, rng)
        out[name] = (xlaplug.compile(jax.jit(w.jf).lower(*w.args).as_text(dialect="hlo")),
                     list(w.args))
    return out


def measure_modules(counts, rounds: int) -> list[dict]:
    """Per module: the median ms of a run at each count and at the derived one ("auto")."""
    from xlaplug.backends.cpu.blas_threads import largest_product
    from xlaplug.runtime.options import RunOptions
    records = []
    for name, (exe, arrays) in modules().items():
        opts = {"auto": RunOptions(), **{str(c): RunOptions(blas_threads=c) for c in counts}}
        for o in opts.values():
            exe.run(*arrays, options=o)
        samples = {k: [] for k in opts}
        for _ in range(rounds):
            for k, o in opts.items():
                samples[k].append(min(exe.run(*arrays, options=RunOptions.of(
                    o, repeat=3)).run_times))
        records.append({"module": name, "largest_gemm_flops": largest_product(exe.module),
                        "auto_threads": exe.prepared(RunOptions()).blas_threads,
                        "ms": {k: statistics.median(v) * 1e3 for k, v in samples.items()}})
    return records


def main(argv=None) -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counts", default=None, help=f"thread counts (default 1,2,4,..,{cores})")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--numba", action="store_true", help="numba's np.dot (scipy's BLAS) too")
    ap.add_argument("--modules", action="store_true", help="whole runs of models instead")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    counts = [int(c) for c in a.counts.split(",")] if a.counts else \
        sorted({1, cores, *(1 << i for i in range(1, 8) if 1 << i < cores)})
    if a.modules:
        before = uptime()
        records = measure_modules(counts, a.rounds)
        after = uptime()
        if a.json:
            print(json.dumps({"uptime_before": before, "uptime_after": after,
                              "cores": cores, "records": records}))
            return 0
        keys = ["auto", *map(str, counts)]
        print(f"before: {before}\n{cores} cores; ms per run at each BLAS thread count")
        print(f"{'module':18} {'largest':>9} {'auto=':>5} " + " ".join(f"{k:>9}" for k in keys))
        for r in records:
            print(f"{r['module']:18} {r['largest_gemm_flops']:>9.2g} {r['auto_threads']!s:>5} "
                  + " ".join(f"{r['ms'][k]:>9.2f}" for k in keys))
        print(f"after:  {after}")
        return 0
    fns = {"numpy": np.matmul}
    if a.numba:
        import numba
        import scipy.linalg.cython_blas  # noqa: F401 - numba's np.dot calls it
        fns["numba"] = numba.njit(lambda x, y: np.dot(x, y))
    libs = libraries()
    first = [lib.num_threads for lib in libs]
    before = uptime()
    records = []
    try:
        for name, fn in fns.items():
            for shape in SHAPES:
                got = measure(fn, shape, counts, a.rounds, libs)
                records.append({"blas": name, "shape": "x".join(map(str, shape)),
                                "us": {str(c): t * 1e6 for c, t in got.items()}})
    finally:
        for lib, n in zip(libs, first):
            lib.set_num_threads(n)
    after = uptime()
    if a.json:
        print(json.dumps({"uptime_before": before, "uptime_after": after, "cores": cores,
                          "libraries": [lib.filepath for lib in libs], "records": records}))
        return 0
    print(f"before: {before}\n{cores} cores; {', '.join(lib.filepath for lib in libs)}")
    print(f"{'blas':6} {'M x N x K':>16} " + " ".join(f"{f'{c} thr us':>11}" for c in counts)
          + "   (ratio to 1 thread)")
    for r in records:
        us = [r["us"][str(c)] for c in counts]
        print(f"{r['blas']:6} {r['shape']:>16} " + " ".join(f"{t:>11.1f}" for t in us)
              + "   " + " ".join(f"{t / us[0]:.2f}" for t in us))
    print(f"after:  {after}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
