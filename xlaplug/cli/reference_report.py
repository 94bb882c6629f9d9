"""`xlaplug run --reference xla`'s report: the per-output table of errors against XLA:CPU
(or `--json`); returns the exit code (1 when any output is past the tolerance)."""
from __future__ import annotations

import json

import click


def print_reference(exe, ours, diffs, as_json: bool, platform: str | None = None) -> int:
    from ..runtime.outputs import summarize
    from ..xla.reference import global_reference_devices
    grid, device = ours.grid, exe.session.device
    # a global program (jax's shard_map or automatically partitioned): XLA partitions it for
    # its mesh, xlaplug runs it on one device
    spmd = global_reference_devices(exe)
    ok = all(d.ok for d in diffs)
    platform = platform or "cpu"
    label = f"XLA:{platform.upper()}"
    t = {"parse_s": exe.timings["parse_s"],
         "compile_s": exe.timings["pipeline_s"] + ours.timings["compile_s"],
         "run_s": ours.timings["run_s"]}
    if as_json:
        obj = {"module": exe.module.name, "device": device, "replicas": grid.replicas,
               "partitions": grid.partitions,
               "outputs": {f"out{k}": summarize(v) for k, v in enumerate(ours.per_device[0])},
               "timings": t,
               "reference": {"platform": f"xla:{platform}", "ok": ok,
                             "devices": spmd if spmd > 1 else grid.count,
                             "outputs": [d.as_json() for d in diffs]}}
        click.echo(json.dumps(obj, indent=2))
        return 0 if ok else 1
    from ..hlo.errors import plural
    from .terminal import console as terminal_console
    console = terminal_console(soft_wrap=True)
    title = f"xlaplug ({device}) against {label}"
    if spmd > 1:
        title += f" partitioning the program for {plural(spmd, 'device')}"
    elif grid.count > 1:
        title += f", {plural(grid.count, 'device')}"
    console.print(diff_table(diffs, title))
    bad = [d for d in diffs if not d.ok]
    for d in bad:
        click.echo(f"MISMATCH {d.name}: {d.message}", err=True)
    if not bad:
        click.echo(f"the output matches {label}" if len(diffs) == 1 else
                   f"all {len(diffs)} outputs match {label}")
    return 0 if ok else 1


def diff_table(diffs: list, title: str = "xlaplug against XLA:CPU"):
    """One row per output: its errors against XLA and whether it is within tolerance
    (runtime.stats.OutputDiff rows)."""
    from rich.table import Table
    t = Table(title=title)
    for h in ("output", "dtype", "shape", "max abs", "max rel", "max ULP", "result"):
        t.add_column(h, overflow="fold")  # wrapped to the width, never cut
    for d in diffs:
        t.add_row(d.name, d.dtype, str(tuple(d.shape)), f"{d.max_abs:.3g}", f"{d.max_rel:.3g}",
                  "-" if d.max_ulp >= 1 << 62 else str(d.max_ulp),
                  "[green]ok[/green]" if d.ok else "[red]MISMATCH[/red]")
    return t
