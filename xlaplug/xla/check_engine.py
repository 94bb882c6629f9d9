"""`check-plugins --engine xla`: each plugin op's CPU kernel run inside XLA -- served as a
typed-FFI handler, as `xlaplug run --engine xla` and `xlaplug.jax.register` serve it (the
compiled handler of an @njit kernel, else the Python handler) -- against its decomposition
run by XLA:CPU (runtime/on_xla.py), on check-plugins' seeded operands.

The kernel is registered under a target of the check's own, `xlaplug_check.<op>.<digest of
the plugin's source>`: XLA's table of targets is process-wide with no unregister, so the
op's own name may be taken -- by jaxlib (the LAPACK targets the jax_lapack plugin stands in
for, which `--engine xla` leaves to jaxlib's kernels) or by another plugin of the same op
loaded earlier in the process -- and the check must run *this* plugin's kernel.  Operands
and results have XLA's default (row-major) layouts: the kernel sees the logical values the
interpreter hands it.

What the engine cannot check is reported, not skipped and not counted as passed
(`CheckResult.ok` None): an op with no decomposition (nothing to compare with), with no CPU
kernel (`--engine xla` decomposes it), whose kernel needs a communicator (one XLA device
has no devices to meet; `check-plugins --devices N` checks it on the interpreter).  A
core-opcode override is checked in the modules of its examples against XLA's own opcode
(runtime/check_overrides.py).
"""
from __future__ import annotations

import hashlib

import numpy as np

from ..hlo.errors import HloError

NOT_CHECKABLE = "not checked under --engine xla"


def check_target(op: str, kentry) -> str:
    """The FFI target the check serves `kentry` under (see the module docstring)."""
    src = f"{kentry.plugin.name}\0{kentry.plugin.source}".encode()
    return f"xlaplug_check.{op}.{hashlib.sha256(src).hexdigest()[:12]}"


def why_not_checkable(op: str, kentry, dentry) -> str | None:
    """Why the engine cannot check the CPU kernel `kentry` of `op`, or None."""
    if kentry.communicator:
        return (f"{NOT_CHECKABLE}: its kernel needs a communicator (several devices); "
                "check-plugins --devices N checks it")
    if dentry is None:
        return f"{NOT_CHECKABLE}: the op has no decomposition to compare its kernel with"
    return None


def decomposition_only(reg, wanted: set[str], device: str) -> list[tuple[str, str, str]]:
    """(op, plugin, reason) for each op (of `wanted`, or all) with a decomposition and no
    kernel for `device`."""
    kernels = {op for op, d in reg.kernels if d == device}
    return [(op, e.plugin.name, f"{NOT_CHECKABLE}: the op has no CPU kernel (--engine xla "
                                "decomposes it)")
            for op, e in sorted(reg.decompositions.items())
            if op not in kernels and (not wanted or op in wanted)]


class XlaKernel:
    """Runs plugin kernels inside XLA:CPU through jax: `run(...)` is the kernel runner of
    plugin/check.py's `_one`.  Holds what it registered and compiled, for one check."""

    def __init__(self, registry):
        from .jaxlib_names import require_jax
        require_jax("check-plugins --engine xla")
        # kernels run through jax.jit here: jax is imported before any XLA:CPU client is
        # made, so that the decompositions' runs take jax's client too (cpu_client.py: one
        # CPU client a process)
        import jax  # noqa: F401
        self.registry = registry
        self.how: dict[str, str] = {}      # op -> how XLA serves its kernel
        self._jitted: dict = {}            # (target, shapes, attributes) -> jitted call

    def label(self, op: str) -> str:
        return f"kernel in XLA ({self.how.get(op, 'FFI handler')})"

    def _target(self, op: str, kentry) -> str:
        from .ffi import NOT_SERVED, register_op
        target = check_target(op, kentry)
        served = register_op(op, kentry, target=target, shape_rule=self.registry.shapes.get(op))
        if served.how == NOT_SERVED:
            raise HloError(f"plugin '{kentry.plugin.name}' kernel for '{op}' cannot be served "
                           f"inside XLA: {served.reason}")
        self.how[op] = served.how
        return target

    def run(self, op: str, kentry, arrays, attrs: dict, declared) -> list[np.ndarray]:
        """The kernel's results on `arrays` (one per leaf of the Shape `declared`), run by
        XLA:CPU as a typed-FFI custom call with `attrs` as its attributes."""
        import jax

        from .jax_lowering import dtype_of
        from .jax_op import typed_attr
        from .jaxlib_names import xla_message
        target = self._target(op, kentry)
        leaves = list(declared.leaves())
        typed = {k: typed_attr(op, k, v) for k, v in attrs.items()}
        key = (target, str(declared), tuple((str(a.dtype), a.shape) for a in arrays),
               repr(sorted(typed.items())))
        try:
            with jax.enable_x64(True):  # f64 / s64 operands and results stay 64-bit
                f = self._jitted.get(key)
                if f is None:
                    structs = [jax.ShapeDtypeStruct(s.dims, dtype_of(s)) for s in leaves]
                    call = jax.ffi.ffi_call(target, structs if declared.is_tuple else structs[0])
                    f = self._jitted[key] = jax.jit(lambda *xs: call(*xs, **typed))
                out = f(*arrays)
                return [np.asarray(o) for o in (out if declared.is_tuple else [out])]
        except Exception as e:  # XLA's error: the handler's message names plugin and op
            raise HloError(f"XLA:CPU failed running the kernel: {xla_message(e)}") from None
