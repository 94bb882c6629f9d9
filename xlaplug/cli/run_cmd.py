"""`xlaplug run`: options to a RunOptions, one `Executable.run`, then the outputs printed,
written and compared -- the same on one device, many in this process, and under mpiexec
(where only rank 0 prints and writes, and every rank exits non-zero if any failed)."""
from __future__ import annotations

import json
import sys

import click

from .common import (excess_precision_option, load_npz, parse_bytes, plugin_options,
                     setup_plugins)
from .errors import handle_errors
from .interrupt import interruptible


@click.command("run")
@click.argument("file")
@click.option("--inputs", "inputs_path", default=None,
              help=".npz with in0, in1, ... (parameter order), each the parameter's dtype "
                   "and shape (on D devices also stacked [D, ...]).")
@click.option("--seed", type=click.IntRange(min=0), default=None,
              help="Seed for generated inputs (default 0); with --inputs, draws the "
                   "parameters the file lacks.")
@click.option("--cast", is_flag=True,
              help="Convert inputs whose dtype differs from their parameter's (else an error).")
@click.option("--out", "out_path", default=None, help="Write outputs out0, out1, ... to this .npz.")
@click.option("--expect", "expect_path", default=None, help=".npz with out0, ... to compare against.")
@click.option("--rtol", default=None, help="Relative tolerance (default per dtype).")
@click.option("--atol", default=None, help="Absolute tolerance (default per dtype).")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--repeat", default=1, show_default=True, help="Run N times after one compile.")
@click.option("--passes", default=None, metavar="P1,P2|none", help="Pass pipeline, as for compile.")
@click.option("--max-memory", default=None, help="Refuse modules whose buffers exceed this (e.g. 2G).")
@click.option("--max-while-iterations", type=int, default=None,
              help="Stop any while loop after this many iterations, with an error.")
@click.option("--interpret", is_flag=True,
              help="Run every instruction through its own kernel: no compiled loop fusions "
                   "or while loops (to compare against, or to debug).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--profile", is_flag=True,
              help="Time every thunk (runs after the first when --repeat > 1): time, share, "
                   "bytes and dispatch overhead per thunk, sorted.")
@click.option("--trace", "trace_path", default=None, metavar="OUT.json",
              help="Write the run as a Chrome / Perfetto trace (open it in ui.perfetto.dev): "
                   "a track per device and MPI rank, a slice per kernel call.")
@click.option("--prefer", type=click.Choice(["kernel", "decomposition"]), default="kernel",
              show_default=True, help="Use plugin kernels, or always their decompositions.")
@click.option("--replicas", type=int, default=None,
              help="Replica count (default: the module header's replica_count, else 1).")
@click.option("--partitions", type=int, default=None,
              help="Partition count (default: the header's num_partitions, else 1).")
@click.option("--collective-timeout", type=float, default=60.0, show_default=True,
              metavar="SECONDS", help="A collective that not every participant reaches "
                                      "within this fails, naming who did not come.")
@click.option("--reference", default=None, metavar="xla[:PLATFORM]",
              help="Also run the module, plugin ops decomposed, on XLA (through jax; "
                   "xla:tpu, xla:gpu: that backend, default cpu) with the same inputs and "
                   "compare every output; exit 1 past the tolerance.")
@click.option("--engine", type=click.Choice(["interpreter", "xla"]), default="interpreter",
              show_default=True, help="Who runs the module: xlaplug's interpreter, or XLA:CPU "
                                      "through jaxlib with plugin kernels as FFI handlers.")
@excess_precision_option
@plugin_options
@handle_errors
def run_cmd(file, inputs_path, seed, cast, out_path, expect_path, rtol, atol, device, repeat,
            passes, max_memory, max_while_iterations, interpret, as_json, profile, trace_path,
            prefer, replicas, partitions, collective_timeout, reference, engine,
            excess_precision, plugins_dirs, no_plugins, strict):
    """Compile FILE and run it; print, save and compare its outputs."""
    given = dict(locals())  # the options, for _prepare
    from ..hlo.errors import HloError
    from ..runtime.multi_run import QuietStop, start_mpi, stop_before_run
    # Under mpiexec every rank starts MPI first: one that failed before would leave the
    # others blocked in MPI_Init for good; one that fails after tells them (multi_run).
    under_mpi = start_mpi()
    try:
        prepared = _prepare(**given)
    except HloError as e:
        if not under_mpi:
            raise
        try:
            stop_before_run(e, collective_timeout if collective_timeout > 0 else 60.0)
        except QuietStop:  # another rank reports (the same error, or its own)
            sys.exit(2)
    options, platform, exe, npz, expected, rtol, atol = prepared
    if reference:
        from ..runtime.on_xla import run_against_xla
        from .reference_report import print_reference
        ours, diffs = interruptible(lambda: run_against_xla(exe, npz, options, rtol, atol,
                                                            platform, excess_precision))
        if out_path:
            _write_outputs(out_path, ours.outputs)
        if trace_path:
            _write_trace(trace_path, ours.trace)
        sys.exit(print_reference(exe, ours, diffs, as_json, platform))
    from .progress import progress_bar
    try:
        # A bar for a slow --repeat, once the runs have taken a second (on a terminal only).
        with progress_bar(f"run x{repeat}", delay_s=1.0) as progress:
            res = interruptible(lambda: exe.run(inputs=npz, options=options,
                                                expected=expected, rtol=rtol, atol=atol,
                                                progress=progress if repeat > 1 else None))
    except QuietStop:  # another rank failed and reports it
        sys.exit(2)
    if res.rank != 0:  # under mpiexec only rank 0 prints and writes
        sys.exit(0 if res.all_ok else 1)
    if out_path:
        _write_outputs(out_path, res.outputs)
    if trace_path:
        _write_trace(trace_path, res.trace)
    timings = {"parse_s": exe.timings["parse_s"],
               "compile_s": exe.timings["pipeline_s"] + res.timings["compile_s"],
               "run_s": res.timings["run_s"]}
    if as_json:
        click.echo(json.dumps(run_json(exe, res, timings, repeat), indent=2))
    else:
        print_run(exe, res, timings, expect_path)
    sys.exit(0 if res.all_ok else 1)


def _prepare(file, inputs_path, seed, cast, out_path, expect_path, rtol, atol, device, repeat,
             passes, max_memory, max_while_iterations, interpret, as_json, profile,
             trace_path, prefer, replicas, partitions, collective_timeout, reference, engine,
             excess_precision, plugins_dirs, no_plugins, strict):
    """The checked options, the compiled module and the loaded inputs and expected values:
    (options, reference platform, executable, inputs, expected, rtol, atol)."""
    from ..runtime.driver import OptionError, check_output_path
    from ..runtime.executable import compile as compile_hlo
    from ..runtime.options import RunError, RunOptions

    from ..runtime.outputs import tolerance
    # Options first: a bad one is reported before any work is done.
    try:
        rtol, atol = tolerance("--rtol", rtol), tolerance("--atol", atol)
    except RunError as e:
        raise OptionError(e.message) from None
    if out_path:
        check_output_path(out_path, "--out")
    if trace_path:
        check_new_file_path(trace_path, "--trace")
    for flag, value in (("--replicas", replicas), ("--partitions", partitions)):
        if value is not None and value < 1:
            raise OptionError(f"{flag}: must be at least 1, got {value}")
    if max_while_iterations is not None and max_while_iterations < 0:
        raise OptionError(f"--max-while-iterations: must be 0 or more, got "
                          f"{max_while_iterations}")
    if repeat < 1:
        raise OptionError(f"--repeat: must be 1 or more, got {repeat}")
    if not collective_timeout > 0:
        raise OptionError(f"--collective-timeout: must be a positive number of seconds, got "
                          f"{collective_timeout}")
    from ..backends.backend import backend_for
    if engine == "xla" and not backend_for(device).on_host:  # no CUDA handlers yet
        raise OptionError(f"--engine xla: runs on cpu; --device {device} is not served by it "
                          "(docs/design.md#cuda)")
    if engine == "xla" and (reference or profile or interpret or trace_path):
        raise OptionError("--engine xla: runs on cpu, without --reference, --profile, "
                          "--trace or --interpret")
    options = RunOptions(engine=engine, seed=seed, cast=cast, repeat=repeat,
                         replicas=replicas, partitions=partitions,
                         collective_timeout=collective_timeout,
                         max_memory=parse_bytes(max_memory) if max_memory is not None else None,
                         max_while_iterations=max_while_iterations, interpret=interpret,
                         profile=profile, trace=bool(trace_path), gather=True)
    platform = None
    if reference:
        from ..xla.reference import check_reference_options
        platform = check_reference_options(expect_path, repeat, reference)

    session = setup_plugins(plugins_dirs, no_plugins, strict, device, prefer)
    # The run's devices are known before any rewrite: decompositions see them.
    # --reference xla: XLA gets the module as read (plugin ops decomposed), not as
    # xlaplug's passes leave it.
    exe = compile_hlo(file, session=session, passes=passes,
                      keep_source=bool(reference) or engine == "xla",
                      replicas=replicas, partitions=partitions,
                      excess_precision=excess_precision)
    npz = load_npz(inputs_path, "--inputs") if inputs_path else None
    expected = load_npz(expect_path, "--expect") if expect_path else None
    if expected is not None and (npz is None and any(k.startswith("in") for k in expected)
                                 or npz is not None and _same_file(inputs_path, expect_path)):
        # one npz may hold both the inK and the outK keys: its other keys are the inputs
        npz = {k: v for k, v in expected.items() if not k.startswith("out")}
    if profile and exe.num_devices > 1:
        raise OptionError(f"--profile: profiles a run on one device; this one runs on "
                          f"{exe.num_devices} devices")
    return options, platform, exe, npz, expected, rtol, atol


def under_mpi() -> bool:
    from ..backends.spmd.mpi import launched_by_mpi
    return launched_by_mpi()


def _same_file(a: str, b: str) -> bool:
    import os
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _write_outputs(path: str, outputs) -> None:
    import io

    import numpy as np

    from ..runtime.driver import write_atomic
    buf = io.BytesIO()
    np.savez(buf, **{f"out{k}": v for k, v in enumerate(outputs)})
    write_atomic(path, buf.getvalue(), "--out")


def check_new_file_path(path: str, what: str) -> None:
    """An output file whose folder must exist already: `path`'s parent is not created (an
    error, exit 2, before any work), and the checks of check_output_path."""
    from pathlib import Path

    from ..runtime.driver import OptionError, check_output_path
    parent = Path(path).parent
    if not parent.exists():
        raise OptionError(f"{what}: cannot write '{path}': the directory '{parent}' does not "
                          f"exist")
    check_output_path(path, what)


def _write_trace(path: str, trace: dict) -> None:
    from ..runtime.driver import write_atomic
    write_atomic(path, json.dumps(trace, separators=(",", ":")), "--trace")


def run_json(exe, res, timings: dict, repeat: int) -> dict:
    from ..runtime.outputs import summarize
    grid = res.grid
    obj = {"module": exe.module.name, "device": exe.session.device, "engine": res.engine,
           "timings": timings, "repeat": repeat, "run_times": res.run_times}
    if grid.count == 1:
        obj["outputs"] = {f"out{k}": summarize(v) for k, v in enumerate(res.outputs)}
        obj["peak_bytes"] = res.peak_bytes
    else:
        obj.update(replicas=grid.replicas, partitions=grid.partitions, transport=res.transport,
                   devices=[{"device": d, "replica": grid.replica_of(d),
                             "partition": grid.partition_of(d),
                             "outputs": {f"out{k}": summarize(v) for k, v in enumerate(outs)}}
                            for d, outs in zip(res.devices, res.per_device)])
    if res.profile is not None:
        from .profile_report import profile_json
        obj["profile"] = profile_json(res.profile, exe.module.entry.name)
    if res.mismatches is not None:
        obj["comparison"] = {"ok": not res.mismatches,
                             "mismatches": [{"leaf": m.leaf, "message": m.message}
                                            for m in res.mismatches]}
    return obj


def print_run(exe, res, timings: dict, expect_path: str | None) -> None:
    from ..hlo.errors import plural
    from .terminal import print_outputs
    grid = res.grid
    n = len(res.outputs)
    if grid.count > 1:
        where = {"mpi": "in processes (MPI)", "xla": "run by XLA:CPU in this process",
                 "xla-worker": "run by XLA:CPU in a worker process"
                 }.get(res.transport, "in one process")
        click.echo(f"{plural(grid.count, 'device')} ({plural(grid.replicas, 'replica')} x "
                   f"{plural(grid.partitions, 'partition')}) {where}; outputs stacked by "
                   f"device")
    print_outputs(res.outputs, timings)
    if res.profile is not None:
        from .profile_report import profile_json, profile_table
        click.echo(profile_table(profile_json(res.profile, exe.module.entry.name)), nl=False)
    if res.mismatches is None:
        return
    for m in res.mismatches:
        click.echo(f"MISMATCH {m.leaf}: {m.message}", err=True)
    if not res.mismatches:
        of = f" of {plural(grid.count, 'device')}" if grid.count > 1 else ""
        every = f"the output{of} matches" if n == 1 else f"all {n} outputs{of} match"
        click.echo(f"{every} {expect_path}")
