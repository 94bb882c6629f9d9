"""The `xlaplug` command line: compile, run, list-plugins, list-opcodes, check-plugins.

Every user error (bad HLO, bad options, a failing plugin) prints one clear message to
stderr and exits 2; a failed comparison or check exits 1.  No Python traceback escapes.
"""
from __future__ import annotations

import json
import sys

import click

from .common import excess_precision_option, highlight, plugin_options, setup_plugins
from .errors import handle_errors
from .run_cmd import run_cmd


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="xlaplug")
@click.pass_context
def main(ctx):
    """xlaplug: parse, compile and run XLA HLO text, extended by plugins."""
    if ctx.invoked_subcommand == "run":
        # Under mpiexec, MPI starts before `run` reads its options: a rank whose options
        # are refused must not end before MPI_Init, which would hold the others there for
        # good (run_cmd: it then stops them within the collective timeout).
        from ..runtime.multi_run import start_mpi
        start_mpi()


main.add_command(run_cmd)


@main.command("compile")
@click.argument("file")
@click.option("--passes", default=None, metavar="P1,P2|none|portable",
              help="Run exactly these passes (comma-separated, options in braces: "
                   "loop-fusion{min_elements=1}); 'none' runs none; 'portable' the "
                   "--decompose-all artifact's. Default: the standard pipeline "
                   "(the portable one with --decompose-all).")
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
@excess_precision_option
@plugin_options
@handle_errors
def compile_cmd(file, passes, emit, output, dump_dir, verify_each, device, prefer, decompose_all,
                excess_precision, plugins_dirs, no_plugins, strict):
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
        # asked for (the consumer runs its own): passes None is the portable pipeline.
        decompose_all = True
    session = setup_plugins(plugins_dirs, no_plugins, strict, device,
                            "decomposition" if decompose_all else prefer)
    exe = compile_hlo(file, session=session, passes=passes, dump_dir=dump_dir,
                      verify_each=verify_each, decompose_all=decompose_all,
                      excess_precision=excess_precision)
    module, pm = exe.module, exe.pass_manager
    if emit == "hlo":
        from ..hlo.text.printer import module_to_text
        out = module_to_text(module)
        if output is None and sys.stdout.isatty():
            highlight(out)
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
        from ..runtime.thunks import thunks_text
        from .module_report import thunks_table
        seq = exe.thunks
        if output is None:
            from .terminal import console
            console().print(thunks_table(seq))
            return
        out = thunks_text(seq)
    if output:
        write_atomic(output, out, "-o")
    else:
        click.echo(out, nl=False)


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
    from .plugin_report import load_errors, plugin_details, plugins_json, plugins_summary
    session = setup_plugins(plugins_dirs, no_plugins, strict, quiet=True)
    if as_json:
        click.echo(json.dumps(plugins_json(session.registry), indent=2))
        return
    from .terminal import console as terminal_console
    console = terminal_console()
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
        from .terminal import console
        console().print(opcodes_table(session.registry))


@main.command("check-plugins")
@click.argument("ops", nargs=-1)
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--trials", default=3, show_default=True, help="Random inputs per example.")
@click.option("--seed", default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--verbose", "-v", is_flag=True,
              help="One row per check (each example and trial), not one per op.")
@click.option("--devices", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Check on this many devices at once (threads): multi-device kernels "
                   "against their decompositions, core-opcode overrides against the core "
                   "kernel.")
@click.option("--reference", type=click.Choice(["xla"]), default=None,
              help="Run each decomposition on XLA:CPU (through jax), not on xlaplug.")
@click.option("--jax", "in_jax", is_flag=True,
              help="Run each decomposition as jax ops under jax.jit (xlaplug.jax.op's "
                   "decomposition path) and check its gradients with check_grads.")
@click.option("--engine", type=click.Choice(["interpreter", "xla"]), default="interpreter",
              show_default=True,
              help="xla: run each CPU kernel inside XLA as an FFI handler (as run --engine "
                   "xla serves it), against its decomposition on XLA:CPU.")
@plugin_options
@handle_errors
def check_plugins_cmd(ops, device, trials, seed, as_json, verbose, devices, reference, in_jax,
                      engine, plugins_dirs, no_plugins, strict):
    """Run each plugin kernel against its decomposition on random inputs; print one row per
    op and a summary line (--verbose: every check).  OPS: op names or plugin names (every op
    of that plugin); none: every op."""
    from ..runtime.check import check_plugins
    from .check_report import failures
    if engine == "xla":
        _engine_options(device, devices, in_jax)
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
    from .progress import progress_bar
    with progress_bar("checking plugins", delay_s=0.5) as progress:
        if devices > 1:
            from ..runtime.check_devices import check_on_devices
            results = check_on_devices(session, ops, n=devices, trials=trials, seed=seed,
                                       progress=progress)
        else:
            results = check_plugins(session, ops, trials=trials, seed=seed,
                                    reference=reference, progress=progress, engine=engine)
    if as_json:  # "ok": no check failed (a result's "ok" is null where it was not checked)
        click.echo(json.dumps({"device": device, "devices": devices, "engine": engine,
                               "results": [r.__dict__ for r in results],
                               "ok": not failures(results)}, indent=2))
    else:
        from .check_report import print_checks
        print_checks(results, verbose)
    if failures(results):
        sys.exit(1)


def _engine_options(device: str, devices: int, in_jax: bool) -> None:
    """`check-plugins --engine xla` refuses what it cannot honour (one line, exit 2)."""
    from ..backends.backend import backend_for
    from ..runtime.driver import OptionError
    from ..xla.jaxlib_names import require_jax
    if not backend_for(device).on_host:  # XLA:CPU's FFI hands kernels host buffers
        raise OptionError(f"check-plugins --engine xla checks CPU kernels; --device {device} "
                          "is not served by it")
    if devices > 1:
        raise OptionError("check-plugins --engine xla checks on one XLA device: drop --devices")
    if in_jax:
        raise OptionError("check-plugins --engine xla runs each decomposition on XLA:CPU; "
                          "--jax names another reference: give one")
    require_jax("check-plugins --engine xla")


def program() -> None:
    """The `xlaplug` program -- the console script and `python -m xlaplug`: the group, then
    the end of the process without the cyclic collector's last walk over everything.

    CPython's finalization clears every module and runs the collector over what that frees
    (numpy's, numba's and llvmlite's objects, the module run): 11-28% of a warm `run`'s
    CPU time and 7% of a `compile --passes none` of 22,500 instructions (more on a busier
    machine), to free memory the process is about to hand back whole.
    gc.freeze() just before puts every object out of the collector's reach, so the walk
    finds nothing.  The rest of the exit is Python's own: atexit handlers (MPI's
    finalization) run, non-daemon threads are waited for, what reference counting frees is
    freed (files flushed and closed), the exit status is the command's; only reference
    cycles are no longer collected at exit.  Not `main` itself: tests and programs that
    embed the CLI invoke the group in a process that goes on, its objects still collectable.
    """
    import gc
    try:
        main()
    finally:
        gc.freeze()


if __name__ == "__main__":
    program()
