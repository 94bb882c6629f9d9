"""run.py's workloads on D devices: XLA:CPU with D host devices and xlaplug with its devices as
`xlaplug run` runs them (threads, or fibers for small arrays; BLAS on the threads it sets),
on XLA's partitioned module (`compiled.as_text()`: num_partitions=D, the collectives written
out), in a worker process whose XLA device count is set before jax starts.

    python benchmarks/run.py --worker data_parallel [--quick] [--repeat N] [--check-only]

prints one JSON record, the same keys as run.py's single-device records.  xlaplug's device
contexts (thunk sequences, compiled kernels) and threads are made once and kept, as XLA keeps
its executable; its first call (numba compiles, cache loads) is timed apart.  Every device's
outputs are checked against XLA's, which are replicated (out_specs P()).
"""
from __future__ import annotations

import os
import statistics
import time

import numpy as np

import measure  # (benchmarks/measure.py: the checks and timing run.py uses)


def set_device_count(d: int) -> None:
    """Before jax is imported: d XLA host devices."""
    flag = f"--xla_force_host_platform_device_count={d}"
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()


def device_shards(jax, compiled, args, d: int) -> list[list[np.ndarray]]:
    """Each partition's arguments: the slices XLA's input shardings give its device (the mesh
    is jax.devices()[:d] in order, so partition p is jax device p)."""
    shardings = compiled.input_shardings[0]
    devs = jax.devices()[:d]
    return [[np.ascontiguousarray(a[s.devices_indices_map(a.shape)[dev]])
             for a, s in zip(args, shardings)] for dev in devs]


def bench_devices(name, w, repeat: int, device: str, passes, check_only: bool) -> dict:
    """The record of workload `w` (w.devices > 1), checked and timed as run.py's one-device
    records are (measure.py)."""
    import jax

    from xlaplug.runtime.executor import ExecContext
    from xlaplug.backends.spmd.groups import DeviceGrid
    from xlaplug.backends.cpu.blas_threads import largest_product
    from xlaplug.runtime.spmd.runner import blas_for_devices, devices_for, run_devices
    from xlaplug.runtime.driver import compile_module
    from xlaplug.hlo import parse_module
    d = w.devices
    if len(jax.devices()) < d:
        raise RuntimeError(f"{name}: jax has {len(jax.devices())} devices, needs {d}")
    rec: dict = {"workload": name, "desc": w.desc, "repeat": repeat, "dtype": w.dtype}
    t0 = time.perf_counter()
    lowered = jax.jit(w.jf).lower(*w.args)
    lower_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    compiled = lowered.compile()
    compile_s = time.perf_counter() - t0
    dev_args = [jax.device_put(a, s) for a, s in zip(w.args, compiled.input_shardings[0])]
    rec["xla"], ref = measure.time_compiled(jax, compiled, dev_args, repeat, check_only)
    rec["xla"].update(platform="cpu", lower_ms=measure.ms(lower_s),
                      compile_ms=measure.ms(compile_s), devices=d)

    x: dict = {}
    t0 = time.perf_counter()
    module = parse_module(compiled.as_text(), f"<{name}>")
    x["parse_ms"] = measure.ms(time.perf_counter() - t0)
    t0 = time.perf_counter()
    compile_module(module, None, passes)
    x["pipeline_ms"] = measure.ms(time.perf_counter() - t0)
    x["hlo_instructions"] = module.instruction_count()
    grid = DeviceGrid.of_module(module)
    if grid.count != d:
        raise RuntimeError(f"{name}: XLA's module is for {grid.count} devices, not {d}")
    args = device_shards(jax, compiled, w.args, d)
    t0 = time.perf_counter()
    contexts = [ExecContext(device, {}) for _ in range(d)]
    threads = devices_for(module, d)  # threads or fibers, as `xlaplug run` chooses; kept
    # and BLAS's threads as `xlaplug run` sets them for those (multi_run.run_in_process):
    # left at the library's count, every device thread's product also woke OpenBLAS's
    # workers, which spun on the cores the other device threads needed (2 cores, load 3.4:
    # 2.39 ms a step against 1.82 with the run's count, XLA 1.73).
    blas = blas_for_devices(largest_product(module), None, d, threads)
    x["peak_bytes"] = (contexts[0].sequence(module.entry).total_peak_bytes()
                       + sum(a.nbytes for a in args[0]))
    x["setup_ms"] = measure.ms(time.perf_counter() - t0)
    x["compile_ms"] = x["parse_ms"] + x["pipeline_ms"] + x["setup_ms"]

    def once():
        return run_devices(module, args, grid, lambda k: contexts[k], 60.0, threads,
                           blas_threads=blas)
    t0 = time.perf_counter()
    outs = once()
    x["first_run_ms"] = measure.ms(time.perf_counter() - t0)
    ok, err = True, 0.0  # every device's outputs checked before anything is timed
    for k, out in enumerate(outs):
        one = measure.checked(f"{name} device {k}", "xlaplug", {}, out, ref, w.dtype)
        ok, err = ok and one["matches_xla"], max(err, one["max_abs_err"])
    x.update(matches_xla=ok, max_abs_err=err, devices=d)
    if ok and not check_only:
        times, _ = measure.time_calls(once, repeat, 0)
        x["run_ms"] = measure.ms(statistics.median(times))
        x["first_run_overhead_ms"] = max(x["first_run_ms"] - x["run_ms"], 0.0)
        x["run_times_ms"] = [measure.ms(t) for t in times]
    rec["xlaplug"] = x
    rec["numpy"] = measure.run_numpy(name, w, ref, repeat, check_only)
    return measure.with_ratios(rec)
