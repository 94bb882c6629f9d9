"""Small programs (issue 23, item 7): a step of a small model, xlaplug against `jax.jit`.

    python benchmarks/small_models.py [--calls N] [--rounds R] [--only NAME[,NAME]] [--json]
                                      [--check-only]

Each program is written once in plain jax (flax and optax are not dependencies: the layers
and the optimizers are a few lines of jax.numpy each, as those libraries compute them):

  mlp_sgd        2-layer MLP (64 -> 128 -> 10, batch 32), softmax cross-entropy, grad + SGD
  cnn_bn         conv3x3 3->16, batch norm (batch statistics), relu, conv3x3 16->16, batch
                 norm, relu, mean pool, dense 10; grad + SGD (NHWC 8x16x16x3)
  transformer    pre-LN block, 2 heads, 32 tokens, d_model 64, causal attention, MLP 4x
                 (batch 4), forward
  adam           one adam step over four parameters (64x128, 128, 128x10, 10)
  lstm_scan      LSTM cell scanned over 32 steps (batch 8, input 32, hidden 64)
  gru_scan       GRU cell scanned over 32 steps (batch 8, input 32, hidden 64)
  sort_topk      sort of f32[4096], top-8 of each row of f32[32,256]
  gather_scatter embedding gather (1000x64 table, 256 ids), scatter-add of rows into it

Each is lowered with `jax.jit(f).lower(*args).as_text(dialect="hlo")`; xlaplug compiles that
text (`xlaplug.compile`) and runs it as `exe(*arrays)` (numpy in, numpy out), jax.jit runs its
own compilation on arrays already on the device, each call ending with block_until_ready.
Every output leaf of xlaplug's first call is checked against XLA's before anything is timed
(f32 allclose(rtol=1e-4, atol=1e-5 * max|ref|), as run.py); a mismatch prints a WARNING,
the program is not timed and the run exits 1.  xlaplug is then called WARMUP_CALLS + 1 times
and jax.jit once (warm-up: numba compiles or loads its cache; a while loop too short to
compile on its first call compiles on the call that takes its interpreted iterations past
compiled_while.INTERPRETED_ITERATIONS, a small fusion once it is hot: fused_loop.HOT_CALLS),
then both are timed in R rounds that alternate
them, N calls each, so a change in the machine's load hits both alike; the figure is the
median over the rounds.  The load (`uptime`) is printed before and after, with a warning when
the 1-minute load is above 0.5: quote figures only from a quiet machine.
"""
from __future__ import annotations

import os

os.environ["JAX_PLATFORMS"] = "cpu"

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from api_call import uptime  # noqa: E402
from measure import close_enough, leaves, same_allocator  # noqa: E402
from small_programs import PROGRAMS  # noqa: E402

same_allocator()  # both engines under one malloc (measure.py)


WARMUP_CALLS = 10   # past fused_loop.HOT_CALLS: a small fusion compiles once it is hot


def warn(msg: str) -> None:
    print(f"WARNING: {msg}", file=sys.stderr, flush=True)


def per_call(fns: dict, calls: int, rounds: int, clock) -> dict:
    """{name: median seconds per call}, as api_call.per_call, on `clock`."""
    samples: dict = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = clock()
            for _ in range(calls):
                fn()
            samples[name].append((clock() - t0) / calls)
    return {name: statistics.median(s) for name, s in samples.items()}


def bench(name: str, calls: int, rounds: int, check_only: bool, passes=None,
          clock=time.perf_counter) -> dict:
    import jax
    import xlaplug
    f, args = PROGRAMS[name](np.random.default_rng(0))
    jf = jax.jit(f)
    exe = xlaplug.compile(jf.lower(*args).as_text(dialect="hlo"), passes=passes)
    dev_args = [jax.device_put(a) for a in args]
    ref = [np.asarray(x) for x in jax.tree.leaves(jf(*dev_args))]
    ok, err = close_enough(leaves(list(exe(*args))), ref)
    rec = {"program": name, "ok": ok, "max_err": err}
    if not ok:
        warn(f"{name}: xlaplug's outputs differ from XLA's (max error {err:.3g}); not timed")
        return rec
    if check_only:
        return rec
    jax.block_until_ready(jf(*dev_args))
    for _ in range(WARMUP_CALLS):  # a short loop compiles on the call that takes its
        exe(*args)                 # iterations past 32 (compiled_while.py), a small fusion
                                   # on its 9th call (fused_loop.py)
    t = per_call({"xlaplug": lambda: exe(*args),
                  "jax.jit": lambda: jax.block_until_ready(jf(*dev_args))}, calls, rounds,
                 clock)
    rec.update(xlaplug_ms=t["xlaplug"] * 1e3, jit_ms=t["jax.jit"] * 1e3,
               ratio=t["xlaplug"] / t["jax.jit"])
    return rec


def load_warning(line: str) -> None:
    try:
        load = float(line.split("load average:")[1].split(",")[0])
    except (IndexError, ValueError):
        return
    if load > 0.5:
        warn(f"load {load:.2f} > 0.5: these figures are not quotable")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--only", default=None, help="comma-separated programs")
    ap.add_argument("--passes", default=None, help="xlaplug's pass pipeline (as compile's)")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="cpu: this process's CPU time (threads summed), for before/after "
                         "comparisons on a loaded machine; quote wall figures")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--check-only", action="store_true", help="check outputs, time nothing")
    a = ap.parse_args(argv)
    names = a.only.split(",") if a.only else list(PROGRAMS)
    unknown = [n for n in names if n not in PROGRAMS]
    if unknown:
        print(f"error: unknown program {unknown[0]!r} (known: {', '.join(PROGRAMS)})",
              file=sys.stderr)
        return 2
    before = uptime()
    load_warning(before)
    clock = time.perf_counter if a.clock == "wall" else time.process_time
    records = [bench(n, a.calls, a.rounds, a.check_only, a.passes, clock) for n in names]
    after = uptime()
    load_warning(after)
    timed = [r["ratio"] for r in records if "ratio" in r]
    geo = math.exp(sum(map(math.log, timed)) / len(timed)) if timed else None
    bad = any(not r["ok"] for r in records)
    if a.json:
        print(json.dumps({"uptime_before": before, "uptime_after": after, "clock": a.clock,
                          "records": records, "geomean_ratio": geo}))
        return 1 if bad else 0
    print(f"before: {before}  (clock: {a.clock})")
    print(f"{'program':16} {'xlaplug ms':>11} {'jax.jit ms':>11} {'ratio':>7}")
    for r in records:
        if "ratio" in r:
            print(f"{r['program']:16} {r['xlaplug_ms']:>11.3f} {r['jit_ms']:>11.3f}"
                  f" {r['ratio']:>7.2f}")
        else:
            print(f"{r['program']:16} {'checked' if r['ok'] else 'WRONG':>11}"
                  f" (max error {r['max_err']:.2g})")
    if geo is not None:
        print(f"{'geometric mean':16} {'':>11} {'':>11} {geo:>7.2f}")
    print(f"after:  {after}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
