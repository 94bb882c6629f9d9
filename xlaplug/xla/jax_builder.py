"""A builder whose methods are `jax.lax` calls: a plugin decomposition as a jax function.

A decomposition is written against xlaplug's HLO `Builder` (`b.multiply(x, x)`,
`b.reduce(x, init, dims, b.scalar_computation("add", "add", et))`, `b.op("all-reduce", ...)`).
`JaxBuilder` is that Builder -- same methods, same attribute conventions, same shape
inference and the same errors -- and it also evaluates every instruction it builds with
`jax.lax` (jax_lowering.py) on the jax values of its operands.  The decomposition therefore
runs unchanged and, called inside a jax trace, is traced: differentiable, batchable, jittable
and runnable on any jax backend.

    b = JaxBuilder(axis_name="i", axis_size=4)
    x = b.input(xs)                      # a jax array (or tracer) as a builder value
    y = decomposition(b, x, beta=1.5)    # Instructions, as with the HLO builder
    b.value(y)                           # its jax value

Called computations (reducers, while bodies, branches) are run instruction by instruction by
`call` with the same table.  Custom calls go to `custom_call(ins, operands)`, which the op
layer (jax_op.py) points at other plugin ops; by default an FFI call of the target.
"""
from __future__ import annotations

import numpy as np

from ..hlo import dtypes
from ..hlo.builder import Builder
from ..hlo.errors import HloError
from ..hlo.ir import Computation, Instruction, Shape
from .jax_lowering import dtype_of, lower


def shape_of(value) -> Shape:
    """The HLO Shape of a jax array, tracer or numpy array (a tuple of them: a tuple shape)."""
    if isinstance(value, (tuple, list)):
        return Shape.tuple_of(shape_of(v) for v in value)
    dt = np.dtype(value.dtype)
    try:
        etype = dtypes.from_dtype(dt)
    except (KeyError, ValueError, TypeError):
        raise HloError(f"jax builder: dtype {dt} has no HLO element type") from None
    return Shape.array(etype, tuple(int(d) for d in value.shape))


def _ffi_custom_call(ins, operands):
    import jax
    out = [jax.ShapeDtypeStruct(s.dims, dtype_of(s)) for s in
           (ins.shape.tuple_shapes if ins.shape.is_tuple else (ins.shape,))]
    target = str(ins.attrs.get("custom_call_target"))
    r = jax.ffi.ffi_call(target, out if ins.shape.is_tuple else out[0])(*operands)
    return tuple(r) if ins.shape.is_tuple else r


class JaxBuilder(Builder):
    """The HLO Builder, evaluating each instruction with jax as it is built.

    `axis_name` / `axis_size`: the named mesh axis (shard_map, pmap) the decomposition's
    collectives span; the builder counts its devices as partitions (`b.num_devices`).
    `custom_call(ins, operands)`: the jax value of a custom call the decomposition builds."""

    def __init__(self, axis_name=None, axis_size: int = 1, custom_call=None,
                 name_hint: str = "jax"):
        if axis_name is None and axis_size != 1:
            raise HloError("jax builder: axis_size needs an axis_name")
        super().__init__(name_hint=name_hint, partitions=axis_size)
        self.axis_name, self.axis_size = axis_name, axis_size
        self._custom_call = custom_call or _ffi_custom_call
        self.values: dict[Instruction, object] = {}

    # -- values in and out ------------------------------------------------------------------
    def input(self, value, name: str | None = None) -> Instruction:
        """A jax value (array, tracer, or a tuple of them) as a builder operand."""
        ins = self.parameter(len([i for i in self.instructions if i.opcode == "parameter"]),
                             shape_of(value), name)
        self.values[ins] = tuple(value) if isinstance(value, (list, tuple)) else value
        return ins

    def value(self, ins):
        """The jax value of a value this builder made (a tuple for several)."""
        if isinstance(ins, (list, tuple)):
            return tuple(self.value(i) for i in ins)
        try:
            return self.values[ins]
        except (KeyError, TypeError):
            raise HloError(f"jax builder: {ins!r} is not a value this builder made") from None

    # -- the HLO Builder's creation points, evaluated -----------------------------------------
    def _add(self, opcode: str, operands, shape: Shape | None = None, **attrs) -> Instruction:
        ins = super()._add(opcode, operands, shape, **attrs)
        self.values[ins] = self.evaluate(ins, [self.value(o) for o in ins.operands])
        return ins

    def constant(self, value, dtype=None) -> Instruction:
        ins = super().constant(value, dtype)
        # A numpy constant stays concrete under jit: lax sees a literal (and a reducer's
        # identity init is recognised as one).
        self.values[ins] = np.asarray(ins.literal, dtype_of(ins.shape))
        return ins

    def evaluate(self, ins: Instruction, operands: list):
        """The jax value of `ins` on jax `operands`; its shape is checked against HLO's."""
        out = lower(ins, operands, self)
        _check(ins, out)
        return out

    # -- what lowerings call back -------------------------------------------------------------
    def call(self, comp: Computation, args: list):
        """Run a called computation (reducer, loop body, branch) on jax values."""
        params = comp.parameters
        if len(params) != len(args):
            raise HloError(f"jax builder: computation '{comp.name}' takes {len(params)} "
                           f"parameters, called with {len(args)}")
        env: dict[Instruction, object] = dict(zip(params, args))
        for ins in comp.instructions:
            if ins in env:
                continue
            if ins.opcode == "constant":
                env[ins] = np.asarray(ins.literal, dtype_of(ins.shape))
                continue
            env[ins] = self.evaluate(ins, [env[o] for o in ins.operands])
        return env[comp.root]

    def custom_call(self, ins: Instruction, operands: list):
        return self._custom_call(ins, operands)


def _check(ins: Instruction, out) -> None:
    """A lowering whose result disagrees with HLO's shape is a bug in the table: say which."""
    if ins.shape.is_tuple:
        if not isinstance(out, tuple) or len(out) != len(ins.shape.tuple_shapes):
            raise HloError(f"jax builder: {ins.opcode} gave {type(out).__name__}, HLO says "
                           f"{ins.shape}")
        for s, o in zip(ins.shape.tuple_shapes, out):
            _check(Instruction(ins.name, ins.opcode, s), o)
        return
    shape = tuple(int(d) for d in np.shape(out))
    dt = np.dtype(out.dtype) if hasattr(out, "dtype") else np.asarray(out).dtype
    if shape != tuple(ins.shape.dims) or dt != dtype_of(ins.shape):
        raise HloError(f"jax builder: lax gave {dt}{list(shape)} for {ins.opcode}, HLO says "
                       f"{ins.shape}")
