"""Parse speed: instructions per second for a 10,000+ instruction module.

The module is built by jax (an unrolled chain of elementwise ops, dots, reductions and
slices, with the metadata XLA prints), so the text is what users actually feed in.
Run: python benchmarks/parse_speed.py [--instructions N]
"""
from __future__ import annotations

import argparse
import statistics
import time


def build_module_text(target: int) -> str:
    import jax
    import jax.numpy as jnp

    def f(x, w):
        for i in range(target // 8):
            y = jnp.tanh(x @ w) * 0.5 + x
            x = jnp.maximum(y, x[::-1]) - jnp.sum(y, axis=0, keepdims=True) / (i + 1)
        return x

    x = jnp.ones((8, 8), jnp.float32)
    return jax.jit(f).lower(x, x).as_text(dialect="hlo", debug_info=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--instructions", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    from xlaplug.hlo import parse_module

    text = build_module_text(args.instructions)
    parse_module(text)  # warm: grammar construction and caches
    times, cpu, count = [], [], 0
    for _ in range(args.repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        m = parse_module(text)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        count = m.instruction_count()
    best, med = min(times), statistics.median(times)
    import os
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"module: {count} instructions, {len(text.splitlines())} lines, {len(text) / 1e6:.2f} MB")
    print(f"parse:  wall best {best:.3f} s, median {med:.3f} s; CPU median "
          f"{statistics.median(cpu):.3f} s (load average {load:.1f} on {os.cpu_count()} cores)")
    print(f"speed:  {count / med:,.0f} instructions/s (wall median), {count / best:,.0f} (wall "
          f"best), {count / statistics.median(cpu):,.0f} (CPU time median)")


if __name__ == "__main__":
    main()
