"""Parse speed: instructions per CPU second for a 10,000+ instruction module, parsed alone and
parsed and verified, as the CLI reads a module (driver.load_text, the cyclic GC paused).

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
    import os

    from xlaplug.runtime.driver import load_text
    from xlaplug.hlo import parse_module
    from xlaplug.passes.manager import cyclic_gc_paused

    text = build_module_text(args.instructions)
    load_text(text)  # warm: grammar tables and caches
    rows = {"parse": [], "parse + verify": []}
    count = 0
    for _ in range(args.repeat):
        # As the CLI reads a module (driver.load_text): the cyclic collector paused.
        with cyclic_gc_paused():
            c0 = time.process_time()
            m = parse_module(text)
            rows["parse"].append(time.process_time() - c0)
        c0 = time.process_time()
        m = load_text(text)
        rows["parse + verify"].append(time.process_time() - c0)
        count = m.instruction_count()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"module: {count} instructions, {len(text.splitlines())} lines, "
          f"{len(text) / 1e6:.2f} MB (load average {load:.1f} on {os.cpu_count()} cores)")
    for what, cpu in rows.items():
        med, best = statistics.median(cpu), min(cpu)
        print(f"{what + ':':16s}CPU median {med:.3f} s, best {best:.3f} s: "
              f"{count / med:,.0f} instructions/s (best {count / best:,.0f})")


if __name__ == "__main__":
    main()
