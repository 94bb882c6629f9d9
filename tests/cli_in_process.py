"""`xlaplug ARGS` run in the test's own process: click's CliRunner invoking the CLI group,
the same code a `python -m xlaplug` process runs after its imports (xlaplug/cli/main.py:
`program` is the group plus a gc.freeze at exit).

For tests whose subject is what a command does and says -- its exit status, its stdout, its
stderr line -- not the process around it: a process paid ~0.4 s of CPU importing numpy,
numba and the CLI before each command.  What only a process shows stays with processes:
the console entry point itself (tests/test_cli.py's xlaplug_proc), import-time behaviour
(tests/test_startup_imports.py), signals, MPI ranks, a fresh JIT cache.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

from click.testing import CliRunner


def xlaplug_in_process(*args, cwd: str | Path | None = None, env: dict | None = None,
                       input: str | None = None) -> subprocess.CompletedProcess:
    """The command's exit status, stdout and stderr as a CompletedProcess.  `env` sets (a
    value) or removes (None) variables for the command only.  An exception the CLI does
    not turn into its one-line error -- a process would print a traceback and exit 1 -- is
    raised here, with its traceback."""
    from xlaplug.cli.main import main

    argv = [str(a) for a in args]
    with contextlib.chdir(cwd or os.getcwd()):
        r = CliRunner().invoke(main, argv, input=input, env=env, prog_name="xlaplug")
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return subprocess.CompletedProcess(["xlaplug", *argv], r.exit_code, r.stdout, r.stderr)
