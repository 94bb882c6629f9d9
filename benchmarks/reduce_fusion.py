"""Reduction fusion, before and after, in one process: softmax and layernorm over the last
axis of f32[4096,1024] (--quick: [256,1024]), each jax-lowered module run

  unfused   the default pipeline without `reduce-fusion` (what ran before it existed:
            numpy reduces, loop fusions for the elementwise chains),
  fused     the default pipeline (reduce-fusion: one fusion, one row loop),
  XLA:CPU   the same function through jax (its optimized HLO fuses the whole softmax
            into one YNNPACK fusion),

in alternating rounds (--rounds, each `--repeat` runs; the first run of each variant, with
its compile, is left out), medians over all runs; peak buffer bytes from xlaplug's buffer
assignment and XLA's `memory_analysis()`.  Outputs are checked against XLA's.

Run:  python benchmarks/reduce_fusion.py [--rounds 5] [--repeat 5] [--quick] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402

UNFUSED = "sdy-shard-map,custom-call-lowering,inline-calls,tuple-simplify,dce,loop-fusion"


def _layernorm(x):
    import jax.numpy as jnp
    from jax import lax
    m = jnp.mean(x, axis=-1, keepdims=True)
    v = jnp.mean((x - m) ** 2, axis=-1, keepdims=True)
    return (x - m) * lax.rsqrt(v + 1e-5)


def _workloads():
    import jax
    return {"softmax": lambda x: jax.nn.softmax(x, axis=-1), "layernorm": _layernorm}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    import jax
    from xlaplug.runtime.driver import compile_module
    from xlaplug.hlo import parse_module
    from xlaplug.runtime.runner import execute

    x = np.random.default_rng(0).standard_normal((256 if a.quick else 4096, 1024)) \
        .astype(np.float32)
    rows = []
    for name, f in _workloads().items():
        jf = jax.jit(f)
        lowered = jf.lower(x)
        text = lowered.as_text(dialect="hlo")
        compiled = lowered.compile()
        xd = jax.device_put(x)
        want = np.asarray(compiled(xd))
        mods = {}
        for variant, passes in (("unfused", UNFUSED), ("fused", None)):
            m = parse_module(text)
            compile_module(m, None, passes)
            r = execute(m, [x])  # warm-up: numba compiles or loads its cache
            np.testing.assert_allclose(r.outputs[0], want, rtol=1e-4, atol=1e-5)
            mods[variant] = (m, r.peak_bytes)
        times = {"unfused": [], "fused": [], "xla": []}
        for _ in range(a.rounds):
            for variant in ("unfused", "fused"):
                times[variant] += execute(mods[variant][0], [x], repeat=a.repeat).run_times
            for _ in range(a.repeat):
                t = time.perf_counter()
                compiled(xd).block_until_ready()
                times["xla"].append(time.perf_counter() - t)
        mem = compiled.memory_analysis()
        xla_bytes = (mem.argument_size_in_bytes + mem.output_size_in_bytes
                     + mem.temp_size_in_bytes) if mem is not None else None
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        rows.append({"workload": name, "shape": list(x.shape),
                     **{f"{k}_ms": v for k, v in med.items()},
                     "unfused_peak_bytes": mods["unfused"][1],
                     "fused_peak_bytes": mods["fused"][1], "xla_bytes": xla_bytes})
    load = os.getloadavg()
    if a.json:
        print(json.dumps({"rows": rows, "load_avg": load}, indent=1))
        return 0
    print(f"reduce fusion, median of {a.rounds} rounds x {a.repeat} runs; load avg "
          f"{load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}")
    print(f"{'workload':<10} {'unfused ms':>11} {'fused ms':>9} {'XLA ms':>8} {'fused/XLA':>10} "
          f"{'unfused/XLA':>12} {'buffers MiB (unfused, fused, XLA)':>34}")
    for r in rows:
        mib = [f"{b / 2**20:.1f}" if b is not None else "-" for b in
               (r["unfused_peak_bytes"], r["fused_peak_bytes"], r["xla_bytes"])]
        print(f"{r['workload']:<10} {r['unfused_ms']:>11.2f} {r['fused_ms']:>9.2f} "
              f"{r['xla_ms']:>8.2f} {r['fused_ms'] / r['xla_ms']:>9.2f}x "
              f"{r['unfused_ms'] / r['xla_ms']:>11.2f}x {', '.join(mib):>34}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
