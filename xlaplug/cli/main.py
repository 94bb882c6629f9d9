"""The `xlaplug` command line: compile, run, list-plugins, list-opcodes, check-plugins.

Every user error (bad HLO, bad options, a failing plugin) prints one clear message to
stderr and exits 2; a failed comparison or check exits 1.  No Python traceback escapes.
"""
from __future__ import annotations

import functools
import json
import os
import sys

import click

from ..hlo.errors import HloError


def _fail(message: str, code: int = 2):
    click.echo(message, err=True)
    sys.exit(code)


def handle_errors(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import warnings
        try:
            with warnings.catch_warnings():
                warnings.showwarning = _show_warning  # one plain line, not Python's format
                return fn(*args, **kwargs)
        except HloError as e:
            from ..runtime.conformance import CheckFailure
            if e.file is None and kwargs.get("file") not in (None, "-"):
                e.file = kwargs["file"]
            code = 1 if isinstance(e, CheckFailure) else 2
            if _other_mpi_rank() and not getattr(e, "rank_local", False):
                # every rank hit the same error: rank 0 reports it
                sys.exit(code)
            _fail(str(e), code)
        except KeyboardInterrupt:
            _fail("interrupted", 130)
        except RecursionError:
            _fail("error: module nests too deeply to process")
        except MemoryError:
            _fail("error: out of memory")
    return wrapper


def _other_mpi_rank() -> bool:
    """Under mpiexec, a rank other than 0 (from the launcher's environment)."""
    import os
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        if var in os.environ:
            return os.environ[var] not in ("", "0")
    return False


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="xlaplug")
def main():
    """xlaplug: parse, compile and run XLA HLO text, extended by plugins."""


def plugin_options(fn):
    """--plugins-dir / --no-plugins / --strict, shared by every verb."""
    fn = click.option("--strict", is_flag=True,
                      help="A plugin that fails to load, or a kernel that fails, is fatal.")(fn)
    fn = click.option("--no-plugins", is_flag=True,
                      help="Load no plugins, the bundled ones included.")(fn)
    fn = click.option("--plugins-dir", "plugins_dirs", multiple=True,
                      help="Load plugins from this directory (repeatable).")(fn)
    return fn


def setup_plugins(plugins_dirs, no_plugins, strict, device="cpu", prefer="kernel", quiet=False):
    """This invocation's session: the plugins it loads and its device/prefer/strict (a
    plugin that fails to load is a `warning:` line unless `quiet`)."""
    import warnings

    from ..runtime.executable import load_session
    with warnings.catch_warnings():
        if quiet:
            warnings.simplefilter("ignore")
        return load_session(plugins_dirs, device=device, prefer=prefer, strict=strict,
                            no_plugins=no_plugins)


def _highlight(text: str) -> None:
    from rich.console import Console
    from ..hlo.text.highlight import THEME, HloHighlighter
    Console(highlighter=HloHighlighter(), theme=THEME, soft_wrap=True).print(text, end="",
                                                                          markup=False)


@main.command("compile")
@click.argument("file")
@click.option("--passes", default=None, metavar="P1,P2|none",
              help="Run exactly these passes (comma-separated, options in braces: "
                   "loop-fusion{min_elements=1}); 'none' runs none. "
                   "Default: the standard pipeline.")
@click.option("--emit", type=click.Choice(["hlo", "json", "thunks", "stablehlo"]),
              default="hlo", show_default=True,
              help="What to print; stablehlo: the module, plugin ops decomposed, as "
                   "StableHLO text (needs jax).")
@click.option("-o", "--output", default=None, help="Write to this file instead of stdout.")
@click.option("--dump-dir", default=None, help="Write the module after each pass as NN-pass.hlo.")
@click.option("--verify-each/--no-verify-each", default=False,
              help="Run the verifier after every pass.")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="Device whose plugin kernels count when lowering custom calls.")
@click.option("--prefer", type=click.Choice(["kernel", "decomposition"]), default="kernel",
              show_default=True, help="Use plugin kernels, or always their decompositions.")
@click.option("--decompose-all", is_flag=True,
              help="Lower every plugin op to core HLO: the portable artifact.")
@plugin_options
@handle_errors
def compile_cmd(file, passes, emit, output, dump_dir, verify_each, device, prefer, decompose_all,
                plugins_dirs, no_plugins, strict):
    """Parse FILE (or - for stdin), verify it, run passes, print the result."""
    from ..runtime.executable import compile as compile_hlo
    from ..runtime.driver import check_output_path, write_atomic
    from .module_report import module_json

    if output:
        check_output_path(output, "-o")
    if emit == "stablehlo":
        from ..xla.jaxlib_names import require_jax
        require_jax("--emit stablehlo")
        # The portable artifact: every plugin op decomposed; xlaplug's own passes only when
        # asked for (the consumer runs its own).
        decompose_all, passes = True, "none" if passes is None else passes
    session = setup_plugins(plugins_dirs, no_plugins, strict, device,
                            "decomposition" if decompose_all else prefer)
    exe = compile_hlo(file, session=session, passes=passes, dump_dir=dump_dir,
                      verify_each=verify_each, decompose_all=decompose_all)
    module, pm = exe.module, exe.pass_manager
    if emit == "hlo":
        from ..hlo.text.printer import module_to_text
        out = module_to_text(module)
        if output is None and sys.stdout.isatty():
            _highlight(out)
            return
    elif emit == "stablehlo":
        from ..hlo.text.printer import module_to_text
        from ..xla.source import to_stablehlo
        out = to_stablehlo(module_to_text(module))
    elif emit == "json":
        from ..runtime.thunks import thunks_json
        obj = module_json(module, pm)
        obj["thunks"] = thunks_json(exe.thunks)
        out = json.dumps(obj, indent=2) + "\n"
    else:
        from ..runtime.thunks import thunks_table
        seq = exe.thunks
        if output is None:
            from rich.console import Console
            Console().print(thunks_table(seq))
            return
        out = thunks_table(seq, plain=True)
    if output:
        write_atomic(output, out, "-o")
    else:
        click.echo(out, nl=False)


def _show_warning(message, category, filename, lineno, file=None, line=None):
    click.echo(f"warning: {message}", err=True)


def _load_npz(path: str, what: str) -> dict:
    import zipfile

    from ..runtime.driver import OptionError

    import numpy as np
    if not zipfile.is_zipfile(path):
        # np.load would read a lone .npy or a pickle; an .npz is a zip archive of .npy files.
        reason = ("no such file" if not os.path.exists(path) else
                  "it is a directory" if os.path.isdir(path) else "it is not an .npz file")
        raise OptionError(f"{what}: cannot read '{path}': {reason}")
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        why = ("it holds pickled (object) arrays, which are not read"
               if "allow_pickle" in str(e) else str(e).splitlines()[0])
        raise OptionError(f"{what}: cannot read '{path}' as an .npz file: {why}") from None


@main.command("run")
@click.argument("file")
@click.option("--inputs", "inputs_path", default=None, help=".npz with in0, in1, ... (parameter order).")
@click.option("--seed", default=0, show_default=True, help="Seed for generated inputs.")
@click.option("--out", "out_path", default=None, help="Write outputs out0, out1, ... to this .npz.")
@click.option("--expect", "expect_path", default=None, help=".npz with out0, ... to compare against.")
@click.option("--rtol", type=float, default=None, help="Relative tolerance (default per dtype).")
@click.option("--atol", type=float, default=None, help="Absolute tolerance (default per dtype).")
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
@click.option("--prefer", type=click.Choice(["kernel", "decomposition"]), default="kernel",
              show_default=True, help="Use plugin kernels, or always their decompositions.")
@click.option("--replicas", type=int, default=None,
              help="Replica count (default: the module header's replica_count, else 1).")
@click.option("--partitions", type=int, default=None,
              help="Partition count (default: the header's num_partitions, else 1).")
@click.option("--collective-timeout", type=float, default=60.0, show_default=True,
              metavar="SECONDS", help="A collective that not every participant reaches "
                                      "within this fails, naming who did not come.")
@click.option("--reference", type=click.Choice(["xla"]), default=None,
              help="Also run the module, plugin ops decomposed, on XLA:CPU (through jax) "
                   "with the same inputs and compare every output; exit 1 past the "
                   "tolerance.")
@plugin_options
@handle_errors
def run_cmd(file, inputs_path, seed, out_path, expect_path, rtol, atol, device, repeat, passes,
            max_memory, max_while_iterations, interpret, as_json, profile, prefer, replicas,
            partitions, collective_timeout, reference, plugins_dirs, no_plugins, strict):
    """Compile FILE and run it; print, save and compare its outputs."""
    import numpy as np

    from ..runtime.executable import compile as compile_hlo
    from ..runtime.driver import OptionError, check_output_path, write_atomic
    from ..runtime.runner import compare, parse_bytes, summarize

    # Options first: a bad one is reported before any work is done.
    limit = parse_bytes(max_memory) if max_memory is not None else None
    if out_path:
        check_output_path(out_path, "--out")
    if max_while_iterations is not None and max_while_iterations < 0:
        raise OptionError(f"--max-while-iterations: must be 0 or more, got "
                          f"{max_while_iterations}")
    if repeat < 1:
        raise OptionError(f"--repeat: must be 1 or more, got {repeat}")
    if reference:
        from ..xla.cli_reference import check_reference_options
        check_reference_options(expect_path, repeat)

    session = setup_plugins(plugins_dirs, no_plugins, strict, device, prefer)
    # --reference xla: XLA gets the module as read (its plugin ops decomposed), not as
    # xlaplug's passes leave it
    exe = compile_hlo(file, session=session, passes=passes, keep_source=bool(reference))
    module = exe.module
    parse_s, pipeline_s = exe.timings["parse_s"], exe.timings["pipeline_s"]
    npz = _load_npz(inputs_path, "--inputs") if inputs_path else None
    expected = _load_npz(expect_path, "--expect") if expect_path else None
    if npz is None and expected is not None and any(k.startswith("in") for k in expected):
        npz = expected  # one npz may hold both the inK and the outK keys
    from ..backends.spmd.mpi import launched_by_mpi
    from ..runtime.multi_run import grid_for
    grid = grid_for(module, replicas, partitions)
    if reference:
        from ..xla.cli_reference import reference_command
        sys.exit(reference_command(
            exe.source_text, module, session, grid, npz, seed=seed, rtol=rtol, atol=atol,
            max_memory=limit, max_while_iterations=max_while_iterations, interpret=interpret,
            timeout=collective_timeout, out_path=out_path, as_json=as_json,
            timings={"parse_s": parse_s, "pipeline_s": pipeline_s}))
    if grid.count > 1 or launched_by_mpi():
        if profile:
            raise OptionError("--profile: profiles a run on one device; this one runs on "
                              f"{grid.count} devices")
        from ..runtime.multi_run import cli_multi
        sys.exit(cli_multi(module, session, grid, npz, expected, seed, repeat, max_memory,
                           max_while_iterations, interpret, collective_timeout, rtol, atol,
                           out_path, expect_path, as_json, {"parse_s": parse_s,
                                                            "pipeline_s": pipeline_s}))
    profiler = None
    if profile:
        from ..runtime.profiler import Profiler
        profiler = Profiler()
    res = exe.run(inputs=npz, seed=seed, repeat=repeat, max_memory=limit,
                  max_while_iterations=max_while_iterations, interpret=interpret,
                  profiler=profiler)
    prof = None
    if profiler is not None:
        from .profile_report import profile_json
        prof = profile_json(profiler, module.entry.name)
    if out_path:
        import io
        buf = io.BytesIO()
        np.savez(buf, **{f"out{k}": v for k, v in enumerate(res.outputs)})
        write_atomic(out_path, buf.getvalue(), "--out")
    mismatches = compare(res.outputs, expected, rtol, atol) if expected is not None else None
    timings = {"parse_s": parse_s, "compile_s": pipeline_s + res.timings["compile_s"],
               "run_s": res.timings["run_s"]}
    if as_json:
        obj = {"module": module.name, "device": device,
               "outputs": {f"out{k}": summarize(v) for k, v in enumerate(res.outputs)},
               "peak_bytes": res.peak_bytes, "timings": timings, "repeat": repeat}
        if prof is not None:
            obj["profile"] = prof
        if mismatches is not None:
            obj["comparison"] = {"ok": not mismatches,
                                 "mismatches": [{"leaf": m.leaf, "message": m.message}
                                                for m in mismatches]}
        click.echo(json.dumps(obj, indent=2))
    else:
        from .terminal import print_outputs
        print_outputs(res.outputs, timings)
        if prof is not None:
            from .profile_report import profile_table
            click.echo(profile_table(prof), nl=False)
        if mismatches is not None:
            if mismatches:
                for m in mismatches:
                    click.echo(f"MISMATCH {m.leaf}: {m.message}", err=True)
            else:
                click.echo(f"all {len(res.outputs)} outputs match {expect_path}")
    if mismatches:
        sys.exit(1)


@main.command("list-plugins")
@click.argument("names", nargs=-1, metavar="[NAME]...")
@click.option("--verbose", "-v", is_flag=True,
              help="Every plugin in full: its ops, decompositions, kernels per device, "
                   "overrides and passes.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@plugin_options
@handle_errors
def list_plugins_cmd(names, verbose, as_json, plugins_dirs, no_plugins, strict):
    """List loaded plugins, one row each; NAME (or --verbose) shows a plugin in full."""
    from ..plugin.report import load_errors, plugin_details, plugins_json, plugins_summary
    session = setup_plugins(plugins_dirs, no_plugins, strict, quiet=True)
    if as_json:
        click.echo(json.dumps(plugins_json(session.registry), indent=2))
        return
    from rich.console import Console
    console = Console()
    if names or verbose:
        for part in plugin_details(session.registry, names):
            console.print(part)
    else:
        console.print(plugins_summary(session.registry))
        for line in load_errors(session.registry):
            console.print(line, soft_wrap=True)


@main.command("list-opcodes")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (full paths).")
@plugin_options
@handle_errors
def list_opcodes_cmd(as_json, plugins_dirs, no_plugins, strict):
    """List every core opcode: shape rule, CPU and CUDA kernels, scalar form, loop fusion,
    plugin overrides."""
    from .opcode_report import opcodes_json, opcodes_table
    session = setup_plugins(plugins_dirs, no_plugins, strict, quiet=True)
    if as_json:
        click.echo(json.dumps(opcodes_json(session.registry), indent=2))
    else:
        from rich.console import Console
        Console(width=80).print(opcodes_table(session.registry))


@main.command("check-plugins")
@click.argument("ops", nargs=-1)
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--trials", default=3, show_default=True, help="Random inputs per example.")
@click.option("--seed", default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--devices", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Check on this many devices at once (threads): multi-device kernels "
                   "against their decompositions, core-opcode overrides against the core "
                   "kernel.")
@click.option("--reference", type=click.Choice(["xla"]), default=None,
              help="Run each decomposition on XLA:CPU (through jax), not on xlaplug.")
@click.option("--jax", "in_jax", is_flag=True,
              help="Run each decomposition as jax ops under jax.jit (xlaplug.jax.op's "
                   "decomposition path) and check its gradients with check_grads.")
@plugin_options
@handle_errors
def check_plugins_cmd(ops, device, trials, seed, as_json, devices, reference, in_jax,
                      plugins_dirs, no_plugins, strict):
    """Run each plugin kernel against its decomposition on random inputs."""
    from ..plugin.check import check_plugins, results_table
    if in_jax:
        from ..runtime.driver import OptionError
        if reference:
            raise OptionError("check-plugins: --jax and --reference xla name two references; "
                              "give one")
        reference = "jax"
    if reference:
        from ..xla.jaxlib_names import require_jax
        require_jax(f"check-plugins {'--jax' if in_jax else '--reference xla'}")
        if devices > 1:
            from ..runtime.driver import OptionError
            raise OptionError(f"check-plugins {'--jax' if in_jax else '--reference xla'} "
                              "checks on one device: drop --devices")
    session = setup_plugins(plugins_dirs, no_plugins, strict, device)
    if devices > 1:
        from ..plugin.check_devices import check_on_devices
        results = check_on_devices(session, ops, n=devices, trials=trials, seed=seed)
    else:
        results = check_plugins(session, ops, trials=trials, seed=seed, reference=reference)
    if as_json:
        click.echo(json.dumps({"device": device, "devices": devices,
                               "results": [r.__dict__ for r in results],
                               "ok": all(r.ok for r in results)}, indent=2))
    else:
        from rich.console import Console
        Console(soft_wrap=True).print(results_table(results))
    if not all(r.ok for r in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
