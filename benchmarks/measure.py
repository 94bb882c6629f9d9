"""How run.py and the other benchmark scripts measure and check: outputs compared with XLA's
(allclose per output leaf, the tolerance by element type), wall-clock timing of repeated
calls, XLA's executables compiled and timed through jax, numpy's versions timed, and the
ratios of a record; and whether the devices asked for can be measured (xlaplug on CUDA,
jax's GPU), so a missing one is one line before any work.  jax is handed in by the caller
(the scripts set its platform before importing it), never imported here."""
from __future__ import annotations

import statistics
import sys
import time

import numpy as np


def same_allocator() -> None:
    """glibc's malloc under the thresholds xlaplug's CPU contexts set for themselves
    (backends/device.keep_freed_buffers), set before either engine runs.  They are
    process-wide, so without this XLA:CPU ran under glibc's moving thresholds until xlaplug's
    first context and under the fixed ones after: its 16 MB results then came from fresh,
    page-faulted memory or from kept memory by the process's history -- its one-core softmax
    1.1 or 3.7-7.0 ms from run to run on a quiet machine (2026-12-06)."""
    from xlaplug.backends.device import keep_freed_buffers
    keep_freed_buffers()

# allclose(rtol, atol = ATOL_SCALE * max|ref|) per output, by the workload's element type.
# bf16 keeps 8 significant bits (a rounding is up to 2^-9 relative) and XLA:CPU computes bf16
# elementwise ops in f32 inside its fusions, rounding once per fusion output, where xlaplug's
# unfused ops round each result: a few roundings apart through a block, so 1/32 of the scale.
TOLERANCE = {"f32": (1e-4, 1e-5), "bf16": (3e-2, 3e-2)}
RTOL, ATOL_SCALE = TOLERANCE["f32"]


def warn(msg: str) -> None:
    print(f"WARNING: {msg}", file=sys.stderr, flush=True)


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


# XLA:CPU's warm-up: up to this many calls, or this many seconds of them.  Its large results
# come from memory its allocator either reuses or faults in afresh, and which of the two it
# settles on takes a few calls to tell: one-core exp of f32[2048,2048] ran 7.3-8.2 ms for
# the 15 calls after 3 warm-ups and 1.45-1.5 ms after 30 (2026-12-06, load 0.6) -- a median
# taken before it settles flatters xlaplug up to 5x.
SETTLE_CALLS, SETTLE_S = 30, 0.5


def settle(call) -> None:
    """Calls `call` until XLA's allocator has settled (SETTLE_CALLS calls or SETTLE_S s)."""
    t0 = time.perf_counter()
    for _ in range(SETTLE_CALLS):
        call()
        if time.perf_counter() - t0 > SETTLE_S:
            break


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
        call = lambda: jax.block_until_ready(compiled(*dev_args))  # noqa: E731
        settle(call)
        times, out = time_calls(call, repeat, 0)
    rec = {"first_call_ms": ms(first_s),
           "run_ms": None if check_only else ms(statistics.median(times)),
           "run_times_ms": [ms(t) for t in times], "peak_bytes": xla_peak_bytes(compiled)}
    return rec, [np.asarray(o) for o in jax.tree.leaves(out)]


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
