"""Compile speed on a large module: parse, verify and the default pass pipeline, per phase.

The module is generated (no jax needed): n/10 blocks, each a `call` of a shared computation
(inline-calls), a tuple read back by get-tuple-element (tuple-simplify), an elementwise
chain on f32[256,256] (loop-fusion) and a kLoop fusion with its own fused computation, as
XLA prints them -- about 10 instructions a block.  Nothing runs: the figures are compile
work only.
Run: python benchmarks/compile_speed.py [--instructions N] [--repeat R]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

# The generator is the one tests/test_hostile_growth.py counts the work of.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from hostile_programs import mixed_module  # noqa: E402


def phases(text: str) -> dict:
    """Seconds per phase (parse, verify, pipeline) and the instruction counts."""
    from xlaplug.hlo import parse_module
    from xlaplug.hlo.verifier import verify_module
    from xlaplug.passes import PassContext, PassManager, resolve_pipeline
    from xlaplug.passes.manager import cyclic_gc_paused
    clock = time.perf_counter
    t0, c0 = clock(), time.process_time()
    with cyclic_gc_paused():  # as driver.load_module does (the pass manager pauses it too)
        module = parse_module(text)
        t1, c1 = clock(), time.process_time()
        verify_module(module)
        t2, c2 = clock(), time.process_time()
    PassManager(resolve_pipeline(None)).run(module, PassContext())
    t3, c3 = clock(), time.process_time()
    return {"parse": t1 - t0, "verify": t2 - t1, "pipeline": t3 - t2, "cpu": c3 - c0,
            "cpu_parse": c1 - c0, "cpu_verify": c2 - c1, "cpu_pipeline": c3 - c2,
            "instructions": parse_module(text).instruction_count(),
            "after": module.instruction_count()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--instructions", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    text = mixed_module(args.instructions)
    phases(mixed_module(100))  # warm: grammar, imports
    runs = [phases(text) for _ in range(args.repeat)]
    med = {k: statistics.median(r[k] for r in runs) for k in ("parse", "verify", "pipeline")}
    cpu = statistics.median(r["cpu"] for r in runs)
    cpus = {k: statistics.median(r["cpu_" + k] for r in runs) for k in med}
    n = runs[0]["instructions"]
    load = os.getloadavg()[0]
    print(f"module: {n} instructions ({runs[0]['after']} after the pipeline)")
    print(f"median of {args.repeat}: parse {med['parse']:.2f} s, verify {med['verify']:.2f} s, "
          f"default pipeline {med['pipeline']:.2f} s, total {sum(med.values()):.2f} s wall, "
          f"{cpu:.2f} s CPU (load average {load:.1f} on {os.cpu_count()} cores)")
    print("CPU: " + ", ".join(f"{k} {v:.2f} s" for k, v in cpus.items()))
    print(f"parse + verify: {n / (med['parse'] + med['verify']):,.0f} instructions/s wall, "
          f"{n / (cpus['parse'] + cpus['verify']):,.0f} per CPU second")


if __name__ == "__main__":
    main()
