"""How `compile` and the first `run` grow with the module: seconds per module shape at
10^3 and 10^4 instructions (10^5 with --large), the fitted growth exponent per shape
(log-log slope of the time against the instruction count: 1.0 is linear, 2.0 quadratic)
and the load average beside the figures.  The machine may be shared: the exponent says
more than the seconds.

    python scripts/compile_scaling.py                 # 10^3, 10^4
    python scripts/compile_scaling.py --large         # and 10^5
    python scripts/compile_scaling.py --sizes 1000,2000,4000 --shapes chain,fma_chain
    python scripts/compile_scaling.py --cli           # through `xlaplug compile` / `run`
    python scripts/compile_scaling.py --no-run        # compile only

Shapes (generated, no jax needed; every one about n instructions):
  chain        n dependent adds on f32[8] in the entry
  chain_call   the same chain in a computation the entry calls once
  fma_chain    x = x * a + b, n/2 times, on f32[8] (fused: the multiply-adds contract)
  big_chain    n dependent adds on f32[65536] (one loop fusion's worth of work)
  fanout       one value read by n/2 adds, summed back by a tree of n/2 adds
  call_depth   n/4 computations each adding and calling the next (inlined)
  while_body   a while loop of 2 trips whose body is a chain of n adds
Timed in this process through xlaplug.compile (parse, verify, passes) and the first call
of the executable (thunk sequence, kernels, one run), wall and CPU seconds of this process
(CPU time suffers less from a shared machine's load), in a fresh process per measurement
so no cache of an earlier size helps a later one (the kernel cache on disk is kept;
set XLAPLUG_CACHE_DIR to a new folder to time cold kernel compiles).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def chain(n: int, dims: str = "8") -> str:
    s = f"f32[{dims}]"
    lines = ["HloModule chain", "ENTRY main {", f"  x0 = {s} parameter(0)",
             f"  y = {s} parameter(1)"]
    lines += [f"  x{k + 1} = {s} add(x{k}, y)" for k in range(n)]
    return "\n".join(lines + [f"  ROOT r = {s} negate(x{n})", "}"]) + "\n"


def chain_call(n: int) -> str:
    s = "f32[8]"
    lines = ["HloModule chain_call", "body {", f"  x0 = {s} parameter(0)",
             f"  y = {s} parameter(1)"]
    lines += [f"  x{k + 1} = {s} add(x{k}, y)" for k in range(n)]
    lines += [f"  ROOT r = {s} negate(x{n})", "}", "ENTRY main {", f"  a = {s} parameter(0)",
              f"  b = {s} parameter(1)", f"  ROOT c = {s} call(a, b), to_apply=body", "}"]
    return "\n".join(lines) + "\n"


def fma_chain(n: int) -> str:
    s = "f32[8]"
    lines = ["HloModule fma_chain", "ENTRY main {", f"  x0 = {s} parameter(0)",
             f"  a = {s} parameter(1)", f"  b = {s} parameter(2)"]
    for k in range(n // 2):
        lines += [f"  m{k} = {s} multiply(x{k}, a)", f"  x{k + 1} = {s} add(m{k}, b)"]
    return "\n".join(lines + [f"  ROOT r = {s} negate(x{n // 2})", "}"]) + "\n"


def big_chain(n: int) -> str:
    return chain(n, "65536")


def fanout(n: int) -> str:
    s = "f32[8]"
    half = max(2, n // 2)
    lines = ["HloModule fanout", "ENTRY main {", f"  x = {s} parameter(0)",
             f"  y = {s} parameter(1)"]
    level = [f"a{k}" for k in range(half)]
    lines += [f"  a{k} = {s} add(x, y)" for k in range(half)]
    depth = 0
    while len(level) > 1:
        nxt = []
        for k in range(0, len(level) - 1, 2):
            name = f"t{depth}_{k // 2}"
            lines.append(f"  {name} = {s} add({level[k]}, {level[k + 1]})")
            nxt.append(name)
        if len(level) % 2:
            nxt.append(level[-1])
        level, depth = nxt, depth + 1
    return "\n".join(lines + [f"  ROOT r = {s} negate({level[0]})", "}"]) + "\n"


def call_depth(n: int) -> str:
    s = "f32[8]"
    levels = max(1, n // 4)
    comps = [f"c0 {{\n  p = {s} parameter(0)\n  q = {s} parameter(1)\n"
             f"  ROOT r = {s} add(p, q)\n}}"]
    for k in range(1, levels):
        comps.append(f"c{k} {{\n  p = {s} parameter(0)\n  q = {s} parameter(1)\n"
                     f"  a = {s} add(p, q)\n  ROOT r = {s} call(a, q), to_apply=c{k - 1}\n}}")
    entry = (f"ENTRY main {{\n  x = {s} parameter(0)\n  y = {s} parameter(1)\n"
             f"  ROOT r = {s} call(x, y), to_apply=c{levels - 1}\n}}")
    return "HloModule call_depth\n" + "\n".join(comps + [entry]) + "\n"


def while_body(n: int) -> str:
    s, t = "f32[8]", "(s32[], f32[8], f32[8])"
    body = ["body {", f"  st = {t} parameter(0)", "  i = s32[] get-tuple-element(st), index=0",
            f"  x0 = {s} get-tuple-element(st), index=1",
            f"  y = {s} get-tuple-element(st), index=2"]
    body += [f"  x{k + 1} = {s} add(x{k}, y)" for k in range(n)]
    body += ["  one = s32[] constant(1)", "  j = s32[] add(i, one)",
             f"  ROOT out = {t} tuple(j, x{n}, y)", "}"]
    cond = ["cond {", f"  st = {t} parameter(0)", "  i = s32[] get-tuple-element(st), index=0",
            "  two = s32[] constant(2)",
            "  ROOT lt = pred[] compare(i, two), direction=LT", "}"]
    entry = ["ENTRY main {", f"  x = {s} parameter(0)", f"  y = {s} parameter(1)",
             "  zero = s32[] constant(0)", f"  init = {t} tuple(zero, x, y)",
             f"  w = {t} while(init), condition=cond, body=body",
             f"  ROOT r = {s} get-tuple-element(w), index=1", "}"]
    return "HloModule while_body\n" + "\n".join(body + cond + entry) + "\n"


SHAPES = {"chain": chain, "chain_call": chain_call, "fma_chain": fma_chain,
          "big_chain": big_chain, "fanout": fanout, "call_depth": call_depth,
          "while_body": while_body}


def measure_in_process(shape: str, n: int, run: bool, passes: str | None) -> dict:
    """Seconds of xlaplug.compile and of the first call, in this process."""
    import numpy as np
    import xlaplug
    text = SHAPES[shape](n)
    xlaplug.compile(SHAPES[shape](20), passes=passes)  # imports, plugins: not the module's
    t0, c0 = time.perf_counter(), time.process_time()
    exe = xlaplug.compile(text, passes=passes)
    t1, c1 = time.perf_counter(), time.process_time()
    out = {"instructions": text.count(" = "), "compile_s": t1 - t0, "compile_cpu_s": c1 - c0,
           "after_passes": exe.module.instruction_count()}
    if run:
        rng = np.random.default_rng(0)
        args = [rng.standard_normal(p.shape.dims).astype(np.float32)
                for p in exe.module.entry.parameters]
        exe(*args)
        out["run_s"] = time.perf_counter() - t1
        out["run_cpu_s"] = time.process_time() - c1
    return out


def measure_cli(shape: str, n: int, run: bool, passes: str | None) -> dict:
    """Seconds of `xlaplug compile FILE` and `xlaplug run FILE`, each a fresh process."""
    text = SHAPES[shape](n)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{shape}.hlo"
        path.write_text(text)
        extra = ["--passes", passes] if passes else []
        out = {"instructions": text.count(" = ")}
        for verb in ("compile", "run") if run else ("compile",):
            cmd = [sys.executable, "-m", "xlaplug", verb, str(path), *extra]
            if verb == "compile":
                cmd += ["-o", os.devnull]
            t0 = time.perf_counter()
            done = subprocess.run(cmd, capture_output=True, text=True)
            out[f"{verb}_s"] = time.perf_counter() - t0
            if done.returncode:
                raise SystemExit(f"{shape} n={n}: xlaplug {verb} failed:\n{done.stderr[-2000:]}")
    return out


def exponent(points: list[tuple[int, float]]) -> float | None:
    """Least-squares slope of log(time) against log(n)."""
    pts = [(math.log(n), math.log(t)) for n, t in points if t > 0]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    den = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / den if den else None


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--large", action="store_true", help="also 10^5 instructions")
    ap.add_argument("--sizes", help="comma-separated instruction counts (default 1000,10000)")
    ap.add_argument("--shapes", help=f"comma-separated, of: {', '.join(SHAPES)}")
    ap.add_argument("--cli", action="store_true", help="time the CLI verbs, not the API")
    ap.add_argument("--no-run", action="store_true", help="time compile only")
    ap.add_argument("--passes", help="pipeline spec (default: the default pipeline)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # SHAPE N: a child's work
    args = ap.parse_args()
    if args.one:
        shape, n = args.one[0], int(args.one[1])
        fn = measure_cli if args.cli else measure_in_process
        print(json.dumps(fn(shape, n, not args.no_run, args.passes)))
        return
    sizes = ([int(s) for s in args.sizes.split(",")] if args.sizes
             else [1000, 10000] + ([100000] if args.large else []))
    shapes = args.shapes.split(",") if args.shapes else list(SHAPES)
    bad = [s for s in shapes if s not in SHAPES]
    if bad:
        raise SystemExit(f"error: unknown shape '{bad[0]}' (known: {', '.join(SHAPES)})")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    print(f"load average before: {load()} on {os.cpu_count()} cores")
    results = {}
    for shape in shapes:
        rows = []
        for n in sizes:
            cmd = [sys.executable, __file__, "--one", shape, str(n)]
            cmd += ["--cli"] * args.cli + ["--no-run"] * args.no_run
            cmd += ["--passes", args.passes] if args.passes else []
            done = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if done.returncode:
                print(f"{shape:11s} n={n}: failed\n{done.stderr[-3000:]}", flush=True)
                break
            row = json.loads(done.stdout.strip().splitlines()[-1])
            row["n"], row["load"] = n, os.getloadavg()[0]
            rows.append(row)
            timings = "  ".join(f"{k[:-2]} {row[k]:7.2f} s" for k in row if k.endswith("_s"))
            print(f"{shape:11s} n={n:>7,}  {timings}  (load {row['load']:.2f})", flush=True)
        fits = {k: exponent([(r["instructions"], r[k]) for r in rows])
                for k in (rows[0] if rows else {}) if k.endswith("_s")}
        results[shape] = {"rows": rows, "exponents": fits}
        print(f"{shape:11s} exponent: " + "  ".join(
            f"{k[:-2]} n^{v:.2f}" for k, v in fits.items() if v is not None), flush=True)
    print(f"load average after: {load()}")
    if args.json:
        print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
