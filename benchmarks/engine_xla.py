"""`--engine xla` against `jax.jit` and against xlaplug's interpreter, measured in one run.

    python benchmarks/engine_xla.py [--repeat N] [--only NAME[,NAME]] [--quick] [--json]

The one-device workloads of run.py (no plugin ops in them: the engine hands XLA the module
as read), each timed three ways on the same inputs, as the median of N runs after a warm-up:

  jax.jit      the compiled jax function on arguments already on the device (run.py's
               XLA:CPU column);
  engine xla   `xlaplug.compile(hlo, keep_source=True).run(engine="xla", repeat=N)`: XLA:CPU
               through jaxlib compiling the module text, its median run time;
  interpreter  the same executable run by xlaplug's interpreter.

The engine's goal (issue 22): within 1.1x of jax.jit on modules with no plugin ops.  Its
runs include copying numpy inputs in and outputs out, which jax.jit's do not; the table says
so.  The load average is printed before and after: above 0.5 the ratios are not figures.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402

from measure import close_enough, time_xla  # noqa: E402
from models import DEVICES  # noqa: E402
from workloads import WORKLOADS, make_workload  # noqa: E402


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def bench(name: str, quick: bool, repeat: int) -> dict:
    import jax

    import xlaplug
    w = make_workload(name, quick, np.random.default_rng(0))
    cpu = jax.devices("cpu")[0]
    with jax.default_device(cpu):
        xla, hlo_text, ref = time_xla(jax, w.jf, w.args, cpu, repeat)
    exe = xlaplug.compile(hlo_text, keep_source=True)
    rec = {"workload": name, "jax_ms": xla["run_ms"]}
    for engine in ("xla", "interpreter"):
        first = exe.run(*w.args, engine=engine)  # compile, numba JIT, warm caches
        ok, err = close_enough(first.outputs, ref, w.dtype)
        if not ok:
            print(f"WARNING: {name}: --engine {engine} differs from jax.jit (max err {err:.3g})",
                  file=sys.stderr)
            rec[f"{engine}_ms"] = None
            continue
        res = exe.run(*w.args, engine=engine, repeat=repeat)
        rec[f"{engine}_ms"] = 1e3 * statistics.median(res.run_times)
    for engine in ("xla", "interpreter"):
        t = rec[f"{engine}_ms"]
        rec[f"{engine}_over_jax"] = t / rec["jax_ms"] if t else None
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
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
    print(f"load average before: {before}; cores: {os.cpu_count()}")
    print(f"{'workload':18} {'jax.jit ms':>11} {'engine xla ms':>14} {'interp ms':>10} "
          f"{'xla/jax':>8} {'interp/jax':>11}")
    for r in rows:
        def f(v, unit=""):
            return "-" if v is None else f"{v:.3g}{unit}"
        print(f"{r['workload']:18} {f(r['jax_ms']):>11} {f(r['xla_ms']):>14} "
              f"{f(r['interpreter_ms']):>10} {f(r['xla_over_jax'], 'x'):>8} "
              f"{f(r['interpreter_over_jax'], 'x'):>11}")
    print(f"load average after: {after} (engine runs include numpy inputs in and outputs out)")
    if max(float(x) for x in before.split(", ")[:1] + after.split(", ")[:1]) > 0.5:
        print("WARNING: load above 0.5: these ratios are not figures to quote", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
