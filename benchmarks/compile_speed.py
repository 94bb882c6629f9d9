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
import time


def mixed_module(n: int) -> str:
    """About n instructions: calls, tuples, fusions and elementwise chains."""
    s = "f32[256,256]"
    lines = ["HloModule mixed", "", "f {", f"  a = {s} parameter(0)", f"  b = {s} parameter(1)",
             f"  m = {s} multiply(a, b)", f"  ROOT r = {s} add(m, a)", "}", ""]
    blocks = max(1, n // 10)
    for k in range(blocks):
        lines += [f"fc{k} {{", f"  p0 = {s} parameter(0)", f"  p1 = {s} parameter(1)",
                  f"  ROOT s = {s} subtract(p0, p1)", "}", ""]
    lines += ["ENTRY main {", f"  x0 = {s} parameter(0)", f"  w = {s} parameter(1)"]
    for k in range(blocks):
        lines += [f"  c{k} = {s} call(x{k}, w), to_apply=f",
                  f"  t{k} = ({s}, {s}) tuple(c{k}, x{k})",
                  f"  g{k} = {s} get-tuple-element(t{k}), index=0",
                  f"  e{k} = {s} exponential(g{k})",
                  f"  m{k} = {s} multiply(e{k}, w)",
                  f"  u{k} = {s} fusion(m{k}, x{k}), kind=kLoop, calls=fc{k}",
                  f"  x{k + 1} = {s} add(u{k}, g{k})"]
    lines += [f"  ROOT out = {s} negate(x{blocks})", "}"]
    return "\n".join(lines) + "\n"


def phases(text: str) -> dict:
    """Seconds per phase (parse, verify, pipeline) and the instruction counts."""
    from xlaplug.hlo import parse_module
    from xlaplug.hlo.verifier import verify_module
    from xlaplug.passes import PassContext, PassManager, resolve_pipeline
    t0 = time.perf_counter()
    module = parse_module(text)
    t1 = time.perf_counter()
    verify_module(module)
    t2 = time.perf_counter()
    PassManager(resolve_pipeline(None)).run(module, PassContext())
    t3 = time.perf_counter()
    return {"parse": t1 - t0, "verify": t2 - t1, "pipeline": t3 - t2,
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
    n = runs[0]["instructions"]
    load = os.getloadavg()[0]
    print(f"module: {n} instructions ({runs[0]['after']} after the pipeline)")
    print(f"median of {args.repeat}: parse {med['parse']:.2f} s, verify {med['verify']:.2f} s, "
          f"default pipeline {med['pipeline']:.2f} s, total {sum(med.values()):.2f} s "
          f"(load average {load:.1f} on {os.cpu_count()} cores)")
    print(f"parse + verify: {n / (med['parse'] + med['verify']):,.0f} instructions/s")


if __name__ == "__main__":
    main()
