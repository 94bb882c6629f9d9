"""`xlaplug.jax.op` under mpiexec: a plugin op whose kernel takes a communicator (the Horovod
ops) runs its MPI kernel inside XLA, in plain `jax.jit` code on every rank.

    mpiexec -n 4 python train.py      # train.py: allreduce = xlaplug.jax.op("HorovodAllreduce")

The op becomes a typed-FFI call of `xlaplug.mpi.kernel`, the target `--engine xla` over MPI
serves (ffi/mpi_handler.py): the handler runs the interpreter's kernel of a custom-call
instruction made for the call, in a context whose place holds this process's MpiTransport --
the same transport, headers, timeouts and errors as `mpiexec -n D xlaplug run M --engine
xla`.  One `MpiWorld` per process (the ranks as one partitions-only grid of `size` devices,
communicators split once over all of them) lives on the handler object, which is as
process-wide as XLA's FFI targets are.

Order.  Each call takes a u32[] order token as its last operand and returns the next one as
its last result (as mpi_rewrite.py's calls do): the calls of one jax trace form a chain of
data dependencies XLA can neither reorder nor overlap, so independent collectives are
issued in the same order on every rank.  The chain is kept per trace (`jax.extend.core.
get_opaque_trace_state`): a call takes the last token its own trace made.

Gradients (`backward`): the VJP of the op's decomposition, evaluated by a builder whose
collectives are the transposes served over MPI -- all-reduce(add) of the cotangent for an
all-reduce sum, reduce-scatter for an all-gather and back, all-to-all for all-to-all --
and whose forward collectives do not communicate (the VJP of a linear map does not read its
primal values).  A collective that is not linear (a max, min or product reduction) cannot
be differentiated this way: a one-line error names it.
"""
from __future__ import annotations

import json

import numpy as np

from ..hlo.attr_types import ReplicaGroups
from ..hlo.builder import Builder
from ..hlo.ir import Shape
from ..plugin.api import PluginError
from .jax_builder import JaxBuilder, shape_of
from .jax_lowering import binary_monoid, dtype_of

KERNEL = "xlaplug.mpi.kernel"
_TARGET = "xlaplug.mpi."
_KINDS = {"all-reduce": "all_reduce", "all-gather": "all_gather",
          "reduce-scatter": "reduce_scatter", "all-to-all": "all_to_all"}
_HISTORY = 16  # the order tokens of this many traces are kept


class MpiWorld:
    """This process's rank among `size`, its transport, and the handler's bindings (one per
    plugin registry: the kernels a context resolves are its session's)."""

    def __init__(self, handler, transport, make_ctx):
        from ..backends.spmd.groups import DeviceGrid
        from ..backends.spmd.place import Place
        self.handler, self.transport = handler, transport
        self.rank, self.size = transport.rank, transport.size
        self.grid = DeviceGrid(1, self.size)  # the builder counts the ranks as partitions
        self.place = Place(self.grid, self.rank, transport)
        self._make_ctx = make_ctx
        self._bindings: dict[int, tuple] = {}  # id(registry) -> (registry, key, binding)
        self._tokens: list = []                # (trace state, its last order token)
        self.plain = 0  # > 0 while xlaplug lowers a function itself (xlaplug.jax.jit)

    def binding(self, registry) -> tuple[int, object]:
        held = self._bindings.get(id(registry))
        if held is None or held[0] is not registry:
            ctx = self._make_ctx(registry).begin_run(spmd=self.place)
            key, binding = self.handler.bind(ctx, [])
            held = self._bindings[id(registry)] = (registry, key, binding)
        return held[1], held[2]

    def set_timeout(self, seconds: float) -> None:
        self.transport.timeout = float(seconds)

    # -- the order chain, per trace -----------------------------------------------------------
    def _state(self):
        from jax.extend.core import get_opaque_trace_state
        return get_opaque_trace_state()

    def take(self):
        state = self._state()
        for s, token in reversed(self._tokens):
            if s == state:
                return token
        return np.uint32(0)

    def put(self, token) -> None:
        state = self._state()
        self._tokens = [(s, t) for s, t in self._tokens if not s == state][-_HISTORY + 1:]
        self._tokens.append((state, token))

    # -- one call -----------------------------------------------------------------------------
    def call(self, registry, ins, operands: list, order):
        """(results, next order token) of `ins` run over MPI on jax `operands`."""
        import jax
        key, binding = self.binding(registry)
        index = len(binding.instructions)
        binding.instructions.append(ins)
        leaves = list(ins.shape.tuple_shapes) if ins.shape.is_tuple else [ins.shape]
        outs = [jax.ShapeDtypeStruct(s.dims, dtype_of(s)) for s in leaves]
        target = KERNEL if ins.opcode == "custom-call" else _TARGET + _KINDS[ins.opcode]
        call = jax.ffi.ffi_call(target, outs + [jax.ShapeDtypeStruct((), np.uint32)],
                                vmap_method="sequential")
        *values, token = call(*operands, order, run=np.int64(key), index=np.int64(index))
        return (tuple(values) if ins.shape.is_tuple else values[0]), token

    def chained(self, registry, ins, operands: list):
        """`call` with this trace's order token, which it then advances."""
        value, token = self.call(registry, ins, operands, self.take())
        self.put(token)
        return value


def kernel_instruction(name: str, xs, attrs: dict, declared):
    """The custom call the interpreter's kernel runs for one call of op `name`: operands of
    the shapes of `xs`, the attributes as its backend_config (JSON, as call_kwargs reads)."""
    try:
        cfg = json.dumps({k: _plain(v) for k, v in attrs.items()})
    except TypeError as e:
        raise PluginError(f"op '{name}' over MPI: attributes must be scalars, strings or "
                          f"tuples of them ({e})") from None
    b = Builder(name_hint="mpi")
    params = [b.parameter(k, shape_of(x)) for k, x in enumerate(xs)]
    shape = Shape.tuple_of(declared) if isinstance(declared, list) else declared
    ins = b.op("custom-call", *params, shape=shape, custom_call_target=name,
               backend_config=cfg or None)
    ins.name = name  # what the transport's headers and messages name
    return ins


def _plain(v):
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    return v


def over_mpi(self, xs, attrs, declared, n):
    """PluginOp `self`'s communicator kernel as an `xlaplug.mpi.kernel` call in this trace's
    order chain; its VJP: the plugin's @plugin.vjp rule, else the decomposition's."""
    import jax
    from .jax_op import _rule_call
    world, registry, name = self.mpi, self.registry, self.name
    if world.plain:
        return _as_custom_call(self, xs, attrs, declared)
    ins = kernel_instruction(name, xs, attrs, declared)
    rule = registry.vjps.get(name)

    @jax.custom_vjp
    def f(order, *xs):
        out, token = world.call(registry, ins, list(xs), order)
        return token, out

    def fwd(order, *xs):
        token, out = f(order, *xs)
        return (token, out), (xs, out)

    def bwd(res, cts):
        xs, out = res
        ct = cts[1]
        builder = TransposingBuilder(world, registry, name, self._custom_call)
        if rule is not None:
            return (None, *self._rule_vjp(rule, xs, out, ct, attrs, n, builder))
        if name not in registry.decompositions:
            raise PluginError(f"op '{name}' cannot be differentiated over MPI: it has no "
                              f"decomposition and no @plugin.vjp('{name}') rule")
        entry = registry.decompositions[name]
        what = f"plugin '{entry.plugin.name}' decomposition of '{name}'"

        def decomposed(*vs):
            b = TransposingBuilder(world, registry, name, self._custom_call)
            return b.value(_rule_call(entry.fn, what, [b, *[b.input(v) for v in vs]],
                                      attrs))
        return (None, *jax.vjp(decomposed, *xs)[1](ct))

    f.defvjp(fwd, bwd)
    token, out = f(world.take(), *xs)
    world.put(token)
    return out


def _as_custom_call(self, xs, attrs, declared):
    """The op as its own custom call, for a function xlaplug.jax.jit lowers: the engine
    serves it over MPI and threads its order through control flow (mpi_rewrite.py)."""
    import jax
    name = self.name
    structs = [jax.ShapeDtypeStruct(s.dims, dtype_of(s)) for s in
               (declared if isinstance(declared, list) else [declared])]
    call = jax.ffi.ffi_call(name, structs if isinstance(declared, list) else structs[0])

    @jax.custom_vjp
    def f(*xs):
        return call(*xs, **attrs)

    def bwd(_, ct):
        raise PluginError(f"op '{name}' inside xlaplug.jax.jit under mpiexec has no gradient "
                          "there: differentiate it in jax.jit")
    f.defvjp(lambda *xs: (f(*xs), None), bwd)
    return f(*xs)


# ---- gradients: the decomposition's VJP, its collectives transposed over MPI ------------------

class TransposingBuilder(JaxBuilder):
    """A JaxBuilder over the world's ranks whose collectives send nothing forward and whose
    VJPs are the transposed collectives over MPI; replica-id / partition-id are the rank."""

    def __init__(self, world, registry, op: str, custom_call=None):
        super().__init__("xlaplug.mpi", world.size, custom_call=custom_call)
        self.world, self.registry, self.op_name = world, registry, op

    def evaluate(self, ins, operands: list):
        if ins.opcode in ("replica-id", "partition-id"):
            return np.uint32(0 if ins.opcode == "replica-id" else self.world.rank)
        if ins.opcode in _KINDS:
            return self._linear(ins, operands)
        if ins.opcode.startswith(("collective-", "all-", "reduce-scatter")):
            raise PluginError(f"op '{self.op_name}' over MPI: its decomposition's {ins.opcode} "
                              "has no transpose here (jax.grad serves all-reduce sums, "
                              "all-gather, reduce-scatter sums and all-to-all)")
        return super().evaluate(ins, operands)

    def _linear(self, ins, operands: list):
        import jax
        if len(operands) != 1:
            raise PluginError(f"op '{self.op_name}' over MPI: a {ins.opcode} of "
                              f"{len(operands)} operands has no transpose here")
        reducer = ins.attrs.get("to_apply")
        if reducer is not None and binary_monoid(reducer) != "add":
            raise PluginError(f"op '{self.op_name}' over MPI cannot be differentiated: its "
                              f"decomposition's {ins.opcode} reduces with "
                              f"'{reducer.root.opcode}', which is not linear")
        world, registry, shape = self.world, self.registry, ins.shape

        @jax.custom_vjp
        def collective(x):  # the VJP of a linear map never reads its primal value
            return jax.numpy.zeros(shape.dims, dtype_of(shape))

        def fwd(x):
            return collective(x), None

        op = self.op_name

        def bwd(_, ct):
            t = transpose(ins, shape_of(ct))
            t.name = f"{op}.vjp.{t.opcode}"
            return (world.chained(registry, t, [ct]),)

        collective.defvjp(fwd, bwd)
        return collective(operands[0])


def transpose(ins, ct: Shape):
    """The collective over every rank that transposes `ins`, on a cotangent of shape `ct`."""
    b = Builder(name_hint="mpi_t")
    p = b.parameter(0, ct)
    every = {"channel_id": 1, "use_global_device_ids": True,
             "replica_groups": ReplicaGroups(groups=(tuple(range(_count(ins))),))}
    operand = ins.operands[0].shape
    add = b.scalar_computation("add", "add", ct.element_type)
    if ins.opcode == "all-reduce":
        return b.op("all-reduce", p, to_apply=add, **every)
    if ins.opcode == "all-gather":
        return b.op("reduce-scatter", p, to_apply=add, dimensions=ins.attrs["dimensions"],
                    shape=operand, **every)
    if ins.opcode == "reduce-scatter":
        return b.op("all-gather", p, dimensions=ins.attrs["dimensions"], shape=operand,
                    **every)
    return b.op("all-to-all", p, dimensions=ins.attrs["dimensions"], channel_id=1,
                replica_groups=every["replica_groups"])


def _count(ins) -> int:
    groups = getattr(ins.attrs.get("replica_groups"), "groups", None)
    if not groups or len(groups) != 1:
        raise PluginError(f"{ins.opcode} '{ins.name}': over MPI jax.grad transposes "
                          "collectives over one group of every rank only")
    return len(groups[0])
