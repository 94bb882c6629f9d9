"""xlaplug vs XLA:CPU (through jax) vs plain numpy, on the same inputs, in one run.

Workloads (full size / --quick size):
  elementwise  tanh(x)*y + exp(-x) - max(x, y)*0.5 + sqrt(|y|) on f32 [2048,2048] / [256,256]
  mlp          relu(x @ w1 + b) @ w2, x[512,1024], w1,w2[1024,1024] / x[64,128], w[128,128]
  softmax      softmax over the last axis of f32 [4096,1024] / [256,128]
  conv3x3      3x3 conv, NCHW, SAME padding, 8x64x56x56 -> 64 channels / 2x8x16x16 -> 8
  while_loop   lax.fori_loop, 2,000 iterations of a few elementwise ops on f32[16] / 100 its
  scan_rnn     lax.scan RNN cell tanh(w @ h + x), 1,000 steps of h[64] / 50 steps of h[16]
and the model workloads of models.py (a transformer block forward in f32 and bf16, its
training step, a conv net's training step, the data-parallel step on 4 devices).

For each workload the HLO is `jax.jit(f).lower(*args).as_text(dialect="hlo")`; xlaplug parses
it, runs its pass pipeline and executes it.  Every implementation is timed as the median of
--repeat runs after warm-up:

  xlaplug   execute(repeat=1) once (the first run: kernel setup and numba JIT land here),
            runs until the allocator settles as XLA's (measure.settle), then
            execute(repeat=N); the number is the median of its N run_times.
  XLA:CPU   lowered.compile(), one call (the reference output), warm-up calls until its allocator settles (measure.settle), then N calls of compiled(*device_args)
            followed by block_until_ready(); inputs are placed on the device beforehand.
  XLA:GPU   (--device cuda, when jax has a GPU backend) the same, with the inputs on the
            GPU; otherwise the column says why it is absent.
  numpy     one call (checked; the warm-up), then N calls.
A multi-device workload runs in a worker process (multi_device.py) on XLA's partitioned
module.

Two ratio columns (--cores both, the default): every workload on every core, then again
with xlaplug and XLA:CPU both held to one core (one_core.py: a child process on one CPU).
Beside each ratio is the 1-minute load average when that workload started; a load over 0.5
prints a warning: such figures are not to be quoted.

Compile columns: "xlaplug compile" = parse + pass pipeline + execute()'s setup (building
the thunk sequence); the extra cost of xlaplug's first run over a steady run is a separate
column ("xlaplug 1st-run +ms").  "XLA compile" = Lowered.compile() (HLO to executable;
tracing/lowering time is in the --json output as xla.lower_ms).

xlaplug's first-run output is checked against XLA's before any timed run, every output leaf
with allclose(rtol, atol = scale * max|ref|) -- f32 1e-4 and 1e-5, bf16 3e-2 and 3e-2 (a
scale-relative atol, since the MLP's outputs are O(10) and softmax's O(1e-3)); a mismatch
prints a WARNING line (to stderr), is not timed, and the run exits 1.  numpy is checked the
same way.  --check-only runs each implementation once and checks it, timing nothing.

Run:  python benchmarks/run.py [--repeat N] [--only NAME[,NAME]] [--device cpu|cuda]
                               [--passes SPEC] [--json] [--quick] [--check-only]
                               [--cores both|every|one] [--isa native|avx2]

This file is the driver (options, one workload's record, the worker process); the workloads
are workloads.py's and models.py's, the checks and timing measure.py's (shared with the other
benchmark scripts), the header and table report.py's.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

# The XLA:CPU column is XLA:CPU by definition: keep jax off any accelerator it might find --
# except for --device cuda, where an XLA:GPU column is added when jax has a GPU (the CPU
# column then pins jax's default device to the CPU).
if "cuda" not in sys.argv[1:] and "--device=cuda" not in sys.argv[1:]:
    os.environ["JAX_PLATFORMS"] = "cpu"
import isa  # noqa: E402
import one_core  # noqa: E402

isa.hold(sys.argv[1:])  # --isa avx2: both engines' code for AVX2, set before either starts
one_core.hold()  # the one-core child: on its CPU before numpy, numba and jax start

import measure  # noqa: E402

measure.same_allocator()  # both engines under one malloc (measure.py)

import numpy as np  # noqa: E402

from measure import (ATOL_SCALE, RTOL, checked, close_enough, cuda_missing, jax_gpu,  # noqa: E402
                     ms, run_numpy, settle, time_xla, warn, with_ratios)
from models import DEVICES  # noqa: E402
from report import environment, print_header, print_table  # noqa: E402
from workloads import WORKLOADS, devices_of, make_workload  # noqa: E402


class DeviceError(Exception):
    pass


def bench_one(name: str, quick: bool, repeat: int, device: str, passes: str | None = None,
              check_only: bool = False) -> dict:
    """One workload's record.  check_only: one run of each implementation, outputs checked,
    nothing timed (the test's mode)."""
    if devices_of(name, quick) > 1:  # XLA's host device count is set before jax starts
        return bench_in_worker(name, quick, repeat, device, passes, check_only)
    import jax

    rng = np.random.default_rng(0)
    w = make_workload(name, quick, rng)
    rec: dict = {"workload": name, "desc": w.desc, "repeat": repeat, "dtype": w.dtype,
                 "load": os.getloadavg()[0]}

    # XLA:CPU through jax (the reference values), then XLA:GPU where asked and present.
    cpu = jax.devices("cpu")[0]
    with jax.default_device(cpu):
        rec["xla"], hlo_text, ref = time_xla(jax, w.jf, w.args, cpu, repeat, check_only)
    if device == "cuda":
        gpu = jax_gpu(jax)
        if isinstance(gpu, str):
            rec["xla_gpu"] = {"unavailable": gpu}
        else:
            try:
                rec["xla_gpu"], _, gpu_out = time_xla(jax, w.jf, w.args, gpu, repeat,
                                                      check_only)
            except Exception as e:  # noqa: BLE001 - reported, the xlaplug timing goes on
                rec["xla_gpu"] = {"unavailable": f"XLA:GPU failed: {type(e).__name__}: {e}"}
            else:
                ok, err = close_enough(gpu_out, ref, w.dtype)
                rec["xla_gpu"].update(matches_xla_cpu=ok, max_abs_err=err)
    rec["xlaplug"] = run_xlaplug(name, hlo_text, w, ref, repeat, device, passes, check_only)
    rec["numpy"] = run_numpy(name, w, ref, repeat, check_only)
    return with_ratios(rec)


def run_xlaplug(name, hlo_text, w, ref, repeat, device, passes, check_only) -> dict:
    """Parse + pipeline, a first run, then the timed runs; the output checked against ref."""
    from xlaplug.runtime.driver import compile_module
    from xlaplug.hlo import parse_module
    from xlaplug.runtime.runner import execute
    t0 = time.perf_counter()
    module = parse_module(hlo_text, f"<{name}>")
    parse_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    compile_module(module, None, passes)
    pipeline_s = time.perf_counter() - t0
    rec = {"parse_ms": ms(parse_s), "pipeline_ms": ms(pipeline_s),
           "hlo_instructions": module.instruction_count()}
    try:
        first = execute(module, w.args, device=device, repeat=1)
    except Exception as e:
        if device != "cpu":
            raise DeviceError(f"{name}: xlaplug execute(device={device!r}) failed: "
                              f"{type(e).__name__}: {e}") from None
        warn(f"{name}: xlaplug failed: {type(e).__name__}: {e}")
        return {**rec, "error": f"{type(e).__name__}: {e}"}
    rec.update(setup_ms=ms(first.timings["compile_s"]), first_run_ms=ms(first.run_times[0]),
               peak_bytes=first.peak_bytes)
    rec["compile_ms"] = rec["parse_ms"] + rec["pipeline_ms"] + rec["setup_ms"]
    checked(name, "xlaplug", rec, first.outputs, ref, w.dtype)  # a wrong answer is not timed
    if check_only or not rec["matches_xla"]:
        return rec
    # Settled as XLA's is (measure.settle): the 13-core host's one-core elementwise row
    # gave 1.79-1.96x one run and 0.54x another, by which engine's 16 MB results still came
    # from fresh pages (each engine warmed 30 times: 0.99x).
    settle(lambda: execute(module, w.args, device=device, repeat=1))
    steady = execute(module, w.args, device=device, repeat=repeat)
    run_s = statistics.median(steady.run_times)
    rec.update(run_ms=ms(run_s), run_times_ms=[ms(t) for t in steady.run_times],
               first_run_overhead_ms=max(rec["first_run_ms"] - ms(run_s), 0.0))
    return rec


def bench_in_worker(name, quick, repeat, device, passes, check_only) -> dict:
    """A multi-device workload in a fresh process (multi_device.py), its record back as JSON."""
    import subprocess
    load = os.getloadavg()[0]
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, "--repeat", str(repeat),
           "--device", device] + (["--quick"] if quick else []) + (
           ["--check-only"] if check_only else []) + (["--passes", passes] if passes else [])
    p = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    sys.stderr.write(p.stderr)
    if p.returncode != 0 or not p.stdout.strip():
        raise RuntimeError(f"{name}: worker process failed (exit {p.returncode}): "
                           f"{(p.stderr.strip().splitlines() or ['no output'])[-1]}")
    return {**json.loads(p.stdout.strip().splitlines()[-1]), "load": load}


def worker(opts) -> int:
    """--worker NAME: the multi-device workload's record, one JSON line on stdout."""
    import multi_device
    multi_device.set_device_count(devices_of(opts.worker, opts.quick))
    w = make_workload(opts.worker, opts.quick, np.random.default_rng(0))
    rec = multi_device.bench_devices(opts.worker, w, opts.repeat, opts.device, opts.passes,
                                     opts.check_only)
    print(json.dumps(rec))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per implementation "
                    "(median reported; warm-up excluded)")
    ap.add_argument("--only", metavar="NAME[,NAME]",
                    help=f"run only these workloads: {', '.join(WORKLOADS)}")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="device for xlaplug; XLA:CPU and numpy run on the CPU, and cuda "
                         "adds XLA:GPU when jax has a GPU")
    ap.add_argument("--passes", default=None, help="xlaplug pass pipeline (default: the "
                    "default pipeline; e.g. custom-call-lowering,inline-calls,tuple-simplify,"
                    "dce runs without loop fusion)")
    ap.add_argument("--isa", choices=isa.CHOICES, default="native",
                    help="the instruction set both engines generate code for: the machine's "
                    "own, or AVX2 only (as on a CPU without AVX-512; benchmarks/isa.py)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead")
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    ap.add_argument("--check-only", action="store_true", help="run each implementation once "
                    "and check its outputs against XLA's; time nothing (exit 1 on a mismatch)")
    ap.add_argument("--cores", choices=["both", "every", "one"], default="both",
                    help="time on every core, with both held to one core (a child process "
                         "on one CPU), or both (default: two ratio columns)")
    ap.add_argument("--worker", metavar="NAME", choices=[n for n in WORKLOADS if n in DEVICES],
                    help=argparse.SUPPRESS)  # a multi-device workload, in its own process
    opts = ap.parse_args(argv)
    if opts.repeat < 1:
        ap.error("--repeat must be at least 1")
    if opts.device == "cuda" and (why := cuda_missing()):
        print(f"error: --device cuda: {why}", file=sys.stderr)
        return 2
    if opts.worker:
        return worker(opts)
    names = WORKLOADS
    if opts.only:
        names = [n.strip() for n in opts.only.split(",") if n.strip()]
        bad = [n for n in names if n not in WORKLOADS]
        if bad:
            ap.error(f"--only: unknown workload {', '.join(bad)} "
                     f"(choose from {', '.join(WORKLOADS)})")

    if opts.cores == "one" and not one_core.held():
        return show_one_core(opts)
    env = environment()
    if not opts.json:
        print_header(env, opts)

    results, t_start = [], time.perf_counter()
    for name in names:
        try:
            results.append(bench_one(name, opts.quick, opts.repeat, opts.device, opts.passes,
                                     opts.check_only))
        except DeviceError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    if opts.cores == "both" and opts.device == "cpu" and not opts.check_only:
        child, why = one_core.run_child(os.path.abspath(__file__), one_core.forward_args(opts))
        if child is None:
            warn(f"no one-core column: {why}")
        else:
            one_core.merge(results, child)
    env["loadavg_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    total_s = time.perf_counter() - t_start
    if not one_core.held() and not opts.check_only:  # figures only where something was timed
        warn_loaded(env)

    failed = any("error" in r["xlaplug"] or not r["xlaplug"]["matches_xla"]
                 or r["numpy"].get("matches_xla") is False for r in results)
    if opts.json:
        print(json.dumps({"environment": env, "options": {"repeat": opts.repeat,
                          "device": opts.device, "quick": opts.quick, "only": names},
                          "tolerance": {"rtol": RTOL, "atol": f"{ATOL_SCALE} * max|ref|"},
                          "results": results, "total_s": total_s, "ok": not failed}, indent=2))
    else:
        print_table(results)
        print(f"\ntotal {total_s:.1f} s; load avg at end "
              f"{', '.join(f'{v:.2f}' for v in env['loadavg_end'] or [])}")
    return 1 if failed else 0


def show_one_core(opts) -> int:
    """--cores one: the whole run in a child held to one core, reported as usual."""
    child, why = one_core.run_child(os.path.abspath(__file__), one_core.forward_args(opts))
    if child is None:
        print(f"error: --cores one: {why}", file=sys.stderr)
        return 2
    if opts.json:
        print(json.dumps(child, indent=2))
    else:
        print_header(child["environment"], opts)
        print_table(child["results"])
    return 0 if child["ok"] else 1


def warn_loaded(env: dict) -> None:
    """Figures taken where other work kept the machine busy are not to be quoted: XLA's
    thread pool loses cores to it first, which flatters xlaplug.  The test is the load at
    the run's start, before the benchmark's own work: the per-workload loads in the table
    include this run's processes (a run on every core lifts a quiet 2-core machine's
    1-minute load to ~0.8 within a minute)."""
    load = (env.get("loadavg_start") or [0.0])[0]
    if load > 0.5:
        warn(f"load average {load:.2f} when the run started (over 0.5): other work shares "
             "this machine; do not quote these figures")


if __name__ == "__main__":
    sys.exit(main())
