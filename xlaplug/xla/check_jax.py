"""`check-plugins --jax`: each op's decomposition as jax runs it (the jax builder, under
jax.jit) is the reference its kernel is held against, and its gradients are checked.

  - values: the kernel (run by xlaplug, or -- where an FFI target serves it, see
    jax_op._kernel_target -- through `jax.ffi.ffi_call` under jax.jit) against the
    decomposition under jax.jit, on check-plugins' random operands;
  - gradients: `jax.test_util.check_grads` (forward and reverse, order 1) on the
    decomposition path, in float64 (64-bit jax for the check only) so finite differences
    are meaningful; ops with integer operands have none.
"""
from __future__ import annotations

import numpy as np

from ..plugin.api import bind_call


def _jax():
    import jax
    return jax


def _decomposed(entry, op: str, attrs: dict):
    from .jax_builder import JaxBuilder
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
    from ..plugin.check import CheckResult, _close, example_label
    from ..runtime.inputs import random_value
    from .jax_op import _kernel_target
    reg = session.registry
    out = []
    for (op, device), kentry in sorted(reg.kernels.items()):
        dentry = reg.decompositions.get(op)
        if device != session.device or (ops and op not in ops) or dentry is None:
            continue
        sentry = reg.shapes.get(op)
        examples = kentry.examples or dentry.examples or (sentry.examples if sentry else [])
        target = _kernel_target(op, device)
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
    from .jax_op import PluginOp
    jax = _jax()
    f = PluginOp(op, reg, prefer="kernel")
    with jax.enable_x64(True):
        return _numpy(jax.jit(lambda *xs: f(*xs, **attrs))(*arrays))
