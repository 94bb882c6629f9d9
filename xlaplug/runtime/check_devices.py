"""`check-plugins --devices N`: each multi-device kernel on N devices (threads) against the
reference on the same N devices.

* A plugin op whose kernel asks for a communicator: every device draws its own random
  operands; the kernel runs on all N at once with a communicator over them, the
  decomposition (built for N replicas) runs through the executor's collectives; each
  device's outputs are compared.
* An override of a core opcode (a ring all-reduce replacing `all-reduce`, say): its
  examples are HLO module texts; the module runs with the override and with the core
  kernel, on N replicas, and each device's outputs are compared.
"""
from __future__ import annotations

import numpy as np

from ..backends.device import flatten
from ..hlo.builder import Builder
from ..hlo.errors import HloError
from ..hlo.ir import Computation, Module
from ..hlo.opcodes import ALL_OPCODES
from ..hlo.text.shape_parser import parse_shape
from ..plugin.api import bind_call
from ..plugin.rules import shape_rule_kwargs
from .check import CheckResult, _as_tuple, _close, plugin_ops, reported
from .inputs import random_value
from .outputs import leaves


def check_on_devices(session, ops=(), n: int = 2, trials: int = 3,
                     seed: int = 0, progress=None) -> list[CheckResult]:
    """`progress(ops done, ops)`: called after each op."""
    reg = session.registry
    wanted = plugin_ops(session.registry, ops)
    out: list[CheckResult] = []
    todo = [(op, kentry) for (op, device), kentry in sorted(reg.kernels.items())
            if device == session.device and (not wanted or op in wanted)]
    for op, kentry in reported(todo, progress):
        name = kentry.plugin.name
        if op in ALL_OPCODES:
            texts = [e for e in kentry.examples if isinstance(e, str)]
            if not texts:
                out.append(CheckResult(op, name, "-", 0, True, "not checked on devices: no "
                                       "HLO module text in examples=[...]"))
            for k, text in enumerate(texts):
                for trial in range(trials):
                    out.append(_guard(lambda: _override(session, op, name, text, n, seed,
                                                        trial), op, name, f"module {k}", trial))
            continue
        if not kentry.communicator:  # a one-device kernel: plain check-plugins covers it
            continue
        dentry, sentry = reg.decompositions.get(op), reg.shapes.get(op)
        examples = kentry.examples or (dentry.examples if dentry else []) or \
            (sentry.examples if sentry else [])
        if dentry is None or not examples:
            out.append(CheckResult(op, name, "-", 0, True, "not checked on devices: needs a "
                                   "decomposition and examples"))
            continue
        for shapes_txt, attrs in examples:
            label = ", ".join(shapes_txt) + (f" {attrs}" if attrs else "")
            shapes = [parse_shape(s) for s in shapes_txt]
            rng = np.random.default_rng(seed)
            for trial in range(trials):
                out.append(_guard(lambda: _custom(kentry, dentry, sentry, op, shapes,
                                                  dict(attrs), n, rng, label, trial),
                                  op, name, label, trial))
    return out


def _guard(fn, op, plugin, label, trial) -> CheckResult:
    try:
        return fn()
    except HloError as e:
        return CheckResult(op, plugin, label, trial, False, e.message)
    except Exception as e:  # noqa: BLE001 - a plugin's failure is a failed check
        return CheckResult(op, plugin, label, trial, False, f"{type(e).__name__}: {e}")


def _compare(per_kernel, per_ref, op, plugin, label, trial, n, what) -> CheckResult:
    for d in range(n):
        for k, (g, e) in enumerate(zip(leaves(per_kernel[d]), leaves(per_ref[d]))):
            msg = _close(np.asarray(g), np.asarray(e))
            if msg:
                return CheckResult(op, plugin, label, trial, False,
                                   f"device {d}, output {k}: kernel vs {what}: {msg}")
    return CheckResult(op, plugin, label, trial, True, f"kernel matches {what} on {n} devices")


def _custom(kentry, dentry, sentry, op, shapes, attrs, n, rng, label, trial) -> CheckResult:
    from .executor import ExecContext
    from ..backends.spmd.communicator import Communicator
    from ..backends.spmd.groups import DeviceGrid
    from ..backends.spmd.place import Place
    from ..backends.cpu.blas_threads import largest_product
    from .spmd.runner import DeviceError, blas_for_devices, on_device_threads, run_devices
    plugin = kentry.plugin.name
    grid = DeviceGrid(n, 1)
    arrays = [[random_value(s, rng, f"operand {k}") for k, s in enumerate(shapes)]
              for _ in range(n)]
    b = Builder(name_hint="check", replicas=n)
    params = [b.parameter(k, s) for k, s in enumerate(shapes)]
    root = bind_call(dentry.fn, f"plugin '{plugin}' decomposition of '{op}'", [b, *params],
                     dict(attrs))
    if isinstance(root, (list, tuple)):
        root = b.tuple(*root)
    entry = Computation(f"{op}.decomposition", b.instructions, root)
    module = Module(f"check_{op}", [*b.computations, entry], entry,
                    attrs={"replica_count": n})
    blas = blas_for_devices(largest_product(module), None, n, None)
    expected = run_devices(module, arrays, grid, lambda d: ExecContext("cpu", {}), 30.0,
                           blas_threads=blas)
    declared = _as_tuple(bind_call(sentry.fn, f"plugin '{plugin}' shape rule for '{op}'",
                                   shapes, shape_rule_kwargs(sentry.fn, dict(attrs), n))) \
        if sentry is not None else _as_tuple(root.shape)

    def device(d, rendezvous):
        outs = [np.empty(s.dims, s.dtype) for s in declared.leaves()]
        kw = dict(attrs)
        if kentry.communicator:
            kw["comm"] = Communicator(Place(grid, d, rendezvous), op)
        ret = bind_call(kentry.fn, f"plugin '{plugin}' kernel for '{op}'", [*arrays[d], *outs],
                        kw)
        return tuple(flatten(ret)) if ret is not None else tuple(outs)
    try:
        got = on_device_threads(n, 30.0, device, blas=blas)
    except DeviceError as e:
        return CheckResult(op, plugin, label, trial, False, e.message)
    return _compare(got, expected, op, plugin, label, trial, n, "decomposition")


def _override(session, op, plugin, text, n, seed, trial) -> CheckResult:
    from ..backends.spmd.groups import DeviceGrid
    from .spmd.runner import run_module_devices
    from ..hlo.text.parser import parse_module
    from .inputs import device_inputs
    from .options import RunOptions
    from ..plugin.session import Session
    module = parse_module(text, f"<{plugin} example>")
    grid = DeviceGrid(n, 1)
    args = device_inputs(module, None, RunOptions(seed=seed + trial), n)
    core = Session(device=session.device)  # no plugins: the core kernel
    return _compare(run_module_devices(module, args, grid, session),
                    run_module_devices(module, args, grid, core), op, plugin, "module",
                    trial, n, "core kernel")
