"""The `xlaplug` command line: compile, run, list-plugins, check-plugins.

Every user error (bad HLO, bad options, a failing plugin) prints one clear message to
stderr and exits 2; a failed comparison or check exits 1.  No Python traceback escapes.
"""
from __future__ import annotations

import functools
import json
import sys

import click

from .hlo.errors import HloError


def _fail(message: str, code: int = 2):
    click.echo(message, err=True)
    sys.exit(code)


def handle_errors(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except HloError as e:
            _fail(str(e))
        except KeyboardInterrupt:
            _fail("interrupted", 130)
        except RecursionError:
            _fail("error: module nests too deeply to process")
        except MemoryError:
            _fail("error: out of memory")
    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="xlaplug")
def main():
    """xlaplug: parse, compile and run XLA HLO text, extended by plugins."""


def _highlight(text: str) -> None:
    from rich.console import Console
    from .hlo.highlight import THEME, HloHighlighter
    Console(highlighter=HloHighlighter(), theme=THEME, soft_wrap=True).print(text, end="",
                                                                          markup=False)


@main.command("compile")
@click.argument("file")
@click.option("--passes", default=None, metavar="P1,P2|none",
              help="Run exactly these passes (comma-separated); 'none' runs none. "
                   "Default: the standard pipeline.")
@click.option("--emit", type=click.Choice(["hlo", "json", "thunks"]), default="hlo",
              show_default=True, help="What to print.")
@click.option("-o", "--output", default=None, help="Write to this file instead of stdout.")
@click.option("--dump-dir", default=None, help="Write the module after each pass as NN-pass.hlo.")
@click.option("--verify-each/--no-verify-each", default=False,
              help="Run the verifier after every pass.")
@handle_errors
def compile_cmd(file, passes, emit, output, dump_dir, verify_each):
    """Parse FILE (or - for stdin), verify it, run passes, print the result."""
    from .driver import compile_module, load_module, write_atomic
    from .report import module_json

    module = load_module(file)
    pm = compile_module(module, passes, dump_dir, verify_each)
    if emit == "hlo":
        from .hlo.printer import module_to_text
        out = module_to_text(module)
        if output is None and sys.stdout.isatty():
            _highlight(out)
            return
    elif emit == "json":
        out = json.dumps(module_json(module, pm), indent=2) + "\n"
    else:
        from .backends.thunks import build_thunks, thunks_table
        seq = build_thunks(module)
        if output is None:
            from rich.console import Console
            Console().print(thunks_table(seq))
            return
        out = thunks_table(seq, plain=True)
    if output:
        write_atomic(output, out)
    else:
        click.echo(out, nl=False)


if __name__ == "__main__":
    main()
