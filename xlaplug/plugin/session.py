"""The session of one compile and run: the loaded plugins and the choices of one invocation.

`Session` holds a loaded registry and the device, prefer and strict choices.  It is
passed explicitly -- to `driver.compile_module(module, session)`, whose
custom-call lowering reads it to decide kernel vs decomposition, and to
`runner.execute(module, args, session)`, whose executor asks `session.resolve(ins)` for
plugin kernels (custom ops and core overrides), wrapped so they receive arrays,
preallocated outputs and typed attributes, and so their failures and wrong output shapes
are caught.  Nothing keeps a current session: two sessions may run in one process at once.
"""
from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..backends.device import flatten
from ..hlo.errors import HloError
from ..hlo.ir import Shape
from .api import OpEntry, PluginError, bind_call
from .attrs import call_kwargs, op_name
from .registry import Registry
from .rules import build_decomposition


@dataclass
class Session:
    registry: Registry = field(default_factory=Registry)
    device: str = "cpu"
    prefer: str = "kernel"       # or "decomposition"
    strict: bool = False
    # Attribute values for kernels that name the attribute but whose instruction does not
    # set it (e.g. the conformance suite's --max-ulp for the check ops' max_ulp_difference).
    attr_defaults: dict = field(default_factory=dict)

    def resolve(self, ins) -> Callable | None:
        name = op_name(ins)
        if name is not None:
            entry = self.registry.kernel_for(name, self.device)
            if entry is None:
                return None
            # --prefer decomposition: a custom call with no decomposition still has its
            # kernel; a composite's body is its decomposition.
            if self.prefer == "kernel" or (ins.opcode == "custom-call" and
                                           name not in self.registry.decompositions):
                return _custom_kernel(entry, ins, self)
            return None
        entry = self.registry.kernel_for(ins.opcode, self.device)
        if entry is not None:
            return _override_kernel(entry, ins, self)
        return None


def _alloc(shape: Shape, memory) -> list:
    """Preallocated outputs, where the run's buffers live (device arrays on CUDA)."""
    return [memory.empty(s.dims, s.dtype) if not s.is_token else memory.zeros((), np.bool_)
            for s in shape.leaves()]


def _pack(shape: Shape, leaves: list):
    if not shape.is_tuple:
        return leaves.pop(0)
    return tuple(_pack(s, leaves) for s in shape.tuple_shapes)


def _check_outputs(entry: OpEntry, ins, outs: list[np.ndarray], memory) -> None:
    for k, (arr, want) in enumerate(zip(outs, ins.shape.leaves())):
        if want.is_token:
            continue
        if not (hasattr(arr, "shape") and hasattr(arr, "dtype")):
            arr = np.asarray(arr)
        if tuple(arr.shape) != tuple(want.dims) or (arr.dtype != want.dtype and
                                                    arr.dtype != memory.dtype_of(want.dtype)):
            raise PluginError(f"plugin '{entry.plugin.name}' kernel for '{op_name(ins) or ins.opcode}'"
                              f" (instruction '{ins.name}') produced output {k} as "
                              f"{arr.dtype}{list(arr.shape)}, but the declared shape is {want}",
                              line=ins.line, column=ins.column)


def _with_comm(entry: OpEntry, ins, ctx, extra: dict) -> dict:
    """The kernel's `comm` when it asked for one (its device's place in the run)."""
    if not entry.communicator:
        return extra
    from ..backends.spmd.communicator import communicator_for
    return {**extra, "comm": communicator_for(ctx, ins.name)}


def _run_kernel(entry: OpEntry, ins, args, extra_kwargs: dict, memory=None,
                defaults: dict | None = None, memo: dict | None = None) -> Any:
    """`memo`: what this kernel works out from the instruction alone (its parameters, the
    attributes as typed keywords, the signature checks), kept by the caller for every call
    of `ins` -- attribute values are shared between the calls, as XLA hands a kernel the
    same attributes each time."""
    from ..backends.common.errors import ExecutionError
    from ..backends.device import HostMemory
    memory = memory or HostMemory()
    outs = _alloc(ins.shape, memory)
    memo = {} if memo is None else memo
    fixed = memo.get("fixed")
    if fixed is None:
        params = _parameters(entry.fn)
        base = {k: v for k, v in (defaults or {}).items() if k in params}
        if op_name(ins):
            base.update(call_kwargs(ins))
        types = None
        if "element_types" in params:  # the HLO types, where a device array cannot say (bf16)
            types = tuple(s.element_type for o in ins.operands for s in o.shape.leaves()) + \
                tuple(s.element_type for s in ins.shape.leaves())
        what = f"plugin '{entry.plugin.name}' kernel for '{op_name(ins) or ins.opcode}'"
        fixed = memo["fixed"] = (base, types, what, set())
    base, types, what, fits = fixed
    kwargs = {**base, **extra_kwargs}
    if types is not None:
        kwargs["element_types"] = types
    try:
        ret = bind_call(entry.fn, what, [*flatten(tuple(args)), *outs], kwargs, fits)
    except HloError as e:
        if not e.line:  # point at the instruction the kernel ran for
            e.message = f"instruction '{ins.name}': {e.message}"
            e.args = (e.message,)
            e.line, e.column = ins.line, ins.column
        raise
    except ExecutionError:
        raise
    except Exception as e:
        raise KernelFailure(f"{what} raised {type(e).__name__}: {e} (instruction '{ins.name}')") from e
    if ret is not None:  # a kernel may also return its results instead of writing them
        outs = flatten(ret if isinstance(ret, tuple) else (ret,))
        if len(outs) != len(list(ins.shape.leaves())):
            raise PluginError(f"{what} returned {len(outs)} outputs, the declared shape "
                              f"{ins.shape} of instruction '{ins.name}' has "
                              f"{len(list(ins.shape.leaves()))}", line=ins.line, column=ins.column)
    _check_outputs(entry, ins, outs, memory)
    return _pack(ins.shape, [memory.adopt(o) for o in outs])


def _parameters(fn) -> dict:
    try:
        return dict(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return {}


class KernelFailure(HloError):
    pass


def _custom_kernel(entry: OpEntry, ins, session: Session) -> Callable:
    memo: dict = {}  # _run_kernel's, for this instruction

    def kernel(ins, args, ctx):
        try:
            return _run_kernel(entry, ins, args, _with_comm(entry, ins, ctx, {}), ctx.memory,
                               session.attr_defaults, memo)
        except KernelFailure as e:
            name = op_name(ins)
            if name in session.registry.decompositions:
                fallback = "its decomposition"
            elif ins.opcode == "call":
                fallback = "the composite's body"
            else:
                raise
            if session.strict:
                raise
            warnings.warn(f"{e.message}; falling back to {fallback}", stacklevel=2)
            if ins.opcode == "call" and name not in session.registry.decompositions:
                return ctx.run(ins.attrs["to_apply"], list(args))
            return _run_decomposition(ins, args, ctx, session)
    kernel.plugin = entry.plugin.name
    return kernel


def _override_kernel(entry: OpEntry, ins, session: Session) -> Callable:
    from ..backends.registry import lookup
    # The winner, then the kernels it displaced, highest priority first, then the core one:
    # each override's `replaced` calls the next in this chain.
    below = session.registry.replaced.get((ins.opcode, session.device), [])
    chain = [entry, *sorted(below, key=lambda e: e.priority, reverse=True)]
    core = lookup(ins.opcode, session.device)

    def level(k, ins, args, ctx):
        e = chain[k]
        extra = {}
        if "replaced" in inspect.signature(e.fn).parameters:
            if k + 1 < len(chain):
                extra["replaced"] = lambda *a: level(k + 1, ins, list(a), ctx)
            elif core is not None:
                extra["replaced"] = lambda *a: core(ins, list(a), ctx)
        attrs = {a.replace("-", "_"): v for a, v in ins.attrs.items()}
        return _run_kernel(e, ins, args, _with_comm(e, ins, ctx, {**attrs, **extra}),
                           ctx.memory, session.attr_defaults)

    def kernel(ins, args, ctx):
        return level(0, ins, args, ctx)
    kernel.plugin = entry.plugin.name
    return kernel


def _run_decomposition(ins, args, ctx, session: Session):
    """Run a custom call through its decomposition, built on the fly (kernel fallback)."""
    from ..backends.spmd.place import place_of
    grid = place_of(ctx).grid
    return ctx.run(build_decomposition(ins, session.registry, grid.replicas, grid.partitions),
                   list(args))
