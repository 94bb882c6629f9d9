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
            then execute(repeat=N); the number is the median of its N run_times.
  XLA:CPU   lowered.compile(), one call (the reference output), one warm-up, then N calls of compiled(*device_args)
            followed by block_until_ready(); inputs are placed on the device beforehand.
  XLA:GPU   (--device cuda, when jax has a GPU backend) the same, with the inputs on the
            GPU; otherwise the column says why it is absent.
  numpy     one call (checked; the warm-up), then N calls.
A multi-device workload runs in a worker process (multi_device.py) on XLA's partitioned
module.

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
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import statistics
import sys
import time

# The XLA:CPU column is XLA:CPU by definition: keep jax off any accelerator it might find --
# except for --device cuda, where an XLA:GPU column is added when jax has a GPU (the CPU
# column then pins jax's default device to the CPU).
if "cuda" not in sys.argv[1:] and "--device=cuda" not in sys.argv[1:]:
    os.environ["JAX_PLATFORMS"] = "cpu"

import numpy as np  # noqa: E402

from models import DEVICES, MODELS, Workload, make_model  # noqa: E402  (benchmarks/models.py)

KERNELS = ["elementwise", "mlp", "softmax", "conv3x3", "while_loop", "scan_rnn"]
WORKLOADS = KERNELS + MODELS
# allclose(rtol, atol = ATOL_SCALE * max|ref|) per output, by the workload's element type.
# bf16 keeps 8 significant bits (a rounding is up to 2^-9 relative) and XLA:CPU computes bf16
# elementwise ops in f32 inside its fusions, rounding once per fusion output, where xlaplug's
# unfused ops round each result: a few roundings apart through a block, so 1/32 of the scale.
TOLERANCE = {"f32": (1e-4, 1e-5), "bf16": (3e-2, 3e-2)}
RTOL, ATOL_SCALE = TOLERANCE["f32"]


def warn(msg: str) -> None:
    print(f"WARNING: {msg}", file=sys.stderr, flush=True)


# ---- workloads -------------------------------------------------------------------------------

def make_kernel_workload(name: str, quick: bool, rng: np.random.Generator):
    """(description, jax fn, numpy fn, list of f32 numpy inputs) of the six kernel workloads."""
    import jax.numpy as jnp
    from jax import lax

    def normal(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    if name == "elementwise":
        n = 256 if quick else 2048

        def jf(x, y):
            return jnp.tanh(x) * y + jnp.exp(-x) - jnp.maximum(x, y) * 0.5 + jnp.sqrt(jnp.abs(y))

        def nf(x, y):
            return np.tanh(x) * y + np.exp(-x) - np.maximum(x, y) * np.float32(0.5) \
                + np.sqrt(np.abs(y))

        return f"f32[{n},{n}] x2, 8 ops", jf, nf, [normal(n, n), normal(n, n)]

    if name == "mlp":
        b, d, h = (64, 128, 128) if quick else (512, 1024, 1024)

        def jf(x, w1, b1, w2):
            return jnp.maximum(x @ w1 + b1, 0.0) @ w2

        def nf(x, w1, b1, w2):
            return np.maximum(x @ w1 + b1, np.float32(0)) @ w2

        args = [normal(b, d), normal(d, h, scale=d ** -0.5), normal(h, scale=0.1),
                normal(h, h, scale=h ** -0.5)]
        return f"x[{b},{d}] @ w1[{d},{h}] + b, relu, @ w2[{h},{h}]", jf, nf, args

    if name == "softmax":
        r, c = (256, 128) if quick else (4096, 1024)

        def jf(x):
            import jax
            return jax.nn.softmax(x, axis=-1)

        def nf(x):
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True)

        return f"f32[{r},{c}], last axis", jf, nf, [normal(r, c)]

    if name == "conv3x3":
        n, ci, hw, co = (2, 8, 16, 8) if quick else (8, 64, 56, 64)

        def jf(x, w):
            return lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                            dimension_numbers=("NCHW", "OIHW", "NCHW"))

        def nf(x, w):
            # Sum of 9 shifted 1x1 convolutions, each a BLAS matmul via tensordot.
            N, C, H, W = x.shape
            xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
            out = np.zeros((w.shape[0], N, H, W), np.float32)
            for i in range(3):
                for j in range(3):
                    out += np.tensordot(w[:, :, i, j], xp[:, :, i:i + H, j:j + W],
                                        axes=([1], [1]))
            return out.transpose(1, 0, 2, 3)

        args = [normal(n, ci, hw, hw), normal(co, ci, 3, 3, scale=(9 * ci) ** -0.5)]
        return f"{n}x{ci}x{hw}x{hw} NCHW -> {co} ch, SAME", jf, nf, args

    if name == "while_loop":
        iters = 100 if quick else 2000

        def jf(x):
            def body(i, c):
                return jnp.sin(c) * 0.9 + jnp.cos(c) * 0.1 + 0.001 * i
            return lax.fori_loop(0, iters, body, x)

        def nf(x):
            c = x
            for i in range(iters):
                c = np.sin(c) * np.float32(0.9) + np.cos(c) * np.float32(0.1) \
                    + np.float32(0.001 * i)
            return c

        return f"fori_loop {iters} its, f32[16]", jf, nf, [normal(16)]

    if name == "scan_rnn":
        steps, h = (50, 16) if quick else (1000, 64)

        def jf(h0, xs, w):
            def cell(c, x):
                c = jnp.tanh(w @ c + x)
                return c, c.sum()
            return lax.scan(cell, h0, xs)[1]  # the per-step sums: every step counts

        def nf(h0, xs, w):
            c, ys = h0, np.empty(len(xs), np.float32)
            for t in range(len(xs)):
                c = np.tanh(w @ c + xs[t])
                ys[t] = c.sum()
            return ys

        return (f"lax.scan {steps} steps, h[{h}] = tanh(w[{h},{h}] @ h + x)", jf, nf,
                [normal(h), normal(steps, h), normal(h, h, scale=h ** -0.5)])

    raise ValueError(name)


def make_workload(name: str, quick: bool, rng: np.random.Generator) -> Workload:
    if name in KERNELS:
        return Workload(*make_kernel_workload(name, quick, rng))
    return make_model(name, quick, rng)


# ---- environment header ------------------------------------------------------------------

def blas_info() -> str:
    """numpy's BLAS as it runs: threadpoolctl if installed, else OpenBLAS's own config call on
    the library numpy loaded, else np.show_config's build-time summary."""
    try:
        from threadpoolctl import threadpool_info
        for d in threadpool_info():
            if d.get("user_api") == "blas":
                return (f"{d.get('internal_api')} {d.get('version')} "
                        f"arch={d.get('architecture')} threads={d.get('num_threads')} "
                        f"({d.get('filepath')}) [threadpoolctl]")
    except ImportError:
        pass
    try:
        paths = sorted({ln.split()[-1] for ln in open("/proc/self/maps")
                        if "openblas" in ln.lower() and ln.split()[-1].startswith("/")})
        for p in paths:
            lib = ctypes.CDLL(p)
            for prefix, suffix in (("scipy_openblas", "64_"), ("scipy_openblas", ""),
                                   ("openblas", "64_"), ("openblas", "")):
                cfg = getattr(lib, f"{prefix}_get_config{suffix}", None)
                if cfg is None:
                    continue
                cfg.restype = ctypes.c_char_p
                text = cfg().decode().strip()
                extra = []
                core = getattr(lib, f"{prefix}_get_corename{suffix}", None)
                if core is not None:
                    core.restype = ctypes.c_char_p
                    extra.append(f"core={core().decode()}")
                nt = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
                if nt is not None:
                    extra.append(f"threads={nt()}")
                where = f"[runtime, {os.path.basename(p)}]"
                return f"{' '.join(text.split())} {' '.join(extra)} {where}"
    except Exception:
        pass
    try:
        cfg = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return (f"{cfg.get('name')} {cfg.get('version')}: "
                f"{cfg.get('openblas configuration', '')} [np.show_config, build-time]")
    except Exception as e:
        return f"unknown ({e})"


def environment() -> dict:
    import jax
    try:
        import numba
        numba_v, numba_threads = numba.__version__, numba.config.NUMBA_NUM_THREADS
    except ImportError:
        numba_v, numba_threads = None, None
    cpu = platform.processor() or ""
    try:
        for ln in open("/proc/cpuinfo"):
            if ln.startswith("model name"):
                cpu = ln.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {
        "python": platform.python_version(), "numpy": np.__version__, "jax": jax.__version__,
        "numba": numba_v, "numba_threads": numba_threads,
        "cpu": cpu, "cores": os.cpu_count(), "cores_usable": usable,
        "numpy_blas": blas_info(),
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
        "loadavg_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


# ---- measurement -------------------------------------------------------------------------

def ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def close_enough(got, ref, dtype: str = "f32") -> tuple[bool, float]:
    """Every output leaf within the dtype's tolerance of XLA's; the largest error over the
    leaves, relative to each leaf's max|ref| when there are several (else absolute)."""
    got, ref = leaves(got), leaves(ref)
    if len(got) != len(ref):
        return False, float("inf")
    rtol, atol_scale = TOLERANCE[dtype]
    ok, worst = True, 0.0
    for g, r in zip(got, ref):
        g, r = np.asarray(g, np.float64), np.asarray(r, np.float64)
        if g.shape != r.shape:
            return False, float("inf")
        scale = float(np.max(np.abs(r))) if r.size else 0.0
        ok &= bool(np.allclose(g, r, rtol=rtol, atol=atol_scale * max(scale, 1e-30)))
        err = float(np.max(np.abs(g - r))) if r.size else 0.0
        worst = max(worst, err / max(scale, 1e-30) if len(ref) > 1 else err)
    return ok, worst


def leaves(x) -> list:
    """The output leaves of a jax, numpy or xlaplug result, in jax.tree.leaves order."""
    if isinstance(x, (list, tuple)):
        return [y for v in x for y in leaves(v)]
    if isinstance(x, dict):
        return [y for k in sorted(x) for y in leaves(x[k])]
    return [x]


def time_calls(fn, repeat: int, warmup: int) -> tuple[list[float], object]:
    out = None
    for _ in range(warmup):
        out = fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return times, out


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
    rec: dict = {"workload": name, "desc": w.desc, "repeat": repeat, "dtype": w.dtype}

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
    steady = execute(module, w.args, device=device, repeat=repeat)
    run_s = statistics.median(steady.run_times)
    rec.update(run_ms=ms(run_s), run_times_ms=[ms(t) for t in steady.run_times],
               first_run_overhead_ms=max(rec["first_run_ms"] - ms(run_s), 0.0))
    return rec


def checked(name, who, rec, out, ref, dtype) -> dict:
    ok, err = close_enough(out, ref, dtype)
    rec.update(matches_xla=ok, max_abs_err=err)
    if not ok:
        scale = max(float(np.max(np.abs(np.asarray(r, np.float64)))) for r in leaves(ref))
        warn(f"{name}: {who} output does not match XLA:CPU (max err {err:.3g}, "
             f"max |ref| {scale:.3g})")
    return rec


def run_numpy(name, w, ref, repeat, check_only) -> dict:
    if w.nf is None:
        return {"run_ms": None, "absent": "no numpy version of this workload"}
    rec = checked(name, "numpy", {}, w.nf(*w.args), ref, w.dtype)  # also the warm-up call
    if not check_only and rec["matches_xla"]:
        np_times, _ = time_calls(lambda: w.nf(*w.args), repeat, 0)
        rec.update(run_ms=ms(statistics.median(np_times)),
                   run_times_ms=[ms(t) for t in np_times])
    return rec


def with_ratios(rec: dict) -> dict:
    xp, xla, npy = (rec["xlaplug"].get("run_ms"), rec["xla"].get("run_ms"),
                    rec["numpy"].get("run_ms"))
    rec["ratio_xlaplug_xla"] = xp / xla if xp and xla else None
    rec["ratio_xlaplug_numpy"] = xp / npy if xp and npy else None
    g = rec.get("xla_gpu", {}).get("run_ms")
    rec["ratio_xlaplug_xla_gpu"] = xp / g if xp and g else None
    return rec


def xla_peak_bytes(compiled) -> int | None:
    """XLA's buffer assignment (per device): arguments + outputs + temporaries, less what
    aliases."""
    try:
        m = compiled.memory_analysis()
        return int(m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
                   - m.alias_size_in_bytes)
    except Exception:  # noqa: BLE001 - a backend without the analysis: the column says "-"
        return None


def time_xla(jax, jf, args, dev, repeat: int, check_only: bool = False):
    """(timing record, lowered HLO text, output leaves) of jf compiled by XLA for `dev`."""
    dev_args = [jax.device_put(a, dev) for a in args]
    jax.block_until_ready(dev_args)
    t0 = time.perf_counter()
    lowered = jax.jit(jf).lower(*dev_args)
    lower_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    compiled = lowered.compile()
    compile_s = time.perf_counter() - t0
    rec, out = time_compiled(jax, compiled, dev_args, repeat, check_only)
    rec.update(platform=dev.platform, lower_ms=ms(lower_s), compile_ms=ms(compile_s))
    return rec, lowered.as_text(dialect="hlo"), out


def time_compiled(jax, compiled, dev_args, repeat: int, check_only: bool):
    """(timing record, output leaves as numpy) of an XLA executable on placed arguments."""
    t0 = time.perf_counter()
    out = jax.block_until_ready(compiled(*dev_args))
    first_s = time.perf_counter() - t0
    times = [first_s]
    if not check_only:
        times, out = time_calls(lambda: jax.block_until_ready(compiled(*dev_args)), repeat, 1)
    rec = {"first_call_ms": ms(first_s),
           "run_ms": None if check_only else ms(statistics.median(times)),
           "run_times_ms": [ms(t) for t in times], "peak_bytes": xla_peak_bytes(compiled)}
    return rec, [np.asarray(o) for o in jax.tree.leaves(out)]


def bench_in_worker(name, quick, repeat, device, passes, check_only) -> dict:
    """A multi-device workload in a fresh process (multi_device.py), its record back as JSON."""
    import subprocess
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, "--repeat", str(repeat),
           "--device", device] + (["--quick"] if quick else []) + (
           ["--check-only"] if check_only else []) + (["--passes", passes] if passes else [])
    p = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    sys.stderr.write(p.stderr)
    if p.returncode != 0 or not p.stdout.strip():
        raise RuntimeError(f"{name}: worker process failed (exit {p.returncode}): "
                           f"{(p.stderr.strip().splitlines() or ['no output'])[-1]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def devices_of(name: str, quick: bool) -> int:
    return DEVICES.get(name, (1, 1))[1 if quick else 0]


def cuda_missing() -> str | None:
    """Why xlaplug cannot run on CUDA here (None when it can): checked before any workload,
    so a machine with no GPU gets one line, not a driver traceback half-way through."""
    from xlaplug.backends.cuda_support import cuda_status
    ok, why = cuda_status()
    return None if ok else (f"xlaplug cannot run on CUDA here: {why} (numba's simulator, "
                            "NUMBA_ENABLE_CUDASIM=1, runs but its times mean nothing)")


def jax_gpu(jax):
    """jax's first GPU device, or why there is none."""
    try:
        gpus = jax.devices("gpu")
    except RuntimeError as e:
        return f"jax has no GPU backend ({str(e).splitlines()[0][:120]})"
    return gpus[0] if gpus else "jax found no GPU"


# ---- output ------------------------------------------------------------------------------

COLUMNS = [("workload", 17), ("xlaplug ms", 11), ("XLA:CPU ms", 11), ("numpy ms", 10),
           ("xlaplug/XLA", 12), ("xlaplug/np", 11), ("xlaplug compile ms", 19),
           ("xlaplug 1st-run +ms", 20), ("XLA compile ms", 15)]


def fmt(v, kind="ms") -> str:
    if v is None:
        return "-"
    if kind == "ratio":
        return f"{v:.2f}x"
    return f"{v:.3f}" if v < 1 else f"{v:.1f}" if v < 1000 else f"{v:.0f}"


def print_table(results: list[dict]) -> None:
    print("  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(COLUMNS)))
    print_rows(results)
    gpu = [r for r in results if "xla_gpu" in r]
    if gpu:
        print()
        for r in gpu:
            g = r["xla_gpu"]
            if "unavailable" in g:
                print(f"  {r['workload']:<17} XLA:GPU: not measured: {g['unavailable']}")
            else:
                check = "ok" if g["matches_xla_cpu"] else "MISMATCH"
                print(f"  {r['workload']:<17} XLA:GPU {fmt(g['run_ms'])} ms (compile "
                      f"{fmt(g['compile_ms'])} ms, vs XLA:CPU {check}); xlaplug/XLA:GPU "
                      f"{fmt(r['ratio_xlaplug_xla_gpu'], 'ratio')}")


def print_rows(results: list[dict]) -> None:
    for r in results:
        x = r["xlaplug"]
        cells = [r["workload"], fmt(x.get("run_ms")) if "error" not in x else "ERROR",
                 fmt(r["xla"]["run_ms"]), fmt(r["numpy"].get("run_ms")),
                 fmt(r["ratio_xlaplug_xla"], "ratio"), fmt(r["ratio_xlaplug_numpy"], "ratio"),
                 fmt(x.get("compile_ms")), fmt(x.get("first_run_overhead_ms")),
                 fmt(r["xla"]["compile_ms"])]
        print("  ".join(c.rjust(w) if i else c.ljust(w)
                        for i, (c, (_, w)) in enumerate(zip(cells, COLUMNS))))
    print()
    for r in results:
        x = r["xlaplug"]
        check = "ERROR" if "error" in x else ("ok" if x["matches_xla"] else "MISMATCH")
        if "matches_xla" in r["numpy"]:
            check += f", numpy vs XLA: {'ok' if r['numpy']['matches_xla'] else 'MISMATCH'}"
        parts = f"parse {fmt(x.get('parse_ms'))} + pipeline {fmt(x.get('pipeline_ms'))}"
        if "setup_ms" in x:
            parts += f" + setup {fmt(x['setup_ms'])} ms; first run {fmt(x['first_run_ms'])} ms"
        mine, xla = x.get("peak_bytes"), r["xla"].get("peak_bytes")
        if mine is not None and xla:
            parts += (f"; buffers {mine / 2**20:.2f} MiB vs XLA's {xla / 2**20:.2f} MiB "
                      f"({mine / xla:.2f}x)")
        print(f"  {r['workload']:<17} {r['desc']}; xlaplug vs XLA: {check}; {parts}")


def worker(opts) -> int:
    """--worker NAME: the multi-device workload's record, one JSON line on stdout."""
    import multi_device
    multi_device.set_device_count(devices_of(opts.worker, opts.quick))
    w = make_workload(opts.worker, opts.quick, np.random.default_rng(0))
    rec = multi_device.bench_devices(sys.modules[__name__], opts.worker, w, opts.repeat,
                                     opts.device, opts.passes, opts.check_only)
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
    ap.add_argument("--json", action="store_true", help="print one JSON object instead")
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    ap.add_argument("--check-only", action="store_true", help="run each implementation once "
                    "and check its outputs against XLA's; time nothing (exit 1 on a mismatch)")
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

    env = environment()
    if not opts.json:
        print(f"xlaplug benchmark: device={opts.device}, repeat={opts.repeat} (median, warm-up "
              f"excluded){', QUICK sizes' if opts.quick else ''}")
        print(f"cpu: {env['cpu']}, {env['cores']} cores ({env['cores_usable']} usable); "
              f"load avg {', '.join(f'{v:.2f}' for v in env['loadavg_start'] or [])}")
        print(f"numpy {env['numpy']} BLAS: {env['numpy_blas']}")
        print(f"OPENBLAS_CORETYPE={env['OPENBLAS_CORETYPE']}  "
              f"OPENBLAS_NUM_THREADS={env['OPENBLAS_NUM_THREADS']}  jax {env['jax']} "
              f"(XLA:CPU)  numba {env['numba']} ({env['numba_threads']} threads)  "
              f"python {env['python']}")
        load = (env["loadavg_start"] or [0])[0]
        if load > (env["cores_usable"] or 1):
            print(f"NOTE: 1-minute load average {load:.2f} exceeds the {env['cores_usable']} "
                  "usable cores: other jobs share this machine, so timings are noisy "
                  "(multithreaded BLAS calls especially).")
        print(flush=True)

    results, t_start = [], time.perf_counter()
    for name in names:
        try:
            results.append(bench_one(name, opts.quick, opts.repeat, opts.device, opts.passes,
                                     opts.check_only))
        except DeviceError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    env["loadavg_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    total_s = time.perf_counter() - t_start

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


if __name__ == "__main__":
    sys.exit(main())
