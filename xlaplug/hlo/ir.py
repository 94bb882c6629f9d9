"""The HLO IR: Shape, Layout, Instruction, Computation, Module.

Instructions hold direct references to their operands and called computations;
names are only for printing.  `attrs` maps attribute name -> typed value (see
attributes.py for the kinds); attributes the tool does not interpret are kept as
`Raw` text and printed back verbatim.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

from . import dtypes

UNBOUNDED = -1  # a `?` dimension


@dataclass(frozen=True)
class Layout:
    minor_to_major: tuple[int, ...]
    # Everything after ':' in `{1,0:T(8,128)S(1)}` -- tiles, memory space, element size --
    # kept verbatim so it prints back unchanged.
    extra: str = ""

    def __str__(self) -> str:
        s = ",".join(map(str, self.minor_to_major))
        return "{" + s + (":" + self.extra if self.extra else "") + "}"


@dataclass(frozen=True)
class Shape:
    """An array shape (element_type, dims) or a tuple shape (element_type == 'tuple')."""

    element_type: str
    dims: tuple[int, ...] = ()
    # Per dimension: True for a dynamic (`<=N` bounded or `?` unbounded) dimension.
    dynamic: tuple[bool, ...] = ()
    layout: Layout | None = None
    tuple_shapes: tuple["Shape", ...] = ()
    # XLA's buffer shape `b(f32[16])`: an array held as a buffer (in-place custom calls).
    buffer: bool = False

    @staticmethod
    def array(element_type: str, dims=(), layout: Layout | None = None, dynamic=None) -> "Shape":
        dims = tuple(int(d) for d in dims)
        dyn = tuple(dynamic) if dynamic is not None else (False,) * len(dims)
        return Shape(element_type, dims, dyn, layout)

    @staticmethod
    def tuple_of(shapes) -> "Shape":
        return Shape("tuple", tuple_shapes=tuple(shapes))

    @property
    def is_tuple(self) -> bool:
        return self.element_type == "tuple"

    @property
    def is_token(self) -> bool:
        return self.element_type == "token"

    @property
    def is_array(self) -> bool:
        return not self.is_tuple and not self.is_token

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def dtype(self):
        return dtypes.to_dtype(self.element_type)

    @property
    def is_static(self) -> bool:
        if self.is_tuple:
            return all(s.is_static for s in self.tuple_shapes)
        return not any(self.dynamic)

    def num_elements(self) -> int:
        n = 1
        for d in self.dims:
            n *= max(d, 0)
        return n

    def byte_size(self) -> int:
        if self.is_tuple:
            return sum(s.byte_size() for s in self.tuple_shapes)
        if self.is_token:
            return 0
        return self.num_elements() * self.dtype.itemsize

    def leaves(self) -> Iterator["Shape"]:
        """Array/token leaves, depth-first."""
        if self.is_tuple:
            for s in self.tuple_shapes:
                yield from s.leaves()
        else:
            yield self

    def with_layout(self, layout: Layout | None) -> "Shape":
        return Shape(self.element_type, self.dims, self.dynamic, layout, self.tuple_shapes,
                     self.buffer)

    def without_layout(self) -> "Shape":
        if self.is_tuple:
            return Shape.tuple_of(s.without_layout() for s in self.tuple_shapes)
        return Shape(self.element_type, self.dims, self.dynamic, None, buffer=self.buffer)

    def compatible(self, other: "Shape") -> bool:
        """Same type and dimensions, ignoring layout (what the verifier compares)."""
        if self.is_tuple or other.is_tuple:
            return (self.is_tuple and other.is_tuple
                    and len(self.tuple_shapes) == len(other.tuple_shapes)
                    and all(a.compatible(b) for a, b in zip(self.tuple_shapes, other.tuple_shapes)))
        return (self.element_type == other.element_type and self.dims == other.dims
                and self.dynamic == other.dynamic and self.buffer == other.buffer)

    def __str__(self) -> str:
        if not self.is_tuple:
            return self._array_text()
        # Iterative: a tuple nested as deep as XLA's parser allows prints in an error message
        # without recursing (each level a C-stack frame through str.join).
        out: list[str] = []
        stack: list = [self]
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                out.append(item)
            elif item.is_tuple:
                stack.append(")")
                for k in range(len(item.tuple_shapes) - 1, -1, -1):
                    stack.append(item.tuple_shapes[k])
                    if k:
                        stack.append(", ")
                stack.append("(")
            else:
                out.append(item._array_text())
        return "".join(out)

    def _array_text(self) -> str:
        parts = []
        for d, dyn in zip(self.dims, self.dynamic):
            if d == UNBOUNDED:
                parts.append("?")
            else:
                parts.append(f"<={d}" if dyn else str(d))
        s = f"{self.element_type}[{','.join(parts)}]"
        if self.layout is not None:
            s += str(self.layout)
        return f"b({s})" if self.buffer else s


@dataclass(eq=False)
class Instruction:
    name: str
    opcode: str
    shape: Shape
    operands: list["Instruction"] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    # For `constant`: a numpy array (or tuple of them), or None when printed as `{...}`.
    literal: Any = None
    # For `parameter`: its number.  Kept separate because it sits in the operand slot.
    parameter_number: int | None = None
    control_predecessors: list["Instruction"] = field(default_factory=list)
    line: int = 0
    column: int = 0
    # True when the literal was elided (`constant({...})`): shape known, values not.
    literal_elided: bool = False

    def called_computations(self) -> list["Computation"]:
        out = []
        for v in self.attrs.values():
            if isinstance(v, Computation):
                out.append(v)
            elif isinstance(v, list) and v and isinstance(v[0], Computation):
                out.extend(v)
        return out

    @property
    def dtype(self):
        """numpy dtype of an array-shaped instruction (builder values expose it)."""
        return self.shape.dtype

    @property
    def has_side_effect(self) -> bool:
        from .opcodes import has_side_effect
        return has_side_effect(self)

    def __repr__(self) -> str:
        return f"<Instruction {self.name} = {self.shape} {self.opcode}>"


@dataclass(eq=False)
class Computation:
    name: str
    instructions: list[Instruction] = field(default_factory=list)
    root: Instruction | None = None
    is_entry: bool = False
    execution_thread: str | None = None
    # True when the text gave an explicit `(p: ...) -> r` signature; printed back if so.
    has_signature: bool = False
    line: int = 0
    column: int = 0

    @property
    def parameters(self) -> list[Instruction]:
        ps = [i for i in self.instructions if i.opcode == "parameter"]
        return sorted(ps, key=lambda i: i.parameter_number)

    def instruction(self, name: str) -> Instruction:
        for i in self.instructions:
            if i.name == name:
                return i
        raise KeyError(name)

    def users(self) -> dict[Instruction, list[Instruction]]:
        out: dict[Instruction, list[Instruction]] = {i: [] for i in self.instructions}
        for i in self.instructions:
            for o in i.operands:
                out.setdefault(o, []).append(i)
        return out

    def program_shape(self) -> tuple[list[Shape], Shape]:
        return [p.shape for p in self.parameters], self.root.shape

    def __repr__(self) -> str:
        return f"<Computation {self.name}: {len(self.instructions)} instructions>"


@dataclass(eq=False)
class Module:
    name: str
    computations: list[Computation] = field(default_factory=list)
    entry: Computation | None = None
    # Header attributes (entry_computation_layout, is_scheduled, ...), typed like
    # instruction attributes.
    attrs: dict[str, Any] = field(default_factory=dict)
    # FileNames / FunctionNames / FileLocations / StackFrames tables, verbatim rows.
    stack_tables: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    source: str = "<string>"

    def computation(self, name: str) -> Computation:
        for c in self.computations:
            if c.name == name:
                return c
        raise KeyError(name)

    def instruction_count(self) -> int:
        return sum(len(c.instructions) for c in self.computations)

    def __repr__(self) -> str:
        return f"<Module {self.name}: {len(self.computations)} computations>"
