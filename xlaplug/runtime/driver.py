"""What every verb does first: read HLO text, parse, verify, run the pass pipeline."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..hlo.errors import HloError, UsageError
from ..hlo.ir import Module
from ..hlo.text.parser import parse_module
from ..hlo.text.reader import read_hlo
from ..hlo.verifier import verify_module
from ..passes import PassContext, PassManager, make_pass, resolve_pipeline


class OptionError(UsageError):
    """A bad command-line option or path: one `error: ...` line with no file position."""


def read_text(path: str) -> tuple[str, str]:
    """(text, display name).  `-` reads standard input.  The library's reader (BOM, CRLF,
    UTF-8 errors), shared with `parse_file`."""
    return read_hlo(path)


def load_module(path: str) -> Module:
    """Read, parse and verify FILE (`-`: standard input): HLO text, or MLIR (StableHLO /
    MHLO, text or bytecode) converted to HLO through jaxlib (xla/source.py)."""
    from ..xla.source import read_module_text
    return _parse_and_verify(*read_module_text(path))  # MLIR already converted there


def load_text(text: str, name: str = "<string>") -> Module:
    """Parse and verify HLO text (MLIR text is converted first); errors carry `name` and the
    offending source line."""
    from ..xla.source import is_mlir, mlir_as_hlo_text
    if is_mlir(text[:4096].encode(), name):
        text, name = mlir_as_hlo_text(text.encode(), name), f"{name} (as HLO)"
    return _parse_and_verify(text, name)


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


def compile_module(module: Module, session=None, passes: str | None = None, *,
                   dump_dir: str | None = None, verify_each: bool = False,
                   decompose_all: bool = False, options: dict | None = None,
                   excess_precision: bool = True) -> PassManager:
    """Run a pass pipeline on `module` for `session` (a plugin.Session: its plugins, device
    and preference; None: no plugins, on the CPU), then verify.  `passes` is a pipeline
    spec (None: the default pipeline and the session's plugin passes); `options`: per-pass
    field settings, e.g. {"loop-fusion": {"min_elements": 1}}.  `excess_precision=False`
    drops the excess-precision pass wherever the pipeline has it: every bf16 result rounded
    as the HLO states (XLA:CPU under --xla_allow_excess_precision=false)."""
    from dataclasses import replace

    from ..plugin.session import Session
    if isinstance(session, str):  # the pipeline spec was compile_module's second argument
        raise TypeError("compile_module(module, session, passes): give the pipeline spec "
                        f"as passes={session!r}")
    session = session if session is not None else Session()
    if decompose_all and passes is None:  # the portable artifact: no xlaplug optimizations
        passes = "portable"
    pipeline = resolve_pipeline(passes, session.registry)
    if not excess_precision:
        pipeline = [p for p in pipeline if p.name != "excess-precision"]
    if decompose_all and not any(p.name == "custom-call-lowering" for p in pipeline):
        pipeline.insert(0, make_pass("custom-call-lowering", {}))
    settings = dict(options or {})
    if decompose_all:
        settings["custom-call-lowering"] = {**settings.get("custom-call-lowering", {}),
                                            "decompose_all": True}
    pipeline = [replace(p, **settings[p.name]) if p.name in settings else p for p in pipeline]
    pm = PassManager(pipeline, verify_each=verify_each,
                     dump_dir=check_dump_dir(dump_dir) if dump_dir else None)
    try:
        pm.run(module, PassContext.of(session))
    except OSError as e:
        if dump_dir is None or e.filename is None:
            raise
        # A dump file (the folder was checked, but it may fill up or change under us).
        raise OptionError(f"--dump-dir: cannot write '{e.filename}': {e.strerror or e}") from None
    verify_module(module)
    return pm


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


def check_dump_dir(path: str) -> Path:
    """`--dump-dir` as a directory that exists and can be written: the folder itself is
    created when missing, but not the folders above it (as for an output file)."""
    d = Path(path)
    if d.exists() and not d.is_dir():
        raise OptionError(f"--dump-dir: '{path}' exists and is not a directory")
    if not d.exists() and not d.parent.is_dir():
        raise OptionError(f"--dump-dir: cannot create '{path}': folder '{d.parent}' does not "
                          f"exist")
    try:
        d.mkdir(exist_ok=True)
    except OSError as e:
        raise OptionError(f"--dump-dir: cannot create '{path}': {e.strerror or e}") from None
    if not os.access(d, os.W_OK | os.X_OK):
        raise OptionError(f"--dump-dir: '{path}' is not writable")
    return d


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
