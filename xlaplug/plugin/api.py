"""The public plugin API: a `Plugin` collects what one plugin file provides.

    from xlaplug.plugin import Plugin
    plugin = Plugin("acme", version="1.0", description="Acme ops")

    @plugin.shape("acme.swish")                 # result Shape(s) from operand Shapes + attrs
    @plugin.decomposition("acme.swish")         # (builder, *values, **attrs) -> value
    @plugin.kernel("acme.swish", device="cpu")  # (*arrays, *outputs, **attrs); writes outputs
    @plugin.kernel("all-reduce", device="cpu")  # replaces a core opcode's kernel
    @plugin.hlo_pass("acme-fold", after="dce")  # module -> bool (changed)
    @plugin.vjp("acme.swish")   # (builder, operands, result, cotangent, **attrs) -> cotangents

Every Plugin constructed while the loader imports a plugin file is collected for that load
(`collecting`); the loader's Registry then answers "who provides op X on device D".
"""
from __future__ import annotations

import contextlib
import contextvars
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

from ..hlo.errors import HloError, one_line
from ..hlo.opcodes import ALL_OPCODES

DEVICES = ("cpu", "cuda")  # backends.backend.BACKENDS, not imported here (tests/test_backend.py)


class PluginError(HloError):
    def headline(self) -> str:
        # A plugin failure with no instruction position is not about the HLO file.
        return super().headline() if self.line else f"error: {one_line(self.message)}"


@dataclass
class OpEntry:
    plugin: "Plugin"
    fn: Callable
    examples: list = field(default_factory=list)
    priority: int = 0
    communicator: bool = False  # the kernel gets `comm`: backends/spmd/communicator.py
    # A decomposition's: outputs (numpy) -> outputs in a canonical form, applied to the
    # kernel's and the decomposition's before check-plugins compares them, for results
    # unique only up to a choice (an eigenvector's sign).
    canonical: Callable | None = None
    # How jax.vmap batches the kernel's FFI call (jax.ffi.ffi_call's vmap_method).
    vmap_method: str | None = None


VMAP_METHODS = ("sequential", "sequential_unrolled", "expand_dims", "broadcast_all")


# The list the Plugins constructed by the import under way go to: one per load, per thread
# (two sessions may load plugin files at the same time), none outside a load.
_COLLECTOR: contextvars.ContextVar[list | None] = contextvars.ContextVar("plugin_collector",
                                                                         default=None)


@contextlib.contextmanager
def collecting():
    """`with collecting() as found:` -- the Plugins constructed inside the block."""
    found: list[Plugin] = []
    token = _COLLECTOR.set(found)
    try:
        yield found
    finally:
        _COLLECTOR.reset(token)


class Plugin:
    def __init__(self, name: str, version: str = "0", description: str = ""):
        self.name, self.version, self.description = name, version, description
        self.shapes: dict[str, OpEntry] = {}
        self.decompositions: dict[str, OpEntry] = {}
        self.kernels: dict[tuple[str, str], OpEntry] = {}
        self.passes: dict[str, tuple[Callable, str | None]] = {}
        self.vjps: dict[str, OpEntry] = {}
        self.source: str = "<python>"
        found = _COLLECTOR.get()
        if found is not None:
            found.append(self)

    def shape(self, op: str, *, examples=None):
        return self._reg(self.shapes, op, examples)

    def decomposition(self, op: str, *, examples=None, canonical=None):
        """`canonical`: outputs -> outputs, for results unique only up to a choice (signs
        of eigenvectors); check-plugins compares kernel and decomposition through it."""
        def deco(fn):
            self.decompositions[op] = OpEntry(self, fn, list(examples or []),
                                              canonical=canonical)
            return fn
        return deco

    def vjp(self, op: str):
        """The reverse-mode rule of `op` for jax (xlaplug.jax.op): written against the
        builder like a decomposition, `(b, operands, result, cotangent, **attrs)` returns
        one cotangent per operand (None: no gradient)."""
        return self._reg(self.vjps, op, None)

    def kernel(self, op: str, *, device: str = "cpu", examples=None, priority: int = 0,
               communicator: bool = False, vmap_method: str | None = None):
        """A kernel for `op` on `device`.  With `communicator=True` it also gets `comm`: this
        device's place in the run and collectives over every device (threads or MPI).
        `vmap_method`: how jax.vmap batches its FFI call (default "sequential")."""
        if device not in DEVICES:
            raise PluginError(f"plugin '{self.name}': kernel for '{op}' names unknown device "
                              f"'{device}' (expected one of {', '.join(DEVICES)})")
        if vmap_method is not None and vmap_method not in VMAP_METHODS:
            raise PluginError(f"plugin '{self.name}': kernel for '{op}': vmap_method must be "
                              f"one of {', '.join(VMAP_METHODS)}, got {vmap_method!r}")

        def deco(fn):
            if communicator and "comm" not in _signature_names(fn):
                raise PluginError(f"plugin '{self.name}': kernel for '{op}' asks for a "
                                  "communicator but takes no 'comm' argument")
            self.kernels[(op, device)] = OpEntry(self, fn, list(examples or []), priority,
                                                 communicator, vmap_method=vmap_method)
            return fn
        return deco

    def hlo_pass(self, name: str, *, after: str | None = None):
        def deco(fn):
            self.passes[name] = (fn, after)
            return fn
        return deco

    def _reg(self, table, op, examples):
        def deco(fn):
            table[op] = OpEntry(self, fn, list(examples or []))
            return fn
        return deco

    @property
    def ops(self) -> list[str]:
        names = set(self.shapes) | set(self.decompositions)
        names |= {op for op, _ in self.kernels if op not in ALL_OPCODES}
        return sorted(names)

    @property
    def overrides(self) -> list[tuple[str, str]]:
        return sorted(k for k in self.kernels if k[0] in ALL_OPCODES)

    def __repr__(self) -> str:
        return f"<Plugin {self.name} {self.version} from {self.source}>"


def _signature_names(fn: Callable) -> set[str]:
    import inspect
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()


def bind_call(fn: Callable, what: str, args: list, kwargs: dict[str, Any],
              fits: set | None = None):
    """Call a plugin rule with positional operands and typed attributes; a clear error when
    they do not fit its signature.  `fits`: the (argument count, keyword names) already seen
    to fit (a kernel's, kept by its caller for every call of one instruction), which skip the
    check; a new one that fits is added."""
    seen = (len(args), frozenset(kwargs)) if fits is not None else None
    if seen is not None and seen in fits:
        return fn(*args, **kwargs)
    try:
        sig = inspect.signature(fn)
        sig.bind(*args, **kwargs)
        if seen is not None:
            fits.add(seen)
    except TypeError as e:
        raise PluginError(f"{what} does not accept this call: {e} (call passes "
                          f"{len(args)} positional arguments and attributes "
                          f"{sorted(kwargs) or 'none'})") from None
    except ValueError:
        pass
    return fn(*args, **kwargs)
