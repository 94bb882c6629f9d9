"""`check-plugins`: every plugin kernel against its decomposition, on random inputs.

For each op with a kernel for the device and each example on its decorators
(`examples=[(("f32[16,32]",), {"beta": 0.5}), ...]`), each trial draws seeded random
operands, runs the kernel (into preallocated outputs) and the decomposition (built with
the builder and run by the executor), and compares them; it also checks the shape rule
against the shapes the kernel really produced.  Ops with no decomposition get their
kernel run and their shape rule checked.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..backends.backend import backend_for
from ..backends.device import flatten
from ..hlo.builder import Builder
from ..hlo.errors import HloError
from ..hlo.ir import Computation, Shape
from ..hlo.opcodes import ALL_OPCODES
from ..hlo.text.shape_parser import parse_shape
from ..plugin.api import OpEntry, bind_call
from ..plugin.rules import shape_rule_kwargs
from ..plugin.session import _parameters
from .inputs import random_value
from .outputs import DEFAULT_TOL, leaves


@dataclass
class CheckResult:
    op: str
    plugin: str
    example: str
    trial: int
    ok: bool | None   # None: not checked (what could not be checked is no pass)
    detail: str


def _as_tuple(shape) -> Shape:
    if isinstance(shape, Shape):
        return shape
    return Shape.tuple_of(shape)


def _close(a: np.ndarray, b: np.ndarray) -> str | None:
    if a.shape != b.shape:
        return f"shape {a.shape} vs {b.shape}"
    if a.dtype.kind in "biu":
        bad = a != b
        return f"{int(bad.sum())} elements differ" if bad.any() else None
    from ..hlo.dtypes import from_dtype
    r, t = DEFAULT_TOL.get(from_dtype(a.dtype), (1e-2, 1e-2))
    a64, b64 = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64), b.astype(
        np.complex128 if a.dtype.kind == "c" else np.float64)
    with np.errstate(invalid="ignore"):
        ok = np.isclose(a64, b64, rtol=r * 10, atol=t * 10, equal_nan=True)
    if ok.all():
        return None
    err = float(np.nanmax(np.abs(a64 - b64)))
    return f"{int((~ok).sum())} of {a.size} elements differ, max abs err {err:.3g}"


def example_label(shapes_txt, attrs) -> str:
    """An example as a user writes it: 1e-06, not np.float32(1e-06) or 9.99999997e-07."""
    return ", ".join(shapes_txt) + "".join(
        f"; {k}={v:.7g}" if isinstance(v, (float, np.floating)) else f"; {k}={v}"
        for k, v in attrs.items())


def decomposition_computation(entry: OpEntry, op: str, shapes, attrs,
                              name: str) -> tuple[Computation, list[Computation]]:
    """The decomposition of `op` on operands of `shapes` as a computation named `name` that
    takes the operands as parameters, and the computations it made (reducers)."""
    b = Builder(name_hint="check")
    params = [b.parameter(k, s) for k, s in enumerate(shapes)]
    out = bind_call(entry.fn, f"plugin '{entry.plugin.name}' decomposition of '{op}'",
                    [b, *params], attrs)
    if isinstance(out, (list, tuple)):
        out = b.tuple(*out)
    return Computation(name, b.instructions, out), list(b.computations)


def _run_decomposition(entry: OpEntry, op: str, shapes, arrays, attrs, ctx):
    comp, made = decomposition_computation(entry, op, shapes, attrs, f"{op}.decomposition")
    for c in made:
        ctx.sequence(c)
    with np.errstate(all="ignore"):  # as every run runs kernels (runner.run_once)
        return ctx.run(comp, list(arrays))


def check_plugins(session, ops=(), trials: int = 3, seed: int = 0,
                  reference: str | None = None, progress=None,
                  engine: str = "interpreter") -> list[CheckResult]:
    """`reference="xla"`: each decomposition runs on XLA:CPU (on_xla.py) instead of
    xlaplug's CPU backend; `reference="jax"`: through the jax builder under jax.jit, with
    gradient checks (on_xla.py).  `engine="xla"`: each kernel runs inside XLA as an
    FFI handler, against its decomposition on XLA:CPU (xla/check_engine.py); what that
    cannot check is reported with `ok` None.  `progress(ops done, ops)`: called after each
    op."""
    from .executor import ExecContext
    run_reference, kernel = _run_decomposition, None
    if reference == "xla" or engine == "xla":
        from .on_xla import run_decomposition_on_xla as run_reference
    elif reference == "jax":
        from .on_xla import run_decomposition_in_jax as run_reference
    reg = session.registry
    if engine == "xla":
        from ..xla import check_engine
        kernel = check_engine.XlaKernel(reg)
    results: list[CheckResult] = []
    wanted = plugin_ops(reg, ops, decomposed=engine == "xla")
    todo = [(op, kentry) for (op, device), kentry in sorted(reg.kernels.items())
            if device == session.device and (not wanted or op in wanted)]
    device = session.device
    for op, kentry in reported(todo, progress):
        dentry, sentry = reg.decompositions.get(op), reg.shapes.get(op)
        examples = kentry.examples or (dentry.examples if dentry else []) or \
            (sentry.examples if sentry else [])
        if op in ALL_OPCODES:  # an override: in its example modules, against the core op
            from .check_overrides import check_override
            results += check_override(session, op, kentry, trials, seed, engine)
            continue
        why = check_engine.why_not_checkable(op, kentry, dentry) if kernel else None
        if why or not examples:
            results.append(CheckResult(op, kentry.plugin.name, "-", 0, None if kernel else True,
                                       why or "not checked: no examples=[...] on its "
                                       "decorators"))
            continue
        for ex in examples:
            shapes_txt, attrs = ex
            label = example_label(shapes_txt, attrs)
            shapes = [parse_shape(s) for s in shapes_txt]
            rng = np.random.default_rng(seed)
            for trial in range(trials):
                # The decomposition is the reference: it runs on the CPU backend.
                ctx = ExecContext("cpu", {"seed": seed}, overrides=None)
                try:
                    arrays = [random_value(s, rng, f"operand {k}") for k, s in enumerate(shapes)]
                    results.append(_one(op, kentry, dentry, sentry, shapes, arrays, dict(attrs),
                                        ctx, label, trial, device, run_reference, kernel))
                except HloError as e:
                    results.append(CheckResult(op, kentry.plugin.name, label, trial, False,
                                               e.message))
                except Exception as e:
                    results.append(CheckResult(op, kentry.plugin.name, label, trial, False,
                                               f"{type(e).__name__}: {e}"))
    if reference == "jax":
        from .on_xla import check_jax_extras
        results += check_jax_extras(session, wanted, seed=seed)
    if kernel is not None:
        results += [CheckResult(op, plugin, "-", 0, None, why) for op, plugin, why in
                    check_engine.decomposition_only(reg, wanted, device)]
    known = {op for op, _ in reg.kernels} | (set(reg.decompositions) if kernel else set())
    if wanted - known:
        missing = sorted(wanted - known)
        results += [CheckResult(m, "-", "-", 0, False, "no loaded plugin has a kernel for it")
                    for m in missing]
    return results


def reported(items: list, progress=None):
    """`items` one by one, calling `progress(k, len(items))` once the k-th is done."""
    for k, item in enumerate(items, 1):
        yield item
        if progress is not None:
            progress(k, len(items))


def plugin_ops(reg, names, decomposed: bool = False) -> set[str]:
    """`names` with each that names a loaded plugin (and no op) replaced by its ops:
    `check-plugins jax_lapack` checks every op of jax_lapack (with a kernel; `decomposed`:
    or a decomposition) and every core opcode it overrides."""
    known = {op for op, _ in reg.kernels} | (set(reg.decompositions) if decomposed else set())
    plugins = {p.name: p for p in reg.plugins}
    out: set[str] = set()
    for n in names:
        if n in plugins and n not in known:  # (its ops, and the core opcodes it overrides)
            out |= (set(plugins[n].ops) & known) | {op for op, _ in plugins[n].overrides}
        else:
            out.add(n)
    return out


def _one(op, kentry, dentry, sentry, shapes, arrays, attrs, ctx, label, trial,
         device: str, run_reference=_run_decomposition, kernel=None) -> CheckResult:
    """One trial: `run_reference` runs the decomposition (the reference: in `ctx` on the CPU
    backend, or on XLA); the kernel runs on `device`, or inside XLA through `kernel`
    (check_engine.XlaKernel)."""
    name = kentry.plugin.name
    if sentry is not None:
        declared = _as_tuple(bind_call(sentry.fn, f"plugin '{name}' shape rule for '{op}'",
                                       shapes, shape_rule_kwargs(sentry.fn, attrs, 1)))
    elif dentry is not None:
        declared = None
    else:
        return CheckResult(op, name, label, trial, False, "no shape rule and no decomposition")
    expected = run_reference(dentry, op, shapes, arrays, attrs, ctx) if dentry else None
    where = getattr(run_reference, "where", "")
    if declared is None:
        declared = _shape_of(expected)
    if kernel is not None:  # its FFI handler passes element_types as the run-time does
        got = kernel.run(op, kentry, arrays, attrs, declared)
    else:
        got = _run_kernel(op, kentry, shapes, arrays, attrs, declared, device, ctx)
    for k, (g, s) in enumerate(zip(got, declared.leaves())):
        if tuple(g.shape) != tuple(s.dims) or g.dtype != s.dtype:
            return CheckResult(op, name, label, trial, False,
                               f"shape rule says {s} but the kernel produced "
                               f"{g.dtype}{list(g.shape)} for output {k}")
    if expected is None:
        return CheckResult(op, name, label, trial, True, "kernel ran; shape rule holds "
                           "(no decomposition to compare)")
    want, who = leaves(expected), kernel.label(op) if kernel else "kernel"
    if dentry.canonical is not None:  # unique only up to a choice: compare canonical forms
        got, want = dentry.canonical(list(got)), dentry.canonical(list(want))
    for k, (g, e) in enumerate(zip(got, want)):
        msg = _close(g, e)
        if msg:
            return CheckResult(op, name, label, trial, False, f"output {k}: {who} vs "
                               f"decomposition{where}: {msg}")
    return CheckResult(op, name, label, trial, True, f"{who} matches decomposition{where}")


def _run_kernel(op, kentry, shapes, arrays, attrs, declared, device: str, ctx) -> list:
    """The kernel's results, run by xlaplug on `device` into preallocated outputs (`ctx`: the
    trial's context, which a communicator kernel's one-device communicator is made on)."""
    name = kentry.plugin.name
    outs = [np.empty(s.dims, s.dtype) for s in declared.leaves()]
    if kentry.communicator:  # one device: its collectives are over itself
        from ..backends.spmd.communicator import communicator_for
        attrs["comm"] = communicator_for(ctx, op)  # a context of its own: no place
    if "element_types" in _parameters(kentry.fn):  # as the run-time passes them
        attrs["element_types"] = tuple(s.element_type for o in shapes for s in o.leaves()) + \
            tuple(s.element_type for s in declared.leaves())
    backend = backend_for(device)
    if not backend.on_host:  # device kernels get device arrays and may launch their own
        mem = backend.memory()  # CUDA: bf16/f8/int4 travel as float32/int8 (cuda/launch.py)
        d_args = [mem.to_device(a) for a in arrays]
        d_outs = [mem.empty(o.shape, o.dtype) for o in outs]
        ret = bind_call(kentry.fn, f"plugin '{name}' kernel for '{op}'", [*d_args, *d_outs], attrs)
        got = [mem.to_host(r, s) for r, s in
               zip(flatten(ret) if ret is not None else d_outs, declared.leaves())]
    else:
        ret = bind_call(kentry.fn, f"plugin '{name}' kernel for '{op}'", [*arrays, *outs], attrs)
        got = leaves(ret) if ret is not None else outs
    return got


def _shape_of(value) -> Shape:
    from ..hlo.dtypes import from_dtype
    if isinstance(value, tuple):
        return Shape.tuple_of(_shape_of(v) for v in value)
    a = np.asarray(value)
    return Shape.array(from_dtype(a.dtype), a.shape)
