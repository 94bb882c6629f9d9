"""What every verb does first: read HLO text, parse, verify, run the pass pipeline."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .hlo.errors import HloError
from .hlo.ir import Module
from .hlo.parser import parse_module
from .hlo.reader import read_hlo
from .hlo.verifier import verify_module
from .passes import PassManager, resolve_pipeline


def read_text(path: str) -> tuple[str, str]:
    """(text, display name).  `-` reads standard input.  The library's reader (BOM, CRLF,
    UTF-8 errors), shared with `parse_file`."""
    return read_hlo(path)


def load_module(path: str) -> Module:
    text, name = read_text(path)
    module = parse_module(text, name)
    try:
        verify_module(module)
    except HloError as e:
        raise e.located(name, text) from None
    return module


def compile_module(module: Module, passes: str | None, dump_dir: str | None = None,
                   verify_each: bool = False, decompose_all: bool = False,
                   options: dict | None = None) -> PassManager:
    """Run a pass pipeline (None: the default) and verify.  `options`: per-pass attribute
    settings, e.g. {"loop-fusion": {"min_elements": 1}}."""
    pipeline = resolve_pipeline(passes)
    if decompose_all and "custom-call-lowering" not in pipeline:
        pipeline.insert(0, "custom-call-lowering")
    pm = PassManager(pipeline, verify_each=verify_each,
                     dump_dir=Path(dump_dir) if dump_dir else None,
                     options={"custom-call-lowering": {"decompose_all": decompose_all},
                              **(options or {})})
    pm.run(module)
    verify_module(module)
    return pm


def write_atomic(path: str, data: str | bytes) -> None:
    """Write via a temporary file and rename, so a failure leaves nothing half-written."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
