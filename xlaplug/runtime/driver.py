"""What every verb does first: read HLO text, parse, verify, run the pass pipeline."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..hlo.errors import HloError, OptionError
from ..hlo.ir import Module
from ..hlo.text.parser import parse_module
from ..hlo.text.reader import read_hlo
from ..hlo.verifier import verify_module
# compile_module is documented here (docs/plugins.md); it lives with the passes it runs, so
# the jaxlib bridge (xla/) can lower a module without importing the runtime.
from ..passes.pipeline import check_dump_dir, compile_module  # noqa: F401


def read_text(path: str) -> tuple[str, str]:
    """(text, display name).  `-` reads standard input.  The library's reader (BOM, CRLF,
    UTF-8 errors), shared with `parse_file`."""
    return read_hlo(path)


def load_module(path: str) -> Module:
    """Read, parse and verify FILE (`-`: standard input): HLO text, or MLIR (StableHLO /
    MHLO, text or bytecode) converted to HLO through jaxlib (xla/source.py)."""
    return load_source(path)[0]


def load_text(text: str, name: str = "<string>") -> Module:
    """Parse and verify HLO text (MLIR text is converted first); errors carry `name` and the
    offending source line."""
    return load_source(None, text, name)[0]


def load_source(path: str | None, text: str | None = None, name: str = "<string>"
                ) -> tuple[Module, str]:
    """(the module, its HLO text as read) of FILE `path`, or of `text` named `name`: the
    text is the file's, so positions in it are the file's (MLIR: the HLO it converts to)."""
    from ..xla.source import is_mlir, mlir_as_hlo_text, read_module_text
    if path is not None:
        text, name = read_module_text(path)  # MLIR already converted there
    elif is_mlir(text[:4096].encode(), name):
        text, name = mlir_as_hlo_text(text.encode(), name), f"{name} (as HLO)"
    return _parse_and_verify(text, name), text


def _parse_and_verify(text: str, name: str) -> Module:
    from ..passes.manager import cyclic_gc_paused
    from ..xla.source import explain_not_hlo
    with cyclic_gc_paused():  # a large module: see cyclic_gc_paused
        try:
            module = parse_module(text, name)
        except HloError as e:
            raise explain_not_hlo(e, text) from None
        try:
            verify_module(module)
        except HloError as e:
            raise e.located(name, text) from None
    return module


def check_output_path(path: str, what: str) -> Path:
    """`path` as a file to (over)write, or a one-line HloError: a directory, a folder that
    does not exist (none is created: a misspelt path is not a place to write), a parent that
    is a file, or a folder that cannot be written are refused before any work is done."""
    target = Path(path)
    if target.is_dir():
        raise OptionError(f"{what}: cannot write '{path}': it is a directory")
    parent = target.parent
    for folder in [parent, *parent.parents]:
        if folder.exists():
            if not folder.is_dir():
                raise OptionError(f"{what}: cannot write '{path}': '{folder}' is not a directory")
            if folder != parent:
                raise OptionError(f"{what}: cannot write '{path}': folder '{parent}' does not "
                                  f"exist")
            if not os.access(folder, os.W_OK | os.X_OK):
                raise OptionError(f"{what}: cannot write '{path}': '{folder}' is not writable")
            break
    return target


def write_atomic(path: str, data: str | bytes, what: str = "output") -> None:
    """Write via a temporary file and rename, so a failure leaves nothing half-written.  The
    file gets the mode any new file gets (0666 less the umask): mkstemp makes its temporary
    file 0600, which the rename would otherwise keep."""
    target = check_output_path(path, what)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            os.fchmod(f.fileno(), 0o666 & ~_umask())
        os.replace(tmp, target)
    except OSError as e:
        raise OptionError(f"{what}: cannot write '{path}': {e.strerror or e}") from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def _umask() -> int:
    """The process's umask.  Linux shows it in /proc; elsewhere it is read by setting it and
    setting it back (no file is created in between, here)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
