"""Plugin kernels registered with XLA as typed-FFI targets (platform "cpu", api_version 1).

XLA's table of FFI targets is process-wide and has no unregister, and the handlers must
outlive every executable that calls them: so the handlers xlaplug registered are kept here,
in the process-wide table `_TARGETS` (under a lock); the compiled handlers' code is in
`_HANDLERS`, loaded once per process (handler_cache.py: LLVM's symbols are process-wide
too).  A target
registered again by the same plugin is a no-op; by a different plugin it is an error naming
both; one that XLA already holds from elsewhere (jaxlib's own LAPACK targets) is reported,
not served.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field, replace

from numba.core.registry import CPUDispatcher

from ...backends.backend import backend_for, is_backend
from ...backends.cpu.jit_store import resolved
from ...hlo.opcodes import ALL_OPCODES
from . import abi
from .compiled_handler import CompiledHandler, why_not_compiled
from .handler_cache import HandlerCache
from .python_handler import PythonHandler
from .signatures import compile_examples

COMPILED, PYTHON, NOT_SERVED = "compiled handler", "Python handler", "not served"
OWN = "xlaplug"  # the owner of the targets xlaplug serves itself (serve_own)


@dataclass
class Served:
    """How one op is served inside XLA."""
    op: str
    plugin: str
    how: str            # COMPILED, PYTHON or NOT_SERVED
    reason: str = ""    # why not compiled, or why not served
    new: bool = True    # False: this plugin had registered it already
    taken: bool = False  # XLA holds the target from another library (jaxlib's own)


@dataclass
class Report:
    ops: list[Served] = field(default_factory=list)

    def __getitem__(self, op: str) -> Served:
        for s in self.ops:
            if s.op == op:
                return s
        raise KeyError(op)

    @property
    def served(self) -> list[str]:
        return [s.op for s in self.ops if s.how != NOT_SERVED]

    def __str__(self) -> str:
        lines = [f"{s.op:32} {s.how:17} plugin '{s.plugin}'" + (f": {s.reason}" if s.reason
                                                                 else "") for s in self.ops]
        return "\n".join(lines) or "no plugin op has a CPU kernel"


@dataclass
class _Target:
    plugin: str
    source: str
    handler: object     # CompiledHandler or PythonHandler: alive as long as the process
    served: Served


_TARGETS: dict[str, _Target] = {}
_LOCK = threading.Lock()
_HANDLERS = HandlerCache()  # the compiled handlers' code, one per kernel (handler_cache.py)


def _xla_cpu(what: str = "registering plugin kernels with XLA"):
    """jaxlib's xla_client, once the process's XLA:CPU client exists (jax's, or jaxlib's own
    where jax is not imported: xla/cpu_client.py): registering before that only queues
    the target, and XLA's refusal would come later, far from its cause."""
    from .. import jaxlib_names
    from ..cpu_client import cpu_backend
    cpu_backend(what)
    abi.check_version(abi.header_version(jaxlib_names.include_dir(what)),
                      "jaxlib's xla/ffi/api/c_api.h")
    return jaxlib_names.xla_client(what)


def _register(xc, target: str, handler) -> None:
    """`target` served by `handler` (its address, as jax.ffi.register_ffi_target does: a
    PyCapsule of the function pointer, typed FFI on the CPU)."""
    new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p,
                            ctypes.c_void_p)(("PyCapsule_New", ctypes.pythonapi))
    capsule = new(ctypes.cast(abi.HANDLER(handler.address), ctypes.c_void_p), None, None)
    xc.register_custom_call_target(target, capsule, "cpu", 1)


def handler_for(op: str, entry, shape_rule=None) -> tuple[object, Served]:
    """The compiled handler where the kernel qualifies, else the Python handler."""
    entry = replace(entry, fn=resolved(entry.fn))  # a deferred @njit kernel: its dispatcher
    python = PythonHandler(op, entry)
    reason = None
    if isinstance(entry.fn, CPUDispatcher):
        reason = compile_examples(op, entry, shape_rule)
    reason = reason or why_not_compiled(entry.fn)
    if reason is None:
        return (CompiledHandler(op, entry, python, _HANDLERS),
                Served(op, entry.plugin.name, COMPILED))
    return python, Served(op, entry.plugin.name, PYTHON, reason)


def register_op(op: str, entry, target: str | None = None, shape_rule=None) -> Served:
    """Serve plugin kernel `entry` (an OpEntry) inside XLA as FFI target `target` (the op's
    own name unless given); `shape_rule` (the op's shape OpEntry) lets an @njit kernel be
    compiled for its examples."""
    xc = _xla_cpu()
    target = target or op
    plugin = entry.plugin
    with _LOCK:
        held = _TARGETS.get(target)
        if held is not None:
            if (held.plugin, held.source) == (plugin.name, plugin.source):
                s = held.served
                return Served(op, s.plugin, s.how, s.reason, new=False)
            raise abi.FfiError(f"FFI target '{target}' is already served by plugin "
                               f"'{held.plugin}' ({held.source}); plugin '{plugin.name}' "
                               f"({plugin.source}) cannot register it too")
        handler, served = handler_for(op, entry, shape_rule)
        try:
            _register(xc, target, handler)
        except Exception as e:  # XLA's refusal: a name taken elsewhere, a version refused
            said = str(e).splitlines()[0]
            taken = "Duplicate FFI handler registration" in said
            if taken:
                said = "another library (jaxlib's own kernels?) registered it first"
            return Served(op, plugin.name, NOT_SERVED, f"XLA refused target '{target}': {said}",
                          taken=taken)
        _TARGETS[target] = _Target(plugin.name, plugin.source, handler, served)
        return served


def serve_own(targets: list[str], make) -> object:
    """xlaplug's own handler of `targets` (one object serves them all, e.g. the MPI
    collectives' xla/ffi/mpi_handler.py): made by `make()` and registered the first time,
    the same object every time after."""
    xc = _xla_cpu()
    with _LOCK:
        held = _TARGETS.get(targets[0])
        if held is not None and held.plugin == OWN:
            return held.handler
        handler = make()
        for target in targets:
            if target in _TARGETS:
                raise abi.FfiError(f"FFI target '{target}' is xlaplug's own; plugin "
                                   f"'{_TARGETS[target].plugin}' registered it already")
            _register(xc, target, handler)
            _TARGETS[target] = _Target(OWN, "xlaplug", handler, Served(target, OWN, PYTHON))
        return handler


def register_registry(registry) -> Report:
    """Every op of a plugin Registry that has a CPU kernel, under its own name."""
    report = Report()
    for (op, device), entry in sorted(registry.kernels.items(), key=lambda kv: kv[0]):
        if not (is_backend(device) and backend_for(device).on_host) or op in ALL_OPCODES:
            continue  # XLA:CPU hands FFI handlers host buffers; core-opcode overrides are
            # no FFI targets of their own (--engine xla serves them per instruction:
            # xla/override_rewrite.py)
        if entry.communicator:
            report.ops.append(Served(op, entry.plugin.name, NOT_SERVED,
                                     "its kernel needs a communicator (devices of one run)"))
            continue
        report.ops.append(register_op(op, entry, shape_rule=registry.shapes.get(op)))
    return report
