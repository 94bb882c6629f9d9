"""Kernel tables, keyed by (opcode, device) -- one table, as JAX keeps one rule table per kind.

A kernel is `fn(ins, args, ctx) -> value`:
  ins   the Instruction (shape, attrs, called computations),
  args  operand values: numpy arrays (tuple-shaped operands are Python tuples),
  ctx   the ExecContext: `ctx.run(comp, args)` runs a called computation,
        `ctx.scalar_fn(comp)` gives a compiled scalar function (the device's) for a reducer or
        comparator computation, `ctx.options` holds run limits.
It returns a numpy array of exactly `ins.shape` (dtype and dims), or a tuple for tuples.
"""
from __future__ import annotations

import threading
from typing import Callable

KERNELS: dict[tuple[str, str], Callable] = {}


def kernel(*opcodes: str, device: str = "cpu"):
    def deco(fn):
        for op in opcodes:
            KERNELS[(op, device)] = fn
        return fn
    return deco


def lookup(opcode: str, device: str = "cpu") -> Callable | None:
    _load_builtin(device)
    return KERNELS.get((opcode, device))


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
    packages = [common, spmd]  # spmd: the collectives, for every device
    if device == "cpu":
        from . import cpu
        packages.append(cpu)
    elif device == "cuda":
        from . import cuda
        packages.append(cuda)
    for pkg in packages:
        for info in pkgutil.iter_modules(pkg.__path__):
            importlib.import_module(f"{pkg.__name__}.{info.name}")
