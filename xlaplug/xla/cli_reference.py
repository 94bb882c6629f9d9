"""The `run --reference xla` verb's body: run on xlaplug, run the portable artifact on
XLA:CPU with the same inputs, print the per-output table (or `--json`), return the exit
code (1 when any output is past the tolerance)."""
from __future__ import annotations

import json

import click
import numpy as np

from ..hlo.ir import Module


def check_reference_options(expect_path, repeat) -> None:
    """`--reference xla` is its own comparison, in this process: checked before any work."""
    from ..backends.spmd.mpi import launched_by_mpi
    from ..runtime.driver import OptionError
    from .jaxlib_names import require_jax
    if expect_path:
        raise OptionError("--reference xla and --expect: give one thing to compare against")
    if repeat != 1:
        raise OptionError("--reference xla runs once: drop --repeat")
    if launched_by_mpi():
        raise OptionError("--reference xla runs its devices as threads: run it without "
                          "mpiexec")
    require_jax("--reference xla")


def reference_command(pristine: str, module: Module, session, grid, npz, *, seed: int,
                      rtol, atol, max_memory, max_while_iterations, interpret: bool,
                      timeout: float, out_path, as_json: bool, timings: dict) -> int:
    from ..runtime.runner import execute, summarize
    from .reference import check_arguments, compare_devices, reference_for_text
    from .stats import diff_table
    check_arguments(module)
    if grid.count == 1:
        from ..runtime.runner import build_inputs
        per_device = [build_inputs(module, npz, seed)]
        res = execute(module, per_device[0], session, max_memory=max_memory,
                      max_while_iterations=max_while_iterations, seed=seed,
                      interpret=interpret)
        ours, run_s = [res.outputs], res.timings["run_s"]
    else:
        from ..runtime.multi_run import device_inputs, run_in_process
        per_device = device_inputs(module, npz, seed, grid.count)
        options = {"max_while_iterations": max_while_iterations, "seed": seed}
        if interpret:
            options.update(fusion_min_elements=1 << 62, interpret_loops=True)
        res = run_in_process(module, grid, per_device, device=session.device,
                             options=options, overrides=session.resolve, timeout=timeout)
        ours, run_s = res.per_device, res.timings["run_s"]
    theirs = reference_for_text(pristine, session.registry, per_device, grid.replicas,
                                grid.partitions)
    diffs = compare_devices(ours, theirs, rtol, atol)
    ok = all(d.ok for d in diffs)
    if out_path:
        import io

        from ..runtime.driver import write_atomic
        from ..runtime.multi_run import stacked
        outs = ours[0] if grid.count == 1 else stacked(ours)
        buf = io.BytesIO()
        np.savez(buf, **{f"out{k}": v for k, v in enumerate(outs)})
        write_atomic(out_path, buf.getvalue(), "--out")
    t = {"parse_s": timings["parse_s"], "compile_s": timings["pipeline_s"], "run_s": run_s}
    if as_json:
        obj = {"module": module.name, "device": session.device, "replicas": grid.replicas,
               "partitions": grid.partitions,
               "outputs": {f"out{k}": summarize(v) for k, v in enumerate(ours[0])},
               "timings": t,
               "reference": {"platform": "xla:cpu", "ok": ok,
                             "outputs": [d.as_json() for d in diffs]}}
        click.echo(json.dumps(obj, indent=2))
    else:
        from rich.console import Console
        console = Console(soft_wrap=True)
        console.print(diff_table(diffs, f"xlaplug ({session.device}) against XLA:CPU"
                                        + (f", {grid.count} devices" if grid.count > 1 else "")))
        bad = [d for d in diffs if not d.ok]
        for d in bad:
            click.echo(f"MISMATCH {d.name}: {d.message}", err=True)
        if not bad:
            click.echo(f"all {len(diffs)} outputs match XLA:CPU")
    return 0 if ok else 1
