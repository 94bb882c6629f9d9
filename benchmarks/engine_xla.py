"""`--engine xla` against `jax.jit` and against xlaplug's interpreter, measured in one run.

    python benchmarks/engine_xla.py [--repeat N] [--only NAME[,NAME]] [--quick] [--json]

The one-device workloads of run.py (no plugin ops in them: the engine hands XLA the module
as read).  Each side is called twice untimed (jax.jit: its first call and a warm-up; the
engine and the interpreter: the first `exe.run`, which compiles and checks the outputs
against jax.jit's, and a warm-up), then jax.jit and the engine are timed in turn, one call
each, N times over -- interleaved, so a change in the machine's speed during the run
(jax.jit's own time moves by 20-50% run to run on the 13-core host) falls on both alike --
then the interpreter N times (after an interpreter product, BLAS threads still spinning
slowed the next XLA call), and each column is the median of its N.  What each time holds, the same work on both sides:

  jax.jit      `[np.asarray(y) for y in leaves(compiled(*placed))]`: the compiled jax
               function (`jax.jit(f).lower(...).compile()`) called on arguments already on
               the device, and its outputs as numpy arrays (views of XLA's buffers: that
               waits for the run, and copies nothing);
  engine xla   `RunResult.run_times` of `exe.run(*args, engine="xla")`, `exe =
               xlaplug.compile(hlo, keep_source=True)`: the execution of the kept XLA:CPU
               executable on arguments already placed (each call places its numpy inputs
               first and waits for the copy, outside the time: jax copies an array that
               is not 64-byte aligned) and its outputs as numpy arrays, as above;
  interpreter  `RunResult.run_times` of the same executable run by xlaplug's interpreter.

`call`: the whole call as a caller sees it, numpy arrays in and out: `exe.run(*args,
engine="xla")` (placing the inputs, the run, the RunResult) against the `jax.jit`-wrapped
function called on the numpy arrays (its dispatch and transfer) with its outputs as numpy.

`same bits`: whether every output of the engine equals jax.jit's bit for bit (both run
XLA's executable of one program; tests/test_ffi_engine.py checks the optimized modules
match).  The engine's goal (issue 22): `xla/jax` within 1.1x on modules with no plugin ops.
The load average is printed before and after: above 0.5 the ratios are not figures.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402

from measure import close_enough  # noqa: E402
from models import DEVICES  # noqa: E402
from workloads import WORKLOADS, make_workload  # noqa: E402


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bench(name: str, quick: bool, repeat: int) -> dict:
    import jax

    import xlaplug
    w = make_workload(name, quick, np.random.default_rng(0))
    cpu = jax.devices("cpu")[0]
    with jax.default_device(cpu):
        placed = [jax.device_put(a, cpu) for a in w.args]
        lowered = jax.jit(w.jf).lower(*placed)
        compiled = lowered.compile()
        jitted = jax.jit(w.jf)

    def jax_run():
        return [np.asarray(y) for y in jax.tree.leaves(compiled(*placed))]

    def jax_call():
        return [np.asarray(y) for y in jax.tree.leaves(jitted(*w.args))]
    ref = jax_run()
    jax_run(), jax_call(), jax_call()
    exe = xlaplug.compile(lowered.as_text(dialect="hlo"), keep_source=True)
    rec = {"workload": name, "same_bits": None}
    engines = []
    for engine in ("xla", "interpreter"):
        first = exe.run(*w.args, engine=engine)  # compiles (XLA), JITs (numba), warms caches
        ok, err = close_enough(first.outputs, ref, w.dtype)
        if not ok:
            print(f"WARNING: {name}: --engine {engine} differs from jax.jit (max err {err:.3g})",
                  file=sys.stderr)
            continue
        if engine == "xla":
            rec["same_bits"] = all(a.tobytes() == np.asarray(b).tobytes()
                                   for a, b in zip(first.outputs, ref))
        exe.run(*w.args, engine=engine)  # the warm-up jax.jit has too
        engines.append(engine)
    times = {k: [] for k in ["jax", "jax_call", "xla_call"] + engines}
    # jax.jit and the engine alternate; the interpreter is timed after them, in a block of its
    # own: BLAS threads still spinning after an interpreter product took XLA's cores in the
    # next call (the MLP's jax.jit went from 4 to 15 ms on 13 cores, 2026-12-06).
    for _ in range(repeat):
        times["jax"].append(_timed(jax_run))
        times["jax_call"].append(_timed(jax_call))
        if "xla" in engines:
            t0 = time.perf_counter()
            res = exe.run(*w.args, engine="xla")
            times["xla_call"].append(time.perf_counter() - t0)
            times["xla"].append(res.run_times[0])
    for _ in range(repeat if "interpreter" in engines else 0):
        times["interpreter"].append(exe.run(*w.args, engine="interpreter").run_times[0])
    med = {k: 1e3 * statistics.median(v) if v else None for k, v in times.items()}
    rec.update(jax_ms=med["jax"], xla_ms=med.get("xla"), interpreter_ms=med.get("interpreter"),
               jax_call_ms=med["jax_call"], xla_call_ms=med["xla_call"])
    for k in ("xla", "interpreter"):
        t = rec[f"{k}_ms"]
        rec[f"{k}_over_jax"] = t / rec["jax_ms"] if t else None
    t = rec["xla_call_ms"]
    rec["call_over_jax"] = t / rec["jax_call_ms"] if t else None
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--only", metavar="NAME[,NAME]")
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    ap.add_argument("--json", action="store_true")
    opts = ap.parse_args(argv)
    names = [n for n in WORKLOADS if n not in DEVICES]
    if opts.only:
        names = [n for n in names if n in opts.only.split(",")]
    before = load()
    rows = [bench(n, opts.quick, opts.repeat) for n in names]
    after = load()
    if opts.json:
        print(json.dumps({"load_before": before, "load_after": after, "rows": rows}, indent=2))
        return 0
    print(f"load average before: {before}; cores: {os.cpu_count()}; median of {opts.repeat}, "
          "interleaved")
    print(f"{'workload':18} {'jax.jit ms':>11} {'engine xla ms':>14} {'interp ms':>10} "
          f"{'xla/jax':>8} {'interp/jax':>11} {'call xla/jax':>13} {'same bits':>10}")
    for r in rows:
        def f(v, unit=""):
            return "-" if v is None else f"{v:.3g}{unit}"
        print(f"{r['workload']:18} {f(r['jax_ms']):>11} {f(r['xla_ms']):>14} "
              f"{f(r['interpreter_ms']):>10} {f(r['xla_over_jax'], 'x'):>8} "
              f"{f(r['interpreter_over_jax'], 'x'):>11} {f(r['call_over_jax'], 'x'):>13} "
              f"{'-' if r['same_bits'] is None else 'yes' if r['same_bits'] else 'NO':>10}")
    print(f"load average after: {after}")
    if max(float(x) for x in before.split(", ")[:1] + after.split(", ")[:1]) > 0.5:
        print("WARNING: load above 0.5: these ratios are not figures to quote", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
