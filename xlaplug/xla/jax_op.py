"""`xlaplug.jax.op`: a plugin op as a JAX function.

    swish = xlaplug.jax.op("acme.swish", plugins=["plugins"])
    y = swish(x, beta=1.5)             # jit, grad, vmap, shard_map: all apply

The op's shape rule gives its results (no ShapeDtypeStruct to spell out); attributes are
keyword arguments, typed as jax.ffi.ffi_call types them (so the decomposition sees the values
a kernel would).  Which path computes it:

  - the kernel path, `jax.ffi.ffi_call(op, ...)`, on a platform where the op has a kernel
    AND XLA has an FFI target registered under the op's name (`jax_targets.kernel_target`);
  - otherwise the decomposition, inlined as lax ops by the jax builder (jax_builder.py):
    traceable, differentiable, batchable, on any backend, exported as plain StableHLO.
    `prefer="decomposition"` forces it; `prefer="kernel"` insists on the kernel.

Gradients: a plugin's `@plugin.vjp(op)` rule if it has one (reverse mode only); else, when
the kernel path may run, a custom_jvp whose tangents are the decomposition's (forward mode,
and reverse mode by transposition); on the decomposition path jax differentiates the lax
ops themselves.  vmap: the decomposition's
batching, or the FFI call's `vmap_method` (the kernel decorator's, default "sequential").
"""
from __future__ import annotations

import numpy as np

from ..hlo.errors import HloError
from ..hlo.ir import Shape
from ..plugin.api import PluginError, bind_call
from ..plugin.rules import shape_rule_kwargs
from .jax_builder import JaxBuilder, _ffi_custom_call, shape_of
from . import jax_targets
from .jax_lowering import dtype_of
from .jax_targets import PLATFORMS

def _jax():
    from .jaxlib_names import require_jax
    require_jax("xlaplug.jax.op")
    import jax
    return jax


def typed_attr(op: str, key: str, v):
    """An attribute as ffi_call types it (and as a kernel then reads it back)."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (str, np.generic, np.ndarray)):
        return v
    if isinstance(v, int):
        return np.int64(v)
    if isinstance(v, float):
        return np.float64(v)
    if isinstance(v, complex):
        return np.complex128(v)
    if isinstance(v, (tuple, list)):
        return tuple(typed_attr(op, key, x) for x in v)
    raise PluginError(f"op '{op}': attribute {key}= must be a static value (a Python or numpy "
                      f"scalar, a string, a numpy array or a tuple of them), got "
                      f"{type(v).__name__}")


def _axis_size(op: str, axis_name) -> int:
    if axis_name is None:
        return 1
    jax = _jax()
    try:
        return int(jax.lax.axis_size(axis_name))
    except NameError:
        raise PluginError(f"op '{op}': axis_name={axis_name!r} is not bound here (call the op "
                          f"inside shard_map or pmap over that axis)") from None


def _rule_call(fn, what: str, args: list, kwargs: dict):
    """A plugin rule's own failure as one PluginError naming it (jax's errors pass)."""
    try:
        return bind_call(fn, what, args, kwargs)
    except HloError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, AssertionError) as e:
        raise PluginError(f"{what} raised {type(e).__name__}: {e}") from e


class PluginOp:
    """A plugin op as a jax-callable function (see the module docstring)."""

    def __init__(self, name: str, registry, prefer: str | None = None, axis_name=None,
                 mpi=None):
        if prefer not in (None, "kernel", "decomposition"):
            raise PluginError(f"prefer must be 'kernel', 'decomposition' or None, got {prefer!r}")
        self.name, self.registry, self.prefer, self.axis_name = name, registry, prefer, axis_name
        self.mpi = mpi  # a jax_mpi.MpiWorld: the op's communicator kernel runs over MPI
        self.__name__ = name
        have = (name in registry.shapes or name in registry.decompositions
                or any(o == name for o, _ in registry.kernels))
        if not have:
            raise PluginError(f"xlaplug.jax.op: no plugin op '{name}'; {registry.describe(name)}")
        if prefer == "decomposition" and name not in registry.decompositions:
            raise PluginError(f"op '{name}': prefer='decomposition' but no plugin gives it a "
                              f"decomposition; {registry.describe(name)}")

    def __repr__(self) -> str:
        return f"<xlaplug.jax.op {self.name}>"

    # -- the pieces ---------------------------------------------------------------------------
    def kernel_targets(self) -> dict[str, str]:
        """jax platform -> FFI target, for each device the op has a registered kernel on."""
        out = {}
        for (op, device), _entry in sorted(self.registry.kernels.items()):
            if op == self.name and device in PLATFORMS:
                target = jax_targets.kernel_target(op, device)
                if target is not None:
                    out[PLATFORMS[device]] = target
        return out

    def result_shapes(self, xs, attrs: dict, n: int) -> list[Shape] | Shape:
        """The op's results from its shape rule: a Shape, or a list of them (a tuple)."""
        entry = self.registry.shapes.get(self.name)
        if entry is None:
            if self.name not in self.registry.decompositions:
                raise PluginError(f"op '{self.name}' has no shape rule and no decomposition: "
                                  f"jax cannot know its results")
            jax = _jax()
            out = jax.eval_shape(self.decomposition(attrs, n, None), *xs)
            return [shape_of(o) for o in out] if isinstance(out, tuple) else shape_of(out)
        what = f"plugin '{entry.plugin.name}' shape rule for '{self.name}'"
        got = _rule_call(entry.fn, what, [shape_of(x) for x in xs],
                         shape_rule_kwargs(entry.fn, attrs, n))
        if isinstance(got, Shape) and got.is_tuple:
            return list(got.tuple_shapes)
        return list(got) if isinstance(got, (tuple, list)) else got

    def decomposition(self, attrs: dict, n: int, declared):
        """The decomposition as a jax function of the operands."""
        entry = self.registry.decompositions[self.name]
        what = f"plugin '{entry.plugin.name}' decomposition of '{self.name}'"

        def decomposed(*xs):
            b = JaxBuilder(self.axis_name, n, custom_call=self._custom_call)
            out = _rule_call(entry.fn, what, [b, *[b.input(x) for x in xs]], attrs)
            got = [o.shape for o in out] if isinstance(out, (tuple, list)) else out.shape
            if declared is not None and not _compatible(got, declared):
                raise PluginError(f"{what} gives {_fmt(got)} but its shape rule says "
                                  f"{_fmt(declared)}")
            return b.value(out)
        return decomposed

    def kernel(self, target: str, attrs: dict, declared):
        jax = _jax()
        entries = [e for (o, _), e in self.registry.kernels.items() if o == self.name]
        method = next((e.vmap_method for e in entries if e.vmap_method), "sequential")
        structs = [jax.ShapeDtypeStruct(s.dims, dtype_of(s)) for s in _as_list(declared)]
        call = jax.ffi.ffi_call(target, structs if isinstance(declared, list) else structs[0],
                                vmap_method=method)
        return lambda *xs: call(*xs, **attrs)

    def _custom_call(self, ins, operands):
        """A custom call inside a decomposition: another plugin op, through its own path."""
        from ..plugin.attrs import call_kwargs
        target = str(ins.attrs.get("custom_call_target"))
        try:
            inner = PluginOp(target, self.registry, self.prefer, self.axis_name,
                             self.mpi if needs_communicator(self.registry, target) else None)
        except PluginError:
            return _ffi_custom_call(ins, operands)
        out = inner(*operands, **call_kwargs(ins))
        return tuple(out) if isinstance(out, list) else out

    # -- the call ---------------------------------------------------------------------------
    def __call__(self, *args, **attrs):
        jax = _jax()
        import jax.numpy as jnp
        xs = [a if isinstance(a, jax.Array) else jnp.asarray(a) for a in args]
        attrs = {k: typed_attr(self.name, k, v) for k, v in attrs.items()}
        n = self.mpi.size if self.mpi is not None else _axis_size(self.name, self.axis_name)
        declared = self.result_shapes(xs, attrs, n)
        if self.mpi is not None:  # its MPI kernel inside XLA (jax_mpi.py)
            from .jax_mpi import over_mpi
            out = over_mpi(self, xs, attrs, declared, n)
            return tuple(out) if isinstance(declared, list) else out
        has_decomp = self.name in self.registry.decompositions
        decomp = self.decomposition(attrs, n, declared) if has_decomp else None
        targets = {} if self.prefer == "decomposition" else self.kernel_targets()
        if self.prefer == "kernel" and not targets:
            raise PluginError(f"op '{self.name}': prefer='kernel' but no FFI target is "
                              f"registered for its kernels; {self.registry.describe(self.name)}")
        if not targets and decomp is None:
            raise PluginError(f"op '{self.name}' has no decomposition and no kernel registered "
                              f"with XLA; {self.registry.describe(self.name)}")
        kernels = {p: self.kernel(t, attrs, declared) for p, t in targets.items()}
        if kernels and decomp is not None:
            def forward(*xs):
                return jax.lax.platform_dependent(*xs, default=decomp, **kernels)
        elif kernels:
            forward = next(iter(kernels.values())) if len(kernels) == 1 else (
                lambda *xs: jax.lax.platform_dependent(*xs, **kernels))
        else:
            forward = decomp
        rule = self.registry.vjps.get(self.name)
        if rule is None and not kernels:
            out = decomp(*xs)  # jax differentiates and batches the lax ops themselves
        elif rule is None and decomp is not None:
            out = self._with_jvp(forward, decomp)(*xs)
        else:
            out = self._with_vjp(forward, decomp, rule, attrs, n)(*xs)
        return tuple(out) if isinstance(declared, list) else out

    @staticmethod
    def _with_jvp(forward, decomp):
        """The kernel's values, the decomposition's derivative as a JVP: forward mode works
        as on the decomposition path, and jax gets reverse mode by transposing the
        decomposition's linear part (a custom_vjp would allow reverse mode only)."""
        jax = _jax()

        @jax.custom_jvp
        def f(*xs):
            return forward(*xs)

        @f.defjvp
        def f_jvp(primals, tangents):
            return forward(*primals), jax.jvp(decomp, primals, tangents)[1]

        return f

    def _with_vjp(self, forward, decomp, rule, attrs, n):
        jax = _jax()
        name = self.name

        @jax.custom_vjp
        def f(*xs):
            return forward(*xs)

        def fwd(*xs):
            out = forward(*xs)
            return out, (xs, out)

        def bwd(res, ct):
            xs, out = res
            if rule is not None:
                return self._rule_vjp(rule, xs, out, ct, attrs, n)
            if decomp is None:
                raise PluginError(f"op '{name}' cannot be differentiated: it has a kernel but "
                                  f"no decomposition and no @plugin.vjp('{name}') rule")
            return jax.vjp(decomp, *xs)[1](ct)

        f.defvjp(fwd, bwd)
        return f

    def _rule_vjp(self, rule, xs, out, ct, attrs, n, b=None):
        b = b or JaxBuilder(self.axis_name, n, custom_call=self._custom_call)
        what = f"plugin '{rule.plugin.name}' vjp rule of '{self.name}'"
        cts = _rule_call(rule.fn, what, [b, [b.input(x) for x in xs], b.input(out),
                                         b.input(ct)], attrs)
        cts = list(cts) if isinstance(cts, (tuple, list)) else [cts]
        if len(cts) != len(xs):
            raise PluginError(f"{what} gives {len(cts)} cotangents for {len(xs)} operands")
        return tuple(None if c is None else b.value(c) for c in cts)


def needs_communicator(registry, op: str) -> bool:
    """Whether `op`'s CPU kernel takes a communicator (the Horovod ops)."""
    entry = registry.kernel_for(op, "cpu")
    return entry is not None and entry.communicator


def _as_list(declared) -> list[Shape]:
    return declared if isinstance(declared, list) else [declared]


def _leaves(shapes) -> list[Shape]:
    return [s for x in _as_list(shapes)
            for s in (x.tuple_shapes if isinstance(x, Shape) and x.is_tuple else [x])]


def _compatible(got, declared) -> bool:
    g, d = _leaves(got), _leaves(declared)
    # a tuple Shape and a list of Shapes are the same results; layouts do not matter to jax
    return len(g) == len(d) and all(a.compatible(b) for a, b in zip(g, d))


def _fmt(shapes) -> str:
    return "(" + ", ".join(map(str, shapes)) + ")" if isinstance(shapes, list) else str(shapes)
