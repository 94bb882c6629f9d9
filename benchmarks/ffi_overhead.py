"""A plugin kernel served inside XLA (issue 22): what a call costs.

    python benchmarks/ffi_overhead.py [--steps 10000] [--size 16777216] [--check-only]

Per-call overhead: a 10,000-step `lax.fori_loop` whose body is `y = x * a + 1` on f32[8],
done by (1) the compiled FFI handler of an @njit kernel, (2) the Python FFI handler of a
numpy kernel, (3) `jax.pure_callback` of the same numpy code, against (0) the same math in
jnp; the overhead is (loop time - jnp loop time) / steps.  Throughput: one call on
f32[size] (16M elements) against jnp.  Everything is measured in this one run and printed
as ratios, with the machine's `uptime` load, since a loaded machine moves every number.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from numba import njit  # noqa: E402

from xlaplug.plugin import Plugin  # noqa: E402

plugin = Plugin("bench_ffi", description="y = x * a + 1, as an @njit and a numpy kernel")


@plugin.kernel("bench.axpb_compiled")
@njit(["void(float32[::1], float32[::1], float32)"])
def axpb_compiled(x, out, a):
    for i in range(x.size):
        out[i] = x[i] * a + np.float32(1)


@plugin.kernel("bench.axpb_python")
def axpb_python(x, out, *, a):
    np.multiply(x, a, out=out)
    out += 1


def _median_time(fn, reps: int) -> float:
    fn()  # compile and warm
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--size", type=int, default=16 * 1024 * 1024)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--check-only", action="store_true", help="run each once, compare, no timing")
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp

    from xlaplug.xla.ffi import register_op
    for op in ("bench.axpb_compiled", "bench.axpb_python"):
        served = register_op(op, plugin.kernels[(op, "cpu")])
        print(f"{op}: {served.how}" + (f" ({served.reason})" if served.reason else ""))
    a = np.float32(1.0001)

    def ffi(op):
        return lambda x: jax.ffi.ffi_call(op, jax.ShapeDtypeStruct(x.shape, x.dtype))(x, a=a)

    def callback(x):
        return jax.pure_callback(lambda v: np.asarray(v) * a + np.float32(1),
                                 jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    ways = {"jnp": lambda x: x * a + 1, "compiled handler": ffi("bench.axpb_compiled"),
            "Python handler": ffi("bench.axpb_python"), "pure_callback": callback}
    steps = 3 if args.check_only else args.steps
    x8 = jnp.linspace(0, 1, 8, dtype=jnp.float32)
    loops, values = {}, {}
    for name, step in ways.items():
        loop = jax.jit(lambda x, step=step: jax.lax.fori_loop(0, steps, lambda i, v: step(v), x))
        values[name] = np.asarray(loop(x8))
        loops[name] = loop
    big = jnp.linspace(0, 1, 1024 if args.check_only else args.size, dtype=jnp.float32)
    once = {name: jax.jit(ways[name]) for name in ("jnp", "compiled handler", "Python handler")}
    for name, fn in once.items():
        values["big " + name] = np.asarray(fn(big))
    bad = [k for k in values if not np.allclose(values[k], values["big jnp" if k.startswith("big")
                                                                   else "jnp"], rtol=1e-5)]
    if bad:
        print("MISMATCH:", ", ".join(bad))
        return 1
    if args.check_only:
        print("all ways agree with jnp")
        return 0

    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"uptime: {load}")
    t = {name: _median_time(lambda f=f: f(x8).block_until_ready(), args.reps)
         for name, f in loops.items()}
    print(f"\nper call inside a {steps}-step fori_loop on f32[8] (median of {args.reps}):")
    base = t["jnp"] / steps
    print(f"  {'jnp':18} {base * 1e6:8.3f} us per step")
    for name in ("compiled handler", "Python handler", "pure_callback"):
        per = t[name] / steps
        print(f"  {name:18} {per * 1e6:8.3f} us per step, overhead over jnp "
              f"{(per - base) * 1e6:8.3f} us ({per / base:6.1f}x jnp)")
    print(f"  pure_callback / Python handler: {t['pure_callback'] / t['Python handler']:.1f}x;"
          f" pure_callback / compiled handler: {t['pure_callback'] / t['compiled handler']:.1f}x")
    tb = {name: _median_time(lambda f=f: f(big).block_until_ready(), args.reps)
          for name, f in once.items()}
    print(f"\nthroughput, one call on f32[{args.size}] (median of {args.reps}):")
    for name, sec in tb.items():
        print(f"  {name:18} {sec * 1e3:8.2f} ms  {args.size * 4 * 2 / sec / 1e9:6.2f} GB/s  "
              f"{sec / tb['jnp']:5.2f}x jnp's time")
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
