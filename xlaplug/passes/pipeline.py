"""The pass pipeline run on a module for a session: the one place a module is lowered, by
every verb, the Python API and the bridge to XLA (which sits below the runtime and so
cannot reach runtime/driver.py, where `compile_module` is still importable from)."""
from __future__ import annotations

import os
from pathlib import Path

from ..hlo.errors import HloError, OptionError
from ..hlo.ir import Module
from ..hlo.verifier import verify_module
from .context import PassContext
from .manager import PassManager, make_pass, resolve_pipeline


def compile_module(module: Module, session=None, passes: str | None = None, *,
                   dump_dir: str | None = None, verify_each: bool = False,
                   decompose_all: bool = False, options: dict | None = None,
                   excess_precision: bool = True, verified: bool = False) -> PassManager:
    """Run a pass pipeline on `module` for `session` (a plugin.Session: its plugins, device
    and preference; None: no plugins, on the CPU), then verify.  `passes` is a pipeline
    spec (None: the default pipeline and the session's plugin passes); `options`: per-pass
    field settings, e.g. {"loop-fusion": {"min_elements": 1}}.  `excess_precision=False`
    drops the excess-precision pass wherever the pipeline has it: every bf16 result rounded
    as the HLO states (XLA:CPU under --xla_allow_excess_precision=false).  `verified`: the
    module passed the verifier as it stands: after an empty pipeline (`passes="none"`) it is
    not verified a second time (a third of `compile --passes none` of a large module)."""
    from dataclasses import replace

    from ..plugin.session import Session
    if isinstance(session, str):  # the pipeline spec was compile_module's second argument
        raise TypeError("compile_module(module, session, passes): give the pipeline spec "
                        f"as passes={session!r}")
    session = session if session is not None else Session()
    if decompose_all:
        _check_portable_input(module)
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
    if pipeline or not verified:
        verify_module(module)
    return pm


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


def _check_portable_input(module: Module) -> None:
    """The portable artifact is HLO as XLA takes it before its own passes.  A module XLA
    already partitioned and scheduled (`jax.jit(f).lower(...).compile().as_text()` on many
    devices) holds what those passes made -- bitcasts with their layouts, per-device shapes,
    the partitioner's shardings -- which XLA refuses as input (its layout checks fail on
    the bitcasts once each instruction is made manual); it cannot be made portable again."""
    parts = module.attrs.get("num_partitions", 1)
    if module.attrs.get("is_scheduled") and isinstance(parts, int) and parts > 1:
        raise HloError(f"--decompose-all: module '{module.name}' is XLA's partitioned, "
                       f"scheduled output (is_scheduled=true, num_partitions={parts}), which "
                       "XLA does not take back as input; make the artifact from the program "
                       "as jax lowers it (jax.jit(f).lower(...).as_text(dialect=\"hlo\"), not "
                       ".compile().as_text())", line=1, column=1)
