"""How xlaplug's time grows with the shape, beside XLA:CPU's: where dispatch dominates (small
shapes) and where memory bandwidth or FLOPs do (large ones).

    python benchmarks/scaling.py                # both tables, five sizes each (~1-2 min)
    python benchmarks/scaling.py --quick        # three small sizes each, a smoke test
    python benchmarks/scaling.py --json
    python benchmarks/scaling.py --quick --check-only   # outputs checked, nothing timed
    python benchmarks/scaling.py --device cuda  # xlaplug on CUDA, an XLA:GPU column

Tables:
  elementwise  run.py's chain tanh(x)*y + exp(-x) - max(x, y)*0.5 + sqrt(|y|) on f32[n],
               n = 2^10, 2^14, 2^17, 2^20, 2^24; its floor is the bytes it must move (two
               inputs read, one output written: 12n) over this machine's copy bandwidth,
               measured in the same run (numpy copying a 256 MiB array: bytes read + written
               over the time, best of 5)
  matmul       x @ w, f32[s,s] square, s = 64, 256, 512, 1024, 2048; GFLOP/s = 2s^3 / time
Each size is lowered by jax (`jax.jit(f).lower(...)`), xlaplug's output checked against
XLA's (run.py's tolerance) before anything is timed, then xlaplug and XLA:CPU are timed in
alternating rounds with numpy doing the same (numpy's matmul is the same OpenBLAS xlaplug
calls), so a shared machine's load falls on all alike, enough calls a round to fill ~50 ms
(at least 3); the figure is the median call.  xlaplug's calls are the runs of
execute(repeat=k + 1) but its first (the thunk sequence made and the kernels loaded once a
round, not timed).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

if "cuda" not in sys.argv[1:] and "--device=cuda" not in sys.argv[1:]:
    os.environ["JAX_PLATFORMS"] = "cpu"

import numpy as np  # noqa: E402

from measure import close_enough, cuda_missing, jax_gpu, warn  # noqa: E402  (run.py's checks)

ELEMENTWISE = [2 ** 10, 2 ** 14, 2 ** 17, 2 ** 20, 2 ** 24]
MATMUL = [64, 256, 512, 1024, 2048]
ROUNDS = 5


def copy_bandwidth() -> float:
    """Bytes per second numpy copies (read + written) on a 256 MiB array, best of 5."""
    src = np.ones(64 << 20, np.float32)
    dst = np.empty_like(src)
    best = min(_timed(lambda: np.copyto(dst, src)) for _ in range(5))
    return 2 * src.nbytes / best


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def workload(kind: str, size: int, rng):
    import jax.numpy as jnp
    if kind == "elementwise":
        def f(x, y):
            return jnp.tanh(x) * y + jnp.exp(-x) - jnp.maximum(x, y) * 0.5 + \
                jnp.sqrt(jnp.abs(y))
        def nf(x, y):
            return np.tanh(x) * y + np.exp(-x) - np.maximum(x, y) * np.float32(0.5) + \
                np.sqrt(np.abs(y))
        args = [rng.standard_normal(size).astype(np.float32) for _ in range(2)]
        return f, nf, args
    args = [rng.standard_normal((size, size)).astype(np.float32),
            (rng.standard_normal((size, size)) * size ** -0.5).astype(np.float32)]
    return (lambda x, w: x @ w), (lambda x, w: x @ w), args


def measure(kind: str, size: int, device: str, quick: bool, gpu, check_only=False) -> dict:
    import jax

    from xlaplug.runtime.driver import compile_module
    from xlaplug.hlo import parse_module
    from xlaplug.runtime.runner import execute
    f, nf, args = workload(kind, size, np.random.default_rng(0))
    cpu = jax.devices("cpu")[0]
    with jax.default_device(cpu):
        dev_args = [jax.device_put(a, cpu) for a in args]
        lowered = jax.jit(f).lower(*dev_args)
        compiled = lowered.compile()
        ref = np.asarray(compiled(*dev_args))
    module = parse_module(lowered.as_text(dialect="hlo"), f"<{kind} {size}>")
    compile_module(module, None, None)
    first = execute(module, args, device=device, repeat=1)  # numba compiles, caches load
    ok, err = close_enough(first.outputs[0], ref)
    rec = {"kind": kind, "size": size, "matches_xla": ok, "max_abs_err": err}
    if not ok:
        warn(f"{kind} {size}: xlaplug output does not match XLA:CPU (max abs err {err:.3g})")
        return rec
    np_ok, np_err = close_enough(nf(*args), ref)
    if not np_ok:
        warn(f"{kind} {size}: numpy does not match XLA:CPU (max abs err {np_err:.3g})")
    if check_only:
        return rec
    xla_call = lambda: compiled(*dev_args).block_until_ready()  # noqa: E731
    steady = execute(module, args, device=device, repeat=2).run_times[-1]
    per_round = max(3, min(200, int(0.05 / max(_timed(xla_call), steady, 1e-6))))
    rounds = 1 if quick else ROUNDS
    ours, theirs, gpu_times, numpys = [], [], [], []
    gpu_call = None
    if gpu is not None:
        gpu_args = [jax.device_put(a, gpu) for a in args]
        gpu_exe = jax.jit(f).lower(*gpu_args).compile()
        gpu_call = lambda: gpu_exe(*gpu_args).block_until_ready()  # noqa: E731
        gpu_call()
    for _ in range(rounds):
        # a context's first run loads its kernels (compiled loops from numba's cache): dropped
        ours += execute(module, args, device=device, repeat=per_round + 1).run_times[1:]
        theirs += [_timed(xla_call) for _ in range(per_round)]
        numpys += [_timed(lambda: nf(*args)) for _ in range(per_round)]
        if gpu_call is not None:
            gpu_times += [_timed(gpu_call) for _ in range(per_round)]
    rec.update(calls=rounds * per_round, xlaplug_ms=1e3 * statistics.median(ours),
               xla_ms=1e3 * statistics.median(theirs),
               numpy_ms=1e3 * statistics.median(numpys))
    rec["ratio"] = rec["xlaplug_ms"] / rec["xla_ms"]
    if gpu_times:
        rec["xla_gpu_ms"] = 1e3 * statistics.median(gpu_times)
    return rec


def print_tables(report: dict) -> None:
    bw = report["copy_bandwidth_GBps"]
    gpu = report["xla_gpu"]
    extra = " XLA:GPU ms |" if gpu == "measured" else ""
    print(f"copy bandwidth {bw:.1f} GB/s (numpy copy of 256 MiB, read + written); load "
          f"average {report['load_start']:.2f} before, {report['load_end']:.2f} after")
    if gpu != "measured":
        print(f"XLA:GPU: {gpu}")
    print("\n| elements | xlaplug ms | XLA:CPU ms | xlaplug/XLA | numpy ms | floor ms |"
          f" xlaplug/floor | XLA/floor |{extra}")
    print("| ---: " * 8 + "|" + (" ---: |" if extra else ""))
    for r in report["elementwise"]:
        floor = 12 * r["size"] / (bw * 1e9) * 1e3
        print(f"| 2^{r['size'].bit_length() - 1} | {_cells(r)} | {floor:.4f} | "
              f"{_ratio(r.get('xlaplug_ms'), floor)} | {_ratio(r.get('xla_ms'), floor)} |"
              + (f" {r.get('xla_gpu_ms', 0):.4f} |" if extra else ""))
    print("\n| f32[s,s] @ f32[s,s] | xlaplug ms | XLA:CPU ms | xlaplug/XLA | numpy ms |"
          f" xlaplug GFLOP/s | XLA GFLOP/s |{extra}")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |" + (" ---: |" if extra else ""))
    for r in report["matmul"]:
        flop = 2 * r["size"] ** 3
        print(f"| {r['size']} | {_cells(r)} | {_gflops(flop, r.get('xlaplug_ms'))} | "
              f"{_gflops(flop, r.get('xla_ms'))} |"
              + (f" {r.get('xla_gpu_ms', 0):.4f} |" if extra else ""))


def _cells(r) -> str:
    if not r["matches_xla"]:
        return "MISMATCH | - | - | -"
    return (f"{r['xlaplug_ms']:.4f} | {r['xla_ms']:.4f} | {r['ratio']:.2f}x | "
            f"{r['numpy_ms']:.4f}")


def _ratio(a, b) -> str:
    return f"{a / b:.1f}x" if a else "-"


def _gflops(flop, t_ms) -> str:
    return f"{flop / (t_ms * 1e-3) / 1e9:.1f}" if t_ms else "-"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--quick", action="store_true", help="three small sizes each, one round")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--check-only", action="store_true", help="check xlaplug's outputs against "
                    "XLA's at each size; time nothing (exit 1 on a mismatch)")
    opts = ap.parse_args(argv)
    if opts.device == "cuda" and (why := cuda_missing()):
        print(f"error: --device cuda: {why}", file=sys.stderr)
        return 2
    import jax
    gpu = jax_gpu(jax) if opts.device == "cuda" else "not asked (--device cuda)"
    report = {"load_start": os.getloadavg()[0], "copy_bandwidth_GBps": copy_bandwidth() / 1e9,
              "xla_gpu": gpu if isinstance(gpu, str) else "measured"}
    gpu = None if isinstance(gpu, str) else gpu
    for kind, sizes in (("elementwise", ELEMENTWISE), ("matmul", MATMUL)):
        report[kind] = [measure(kind, s, opts.device, opts.quick, gpu, opts.check_only)
                        for s in (sizes[:3] if opts.quick else sizes)]
    report["load_end"] = os.getloadavg()[0]
    if opts.check_only:
        for k in ("elementwise", "matmul"):
            for r in report[k]:
                verdict = "ok" if r["matches_xla"] else "MISMATCH"
                print(f"{k} {r['size']}: xlaplug vs XLA: {verdict} "
                      f"(max abs err {r['max_abs_err']:.3g})")
    elif opts.json:
        print(json.dumps(report, indent=2))
    else:
        print_tables(report)
    bad = [r for k in ("elementwise", "matmul") for r in report[k] if not r["matches_xla"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
