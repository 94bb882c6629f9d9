"""A builder of core HLO, with shape inference on every call.

Used by plugin decompositions and by passes.  Values are Instructions (`.shape`, `.dtype`).
Methods are the core opcodes: `b.add(x, y)`, `b.logistic(x)`, `b.exponential_minus_one(x)`
(underscores for dashes), plus helpers whose result needs more than the operands say:
`constant`, `convert`, `broadcast`, `reshape`, `iota`, `reduce`, `dot`, `get_tuple_element`.
Like XLA's client builder, scalar operands of elementwise ops are broadcast implicitly.
"""
from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from . import dtypes
from .errors import HloError
from .ir import Computation, Instruction, Shape
from .opcodes import ALL_OPCODES, BINARY_ELEMENTWISE, TERNARY_ELEMENTWISE


def _etype(dtype) -> str:
    if isinstance(dtype, str) and dtype in dtypes.ELEMENT_DTYPES:
        return dtype
    return dtypes.from_dtype(dtype)


class Builder:
    def __init__(self, name_hint: str = "b", uniquer=None, replicas: int = 1,
                 partitions: int = 1, channel_ids=None):
        self.instructions: list[Instruction] = []
        # Fresh channel ids: XLA takes collectives that share one for parts of one exchange.
        self._channels = channel_ids or itertools.count(1)
        # The devices the module runs on (its header's replica_count / num_partitions), for
        # decompositions whose collectives must span all of them.
        self.replicas, self.partitions = replicas, partitions
        # Computations the builder made (reducers); a pass adds them to the module.
        self.computations: list[Computation] = []
        self._hint = name_hint
        self._uniq = uniquer
        self._n = 0

    # -- naming and creation --------------------------------------------------------------
    def _name(self, opcode: str) -> str:
        self._n += 1
        base = f"{self._hint}.{opcode}.{self._n}"
        return self._uniq(base) if self._uniq else base

    def _add(self, opcode: str, operands, shape: Shape | None = None, **attrs) -> Instruction:
        from .shape_inference import ShapeInferenceError, infer_shape
        ins = Instruction(self._name(opcode), opcode, shape or Shape("tuple"), list(operands),
                          {k: v for k, v in attrs.items() if v is not None})
        if shape is None or opcode not in ("custom-call",):
            try:
                inferred = infer_shape(ins)
            except ShapeInferenceError as e:
                raise HloError(f"builder: {opcode}({', '.join(str(o.shape) for o in operands)}): {e}") from None
            if shape is None:
                ins.shape = inferred
        self.instructions.append(ins)
        return ins

    def op(self, opcode: str, *operands: Instruction, shape: Shape | None = None, **attrs):
        if opcode not in ALL_OPCODES:
            raise HloError(f"builder: unknown opcode '{opcode}'")
        if opcode in BINARY_ELEMENTWISE or opcode in TERNARY_ELEMENTWISE:
            operands = self._broadcast_scalars(opcode, operands)
        return self._add(opcode, operands, shape, **attrs)

    def __getattr__(self, name: str):
        opcode = name.replace("_", "-")
        if opcode in ALL_OPCODES:
            return lambda *ops, **attrs: self.op(opcode, *ops, **attrs)
        raise AttributeError(f"Builder has no method '{name}' (no HLO opcode '{opcode}')")

    def _broadcast_scalars(self, opcode, operands):
        arrays = [o for o in operands if o.shape.rank > 0]
        if not arrays:
            return operands
        target = arrays[0].shape
        out = []
        for k, o in enumerate(operands):
            # select's predicate and clamp's bounds may legitimately stay scalar.
            keep = (opcode == "select" and k == 0) or (opcode == "clamp" and k != 1)
            if o.shape.rank == 0 and not keep:
                o = self.broadcast(o, target.dims)
            out.append(o)
        return out

    # -- opcodes whose result is not implied by the operands --------------------------------
    def parameter(self, number: int, shape: Shape, name: str | None = None) -> Instruction:
        ins = Instruction(name or self._name("parameter"), "parameter", shape, parameter_number=number)
        self.instructions.append(ins)
        return ins

    def constant(self, value, dtype=None) -> Instruction:
        arr = np.asarray(value)
        if dtype is not None:
            arr = arr.astype(dtypes.to_dtype(_etype(dtype)))
        etype = dtypes.from_dtype(arr.dtype) if arr.dtype != np.float64 or dtype else "f32"
        if dtype is None and arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        ins = Instruction(self._name("constant"), "constant", Shape.array(etype, arr.shape),
                          literal=arr)
        self.instructions.append(ins)
        return ins

    def convert(self, x, dtype) -> Instruction:
        return self._add("convert", [x], Shape.array(_etype(dtype), x.shape.dims))

    def broadcast(self, x, dims, broadcast_dimensions=()) -> Instruction:
        return self._add("broadcast", [x], Shape.array(x.shape.element_type, dims),
                         dimensions=tuple(broadcast_dimensions))

    def reshape(self, x, dims) -> Instruction:
        return self._add("reshape", [x], Shape.array(x.shape.element_type, dims))

    def iota(self, dtype, dims, dimension: int = 0) -> Instruction:
        return self._add("iota", [], Shape.array(_etype(dtype), dims), iota_dimension=dimension)

    def get_tuple_element(self, t, index: int) -> Instruction:
        return self._add("get-tuple-element", [t], index=index)

    def dot(self, lhs, rhs, lhs_contracting=(1,), rhs_contracting=(0,), lhs_batch=(),
            rhs_batch=(), dtype=None) -> Instruction:
        attrs: dict[str, Any] = {"lhs_batch_dims": tuple(lhs_batch) or None,
                                 "lhs_contracting_dims": tuple(lhs_contracting),
                                 "rhs_batch_dims": tuple(rhs_batch) or None,
                                 "rhs_contracting_dims": tuple(rhs_contracting)}
        ins = self._add("dot", [lhs, rhs], None, **attrs)
        if dtype is not None:
            ins.shape = Shape.array(_etype(dtype), ins.shape.dims)
        return ins

    def reduce(self, x, init, dimensions, reducer: Computation) -> Instruction:
        return self._add("reduce", [x, init], dimensions=tuple(dimensions), to_apply=reducer)

    def channel_id(self) -> int:
        """A channel_id no other collective of the module uses."""
        return next(self._channels)

    @property
    def num_devices(self) -> int:
        return self.replicas * self.partitions

    def scalar_computation(self, name: str, opcode: str, etype: str) -> Computation:
        """A two-parameter scalar reducer like `add(p0, p1)`, for reduce and friends."""
        s = Shape.array(etype, ())
        p0 = Instruction(f"{name}.p0", "parameter", s, parameter_number=0)
        p1 = Instruction(f"{name}.p1", "parameter", s, parameter_number=1)
        r = Instruction(f"{name}.r", opcode, s, [p0, p1])
        comp = Computation(self._uniq(name) if self._uniq else name, [p0, p1, r], r)
        self.computations.append(comp)
        return comp
