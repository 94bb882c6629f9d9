"""Every run the runtime hands to XLA through the bridge (xla/): the places where xlaplug's
result is held against XLA's, or XLA runs the module instead.

  - `--engine xla`: the module as read runs on XLA:CPU, plugin kernels as FFI handlers
    (`run_on_xla`; the lowering is xla/engine.py);
  - `run --reference xla`: the executable's run against XLA given the same arguments
    (`run_against_xla`, `diff_devices`; the portable text is xla/reference.py's);
  - `check-plugins --reference xla`: an op's decomposition, built as a module of its own and
    run by XLA:CPU, is the reference its kernel is held against (`run_decomposition_on_xla`);
  - `check-plugins --jax`: each op's decomposition as jax runs it (the jax builder, under
    jax.jit) is the reference, and its gradients are checked:
      values: the kernel (run by xlaplug, or -- where an FFI target serves it, see
      jax_targets.kernel_target -- through `jax.ffi.ffi_call` under jax.jit) against the
      decomposition under jax.jit, on check-plugins' random operands;
      gradients: `jax.test_util.check_grads` (forward and reverse, order 1) on the
      decomposition path, in float64 (64-bit jax for the check only) so finite differences
      are meaningful; ops with integer operands have none.
They sit in the runtime, not in xla/, because they run xlaplug too (executor, inputs,
RunResult): the bridge below stays free of the runtime (tests/test_layering.py).
"""
from __future__ import annotations

import time

import numpy as np

from ..hlo.ir import Module
from ..plugin.api import bind_call


def _jax():
    import jax
    return jax


def _decomposed(entry, op: str, attrs: dict):
    from ..xla.jax_builder import JaxBuilder
    what = f"plugin '{entry.plugin.name}' decomposition of '{op}'"

    def f(*xs):
        b = JaxBuilder()
        return b.value(bind_call(entry.fn, what, [b, *[b.input(x) for x in xs]], dict(attrs)))
    return f


def _numpy(out):
    return tuple(np.asarray(o) for o in out) if isinstance(out, tuple) else np.asarray(out)


def run_decomposition_in_jax(entry, op: str, shapes, arrays, attrs, ctx=None):
    """The decomposition of `op` on `arrays` through jax.jit (64-bit types as the operands
    have them): one array, or a tuple (as the decomposition returns)."""
    jax = _jax()
    with jax.enable_x64(True):
        return _numpy(jax.jit(_decomposed(entry, op, attrs))(*arrays))


run_decomposition_in_jax.where = " in jax (jit)"  # in check-plugins' detail line


def check_jax_extras(session, ops=(), seed: int = 0) -> list:
    """Per op with a kernel and a decomposition and per example: the gradient check, and the
    kernel path through jax against the decomposition where an FFI target serves it."""
    from ..hlo.text.shape_parser import parse_shape
    from .check import CheckResult, _close, example_label
    from .inputs import random_value
    from ..xla.jax_targets import kernel_target
    reg = session.registry
    out = []
    for (op, device), kentry in sorted(reg.kernels.items()):
        dentry = reg.decompositions.get(op)
        if device != session.device or (ops and op not in ops) or dentry is None:
            continue
        sentry = reg.shapes.get(op)
        examples = kentry.examples or dentry.examples or (sentry.examples if sentry else [])
        target = kernel_target(op, device)
        for shapes_txt, attrs in examples:
            label = example_label(shapes_txt, attrs)
            shapes = [parse_shape(s) for s in shapes_txt]
            rng = np.random.default_rng(seed)
            try:
                arrays = [random_value(s, rng, f"operand {k}") for k, s in enumerate(shapes)]
                out.append(CheckResult(op, kentry.plugin.name, label, 0,
                                       *_gradients(dentry, op, arrays, attrs)))
                if target is not None:
                    got = _kernel_via_ffi(reg, op, arrays, attrs)
                    want = run_decomposition_in_jax(dentry, op, shapes, arrays, attrs)
                    bad = [m for g, w in zip(_leaves(got), _leaves(want)) if (m := _close(g, w))]
                    out.append(CheckResult(op, kentry.plugin.name, label, 0, not bad,
                                           f"FFI target '{target}' vs decomposition in jax: "
                                           + (bad[0] if bad else "match")))
            except Exception as e:  # the check's finding, not a crash of the command
                out.append(CheckResult(op, kentry.plugin.name, label, 0, False,
                                       f"jax: {type(e).__name__}: {str(e).splitlines()[0]}"))
    return out


def _leaves(v):
    return list(v) if isinstance(v, tuple) else [v]


def _gradients(dentry, op, arrays, attrs) -> tuple[bool, str]:
    jax = _jax()
    if not all(a.dtype.kind in "fc" for a in arrays):
        return True, "gradients: not checked (integer or bool operands)"
    from jax.test_util import check_grads
    wide = [a.astype(np.complex128 if a.dtype.kind == "c" else np.float64) for a in arrays]
    with jax.enable_x64(True):
        f = _decomposed(dentry, op, attrs)
        if isinstance(jax.eval_shape(f, *wide), tuple):
            g = f
            f = lambda *xs: sum(jax.numpy.sum(o) for o in g(*xs))  # noqa: E731
        try:
            check_grads(jax.jit(f), tuple(wide), order=1, modes=("fwd", "rev"))
        except AssertionError as e:
            return False, f"gradients: check_grads fails: {str(e).strip().splitlines()[0]}"
    return True, "gradients: check_grads (fwd, rev) passes on the decomposition"


def _kernel_via_ffi(reg, op, arrays, attrs):
    from ..xla.jax_op import PluginOp
    jax = _jax()
    f = PluginOp(op, reg, prefer="kernel")
    with jax.enable_x64(True):
        return _numpy(jax.jit(lambda *xs: f(*xs, **attrs))(*arrays))


def decomposition_module(entry, op: str, shapes, attrs) -> Module:
    """The decomposition of `op` on operands of `shapes` as a module: its entry takes the
    operands as parameters and returns what the decomposition returns."""
    from .check import decomposition_computation
    comp, made = decomposition_computation(entry, op, shapes, attrs,
                                           f"{op.replace('.', '_')}_decomposition")
    return Module(f"check_{op.replace('.', '_')}", [*made, comp], comp)


def run_decomposition_on_xla(entry, op: str, shapes, arrays, attrs, ctx=None):
    """XLA:CPU's result of the decomposition on `arrays`: one array, or a tuple of them
    (as the decomposition returns)."""
    from ..hlo.text.printer import module_to_text
    from ..xla.xla_executables import run_on_xla_cpu
    module = decomposition_module(entry, op, shapes, attrs)
    (outs,) = run_on_xla_cpu(module_to_text(module), [list(arrays)],
                             what="check-plugins --reference xla")
    return tuple(outs) if module.entry.root.shape.is_tuple else outs[0]


run_decomposition_on_xla.where = " on XLA:CPU"  # in check-plugins' detail line


def diff_devices(ours: list[list[np.ndarray]], theirs: list[list[np.ndarray]], rtol=None,
                 atol=None):
    """OutputDiffs of every device (named `outK` on one device, `outK device d` on many)."""
    from .stats import diff_all
    many = len(ours) > 1
    out = []
    for d, (a, b) in enumerate(zip(ours, theirs)):
        out += diff_all(a, b, rtol, atol, f" device {d}" if many else "")
    return out


def run_against_xla(exe, npz: dict | None, options, rtol=None, atol=None,
                    platform: str | None = None, excess_precision: bool = True):
    """(xlaplug's RunResult, the OutputDiffs of every device against XLA:CPU): the
    executable run as any run is, and XLA given the same arguments -- drawn by the same
    functions from the same seed -- for the module as read (`exe.source_text`).
    `excess_precision`: as the executable was compiled (False: XLA without it too)."""
    from ..xla.reference import check_arguments, reference_for_text
    module, grid = exe.module, exe.grid
    check_arguments(module)
    if grid.count == 1:
        from .inputs import build_inputs
        per_device = [build_inputs(module, npz, options)]
    else:
        from .inputs import device_inputs
        per_device = device_inputs(module, npz, options, grid.count)
    ours = exe.run(inputs=npz, options=options)
    theirs = reference_for_text(exe.source_text, exe.session.registry, per_device,
                                grid.replicas, grid.partitions, platform or "cpu",
                                excess_precision)
    return ours, diff_devices(ours.per_device, theirs, rtol, atol)


class EngineProgram:
    """A module as read, made into XLA:CPU's executable once -- lowered (xla/engine.py),
    its plugin kernels registered as FFI handlers, the instructions of core opcodes a
    plugin overrides bound to their kernels (`overrides`: xla/override_rewrite.py; they run
    in `ctx`, an interpreter context of one device), compiled -- and run as often as asked, as
    jax.jit keeps its executable: an Executable keeps one (DeviceContexts.engine_program),
    and so does each of xlaplug.jax's compiled entries.  `made_s`: lowering and XLA's
    compile, in no run's time."""

    def __init__(self, source_text: str, session):
        import weakref

        from ..xla.engine import engine_program, require_host_device
        from ..xla.jaxlib_names import require_jax
        from ..xla.xla_executables import compile_on_xla_cpu
        require_jax("--engine xla")
        require_host_device(session.device)
        from .executor import ExecContext
        t0 = time.perf_counter()
        # the context the override kernels run in, as the interpreter's (one device)
        self.ctx = ExecContext("cpu", overrides=session.resolve)
        self.text, self.served, self.overrides = engine_program(source_text,
                                                                session.registry, self.ctx)
        if self.overrides is not None:  # (the binding goes with the program)
            weakref.finalize(self, self.overrides[0].unbind, self.overrides[1])
        self.compiled = compile_on_xla_cpu(self.text, what="--engine xla")
        self.made_s = time.perf_counter() - t0
        self.runs = 0

    def run(self, args: list, repeat: int = 1):
        """A runner.RunResult of `repeat` runs on one device's `args`: its times are the
        runs' (execution and outputs as numpy views), its compile_s the making of the
        program when this is its first run (0 after)."""
        from ..xla.xla_executables import run_compiled
        from .options import RunResult
        times: list[float] = []
        binding = self.overrides[0].runs[self.overrides[1]] if self.overrides else None
        if binding is not None:
            binding.failure = None
        try:
            (outs,) = run_compiled(self.compiled, [list(args)], repeat=repeat, times=times)
        except Exception:
            if binding is not None and binding.failure is not None:
                raise binding.failure from None  # the kernel's own error, not XLA's wording
            raise
        made_s, self.runs = (self.made_s if not self.runs else 0.0), self.runs + 1
        # the interpreter's figure: the median of the runs (XLA's compile is in none of them)
        return RunResult(outs, [outs], {"compile_s": made_s,
                                        "run_s": sorted(times)[len(times) // 2]},
                         times, engine="xla")


def run_on_xla(source_text: str, session, args: list, repeat: int = 1):
    """A runner.RunResult of the module run by XLA:CPU with its plugin kernels as FFI
    handlers, on one device: an EngineProgram made for this run only."""
    return EngineProgram(source_text, session).run(args, repeat)
