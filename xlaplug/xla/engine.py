"""`--engine xla`: the module runs on XLA:CPU through jaxlib, and its plugin ops are
typed-FFI custom calls that XLA itself hands to the plugin kernels (xla/ffi); on one device
here, on many through runtime/engine_devices.py.

The module as read is lowered the way the interpreter lowers it with `--prefer kernel`,
except that what stays a custom call is for XLA: an op with a CPU kernel stays, marked
`api_version=API_VERSION_TYPED_FFI`, its attributes in `backend_config={...}` (the MLIR
dictionary XLA's HLO parser reads into FFI attributes, as jax prints `ffi_call`), and the
kernel is registered as the FFI target of that name; an op with only a decomposition is
decomposed, and so is an op whose kernel needs a communicator.  A core opcode a plugin
overrides becomes an `xlaplug.override` call served by the override kernel wherever XLA
runs it as code (override_rewrite.py: not in reducers, comparators and other scalar
computations, where neither XLA nor the interpreter uses it).
"""
from __future__ import annotations

import copy

from ..hlo.attr_types import Raw, Word
from ..hlo.errors import HloError
from ..plugin.attrs import op_name, parse_mlir_dict

TYPED_FFI = "API_VERSION_TYPED_FFI"


class EngineError(HloError):
    """The module cannot run on the XLA engine as asked (one line)."""

    def headline(self) -> str:
        return super().headline() if self.line else f"error: {self.message}"


def require_host_device(device: str) -> None:
    """XLA:CPU's FFI hands kernels host buffers: a device whose memory is not the host's
    (cuda) is refused."""
    from ..backends.backend import backend_for
    if not backend_for(device).on_host:
        raise EngineError(f"--engine xla runs on cpu; --device {device} is not served by it")


def _typed_ffi(ins) -> None:
    """Mark a plugin custom call as a typed-FFI call whose attributes XLA can read."""
    api = ins.attrs.get("api_version")
    if api not in (None, TYPED_FFI, "API_VERSION_ORIGINAL"):
        raise EngineError(f"custom-call '{ins.name}': api_version={api}; the XLA engine serves "
                          f"plugin ops as {TYPED_FFI} calls", line=ins.line, column=ins.column)
    cfg = ins.attrs.get("backend_config")
    if cfg is not None:
        text = cfg.text if isinstance(cfg, Raw) else str(cfg)
        try:
            parse_mlir_dict(text) if text.strip() else None
        except ValueError:
            raise EngineError(f"custom-call '{ins.name}': backend_config is not an MLIR "
                              "dictionary ({name = value : type, ...}), the only form XLA "
                              "hands a typed-FFI handler", line=ins.line,
                              column=ins.column) from None
        if not text.strip():
            del ins.attrs["backend_config"]
    ins.attrs["api_version"] = Word(TYPED_FFI)


def lowered(source_text: str, registry, name: str = "<xla engine>",
            communicators: bool = False, keep_sharding: bool = False):
    """The module as read, its plugin ops lowered as the interpreter lowers them with
    `--prefer kernel`.  A kernel that needs a communicator (the Horovod ops) has no
    devices to meet inside XLA on one device: its op is decomposed, as if it had no kernel
    -- unless `communicators` (under mpiexec, runtime/mpi_engine.py serves them).
    `keep_sharding`: XLA's partitioner calls (a global program's shard_map regions) stay,
    for XLA's SPMD partitioner (runtime/engine_devices.py)."""
    from ..passes.pipeline import compile_module
    from ..hlo.text.parser import parse_module
    from ..plugin.session import Session
    from .reference import check_arguments
    module = parse_module(source_text, name)
    check_arguments(module)
    lowering = copy.copy(registry)
    if not communicators:
        lowering.kernels = {k: e for k, e in registry.kernels.items() if not e.communicator}
    compile_module(module, Session(lowering, prefer="kernel"),
                   "custom-call-lowering{keep_sharding=true}" if keep_sharding
                   else "custom-call-lowering")
    return module


def serve_plugin_ops(module, registry) -> list:
    """Every plugin custom call with a CPU kernel made a typed-FFI call, its kernel
    registered as the target; returns the registrations."""
    from .ffi import NOT_SERVED, register_op
    served, seen, taken = [], set(), set()
    for comp in module.computations:
        for ins in comp.instructions:
            op = op_name(ins) if ins.opcode == "custom-call" else None
            entry = registry.kernel_for(op, "cpu") if op else None
            if entry is None:
                continue  # a target XLA knows itself (jaxlib's lapack_*_ffi) or refuses
            if entry.communicator:
                raise EngineError(f"custom-call '{ins.name}': the kernel of '{op}' needs a "
                                  "communicator and the op has no decomposition to run instead",
                                  line=ins.line, column=ins.column)
            if op in taken:
                continue
            if op not in seen:
                seen.add(op)
                s = register_op(op, entry, shape_rule=registry.shapes.get(op))
                if s.how == NOT_SERVED and s.taken:
                    taken.add(op)  # XLA's own target (jaxlib's lapack_*_ffi) serves it
                    continue
                if s.how == NOT_SERVED:
                    raise EngineError(f"custom-call '{ins.name}': '{op}' cannot be served "
                                      f"inside XLA: {s.reason}", line=ins.line,
                                      column=ins.column)
                served.append(s)
            _typed_ffi(ins)
    return served


def check_plugin_calls(module, registry) -> None:
    """serve_plugin_ops's errors about the calls' attributes, raised without registering
    anything (runtime/engine_devices.py: before a worker process gets the module, whose
    positions would be the reprinted text's there)."""
    for comp in module.computations:
        for ins in comp.instructions:
            op = op_name(ins) if ins.opcode == "custom-call" else None
            entry = registry.kernel_for(op, "cpu") if op else None
            if entry is not None and not entry.communicator:
                probe = copy.copy(ins)
                probe.attrs = dict(ins.attrs)
                _typed_ffi(probe)


def engine_program(source_text: str, registry, ctx, name: str = "<xla engine>",
                   keep_sharding: bool = False):
    """(HLO text for XLA, the FFI registrations, the overrides' binding) of a module as read:
    the binding (override_rewrite.bind_overrides: (handler, key), or None when nothing is
    overridden) runs the override kernels in the interpreter context `ctx`, and lives as
    long as the caller keeps the compiled text (`handler.unbind(key)` after)."""
    from ..hlo.text.printer import module_to_text
    from .override_rewrite import bind_overrides
    module = lowered(source_text, registry, name, keep_sharding=keep_sharding)
    served = serve_plugin_ops(module, registry)
    bound = bind_overrides(module, registry, ctx)
    return module_to_text(module), served, bound


def engine_text(source_text: str, registry, name: str = "<xla engine>",
                keep_sharding: bool = False) -> tuple[str, list]:
    """(HLO text for XLA, the FFI registrations) of a module as read, to read: its
    overrides' calls are bound to nothing (EngineProgram binds its own)."""
    text, served, bound = engine_program(source_text, registry, None, name, keep_sharding)
    if bound is not None:
        bound[0].unbind(bound[1])
    return text, served
