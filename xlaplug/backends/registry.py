"""Kernel tables, keyed by (opcode, device) -- one table, as JAX keeps one rule table per kind.

A kernel is `fn(ins, args, ctx) -> value`:
  ins   the Instruction (shape, attrs, called computations),
  args  operand values: numpy arrays (tuple-shaped operands are Python tuples),
  ctx   the ExecContext: `ctx.run(comp, args)` runs a called computation,
        `ctx.scalar_fn(comp)` gives a compiled scalar function (the device's) for a reducer or
        comparator computation, `ctx.options` holds run limits.
It returns a numpy array of exactly `ins.shape` (dtype and dims), or a tuple for tuples.

A kernel that only moves values or talks to peers (tuples, calls, control flow, the
collectives) is registered once, for EVERY_DEVICE; a device's own kernel of the same opcode
comes first.  Which modules hold a device's kernels is its Backend's to say (backend.py).
"""
from __future__ import annotations

import threading
from typing import Callable

from .backend import backend_for, is_backend

KERNELS: dict[tuple[str, str], Callable] = {}
EVERY_DEVICE = "*"


def kernel(*opcodes: str, device: str = "cpu"):
    def deco(fn):
        for op in opcodes:
            KERNELS[(op, device)] = fn
        return fn
    return deco


def lookup(opcode: str, device: str = "cpu") -> Callable | None:
    """The built-in kernel of `opcode` on `device` (None on a device xlaplug has no backend
    for: a plugin may name one)."""
    if not is_backend(device):
        return None
    _load_builtin(device)
    fn = KERNELS.get((opcode, device))
    return fn if fn is not None else KERNELS.get((opcode, EVERY_DEVICE))


_LOADED: set[str] = set()
_LOADING = threading.RLock()  # device threads may look kernels up for the first time at once


def _load_builtin(device: str) -> None:
    """Import the kernel modules of `device` (and the device-neutral ones in common/):
    each registers its kernels on import."""
    if device in _LOADED:
        return
    with _LOADING:
        if device not in _LOADED:
            _import_builtin(device)
            _LOADED.add(device)  # only once every kernel module is in


def _import_builtin(device: str) -> None:
    import importlib
    import pkgutil
    from . import common, spmd
    # common and spmd (the collectives) serve every device; then the device's own package
    packages = [common, spmd, importlib.import_module(backend_for(device).kernel_package)]
    for pkg in packages:
        for info in pkgutil.iter_modules(pkg.__path__):
            importlib.import_module(f"{pkg.__name__}.{info.name}")
