"""How the CLI ends on an error: one line on stderr (`FILE:LINE:COL: error: ...` for HLO
text), exit 2 for bad input, 1 for a failed check, 130 on Ctrl-C -- never a traceback.  Under
mpiexec an error every rank hits is reported once, by rank 0."""
from __future__ import annotations

import functools
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

        from ..hlo.text.parser_limits import recursion_room
        from .interrupt import armed
        try:
            with armed(), warnings.catch_warnings(), recursion_room():  # room for XLA's 500 levels
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
            from .interrupt import interrupted
            interrupted()
        except RecursionError:
            _fail("error: module nests too deeply to process")
        except MemoryError:
            _fail("error: out of memory")
    return wrapper


def _other_mpi_rank() -> bool:
    """Under mpiexec, a rank other than 0 (from the launcher's environment)."""
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        if var in os.environ:
            return os.environ[var] not in ("", "0")
    return False


def _show_warning(message, category, filename, lineno, file=None, line=None):
    click.echo(f"warning: {message}", err=True)
