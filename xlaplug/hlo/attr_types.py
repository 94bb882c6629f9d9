"""Typed values of instruction attributes (the structured ones)."""
from __future__ import annotations

from typing import Any

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Raw:
    """An attribute the tool does not interpret: kept and printed back verbatim."""
    text: str

    def __str__(self) -> str:
        return self.text


class Word(str):
    """A bare identifier value (enum-like: `LT`, `kLoop`, `rng_default`), printed unquoted."""


@dataclass(frozen=True)
class WindowDim:
    size: int = 1
    stride: int = 1
    pad_lo: int = 0
    pad_hi: int = 0
    lhs_dilate: int = 1
    rhs_dilate: int = 1
    reversal: bool = False


@dataclass(frozen=True)
class Window:
    dims: tuple[WindowDim, ...] = ()

    def __str__(self) -> str:
        d = self.dims
        if not d:
            return "{}"
        parts = ["size=" + "x".join(str(w.size) for w in d)]
        if any(w.stride != 1 for w in d):
            parts.append("stride=" + "x".join(str(w.stride) for w in d))
        if any(w.pad_lo or w.pad_hi for w in d):
            parts.append("pad=" + "x".join(f"{w.pad_lo}_{w.pad_hi}" for w in d))
        if any(w.lhs_dilate != 1 for w in d):
            parts.append("lhs_dilate=" + "x".join(str(w.lhs_dilate) for w in d))
        if any(w.rhs_dilate != 1 for w in d):
            parts.append("rhs_dilate=" + "x".join(str(w.rhs_dilate) for w in d))
        if any(w.reversal for w in d):
            parts.append("rhs_reversal=" + "x".join("1" if w.reversal else "0" for w in d))
        return "{" + " ".join(parts) + "}"


@dataclass(frozen=True)
class ConvDims:
    """dim_labels `b01f_01io->b01f`: positions of batch/feature/spatial dims per operand."""
    input_batch: int
    input_feature: int
    input_spatial: tuple[int, ...]
    kernel_input_feature: int
    kernel_output_feature: int
    kernel_spatial: tuple[int, ...]
    output_batch: int
    output_feature: int
    output_spatial: tuple[int, ...]
    text: str = field(default="", compare=False)

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class PadDim:
    lo: int
    hi: int
    interior: int = 0


@dataclass(frozen=True)
class Padding:
    dims: tuple[PadDim, ...]

    def __str__(self) -> str:
        interior = any(d.interior for d in self.dims)
        return "x".join(f"{d.lo}_{d.hi}" + (f"_{d.interior}" if interior else "") for d in self.dims)


@dataclass(frozen=True)
class SliceDim:
    start: int
    limit: int
    stride: int = 1


@dataclass(frozen=True)
class SliceRanges:
    dims: tuple[SliceDim, ...]

    def __str__(self) -> str:
        return "{" + ", ".join(
            f"[{d.start}:{d.limit}" + (f":{d.stride}]" if d.stride != 1 else "]")
            for d in self.dims) + "}"


@dataclass(frozen=True)
class ReplicaGroups:
    """Explicit `{{0,1},{2,3}}` groups, the iota form `[2,2]<=[4]` (kept as text), or mesh
    axes `mesh['x'=2,'y'=2] {'y'}` (mesh_groups.py)."""
    groups: tuple[tuple[int, ...], ...] | None = None
    iota: str | None = None
    mesh: Any = None  # a MeshGroups

    def expanded(self) -> tuple[tuple[int, ...], ...]:
        if self.groups is not None:
            return self.groups
        if self.mesh is not None:
            return self.mesh.expanded()
        return expand_iota_groups(self.iota)

    def __str__(self) -> str:
        if self.mesh is not None:
            return str(self.mesh)
        if self.iota is not None:
            return self.iota
        return "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in self.groups) + "}"


def shape_index_str(index: tuple[int, ...]) -> str:
    """A ShapeIndex as XLA prints it: `{}`, `{0}`, `{1,0}`."""
    return "{" + ",".join(map(str, index)) + "}"


@dataclass(frozen=True)
class Sharding:
    """`sharding={...}` in every form XLA prints (hlo_sharding.cc ToString).

    kind is one of replicated, maximal, manual, unknown, unreduced, tiled, tuple, named.
    A tiled sharding has `tile_dims` and either explicit `devices` or an iota device list
    (`iota_reshape`, optional `iota_perm`).  `metadata` keeps the sharding's own
    `metadata=` text verbatim; `named` shardings (mesh axes) are kept verbatim in `text`.
    """
    kind: str
    device: int | None = None
    tile_dims: tuple[int, ...] = ()
    devices: tuple[int, ...] | None = None
    iota_reshape: tuple[int, ...] | None = None
    iota_perm: tuple[int, ...] | None = None
    last_tile_dim_replicate: bool = False
    last_tile_dims: tuple[str, ...] = ()
    elements: tuple["Sharding", ...] = ()
    metadata: str = ""
    shard_group: str = ""   # `shard_as N` or `shard_like N`
    text: str = ""

    @property
    def is_tuple(self) -> bool:
        return self.kind == "tuple"

    def device_ids(self) -> tuple[int, ...]:
        """The tile assignment's devices in row-major order (tiled shardings)."""
        if self.devices is not None:
            return self.devices
        if self.iota_reshape is None:
            return ()
        import numpy as np
        ids = np.arange(int(np.prod(self.iota_reshape))).reshape(self.iota_reshape)
        if self.iota_perm is not None:
            ids = ids.transpose(self.iota_perm)
        return tuple(int(x) for x in ids.reshape(-1))

    def __str__(self) -> str:
        if self.kind == "named":
            return self.text
        if self.kind == "tuple":
            parts = []
            for i, e in enumerate(self.elements):
                parts.append((f"/*index={i}*/" if i and i % 5 == 0 else "") + str(e))
            return "{" + ", ".join(parts) + "}"
        tail = (" " + self.shard_group if self.shard_group else "") + \
            (" metadata=" + self.metadata if self.metadata else "")
        if self.kind == "maximal":
            return f"{{maximal device={self.device}{tail}}}"
        if self.kind != "tiled":
            return "{" + self.kind + tail + "}"
        s = "{devices=[" + ",".join(map(str, self.tile_dims)) + "]"
        if self.iota_reshape is not None:
            s += "<=[" + ",".join(map(str, self.iota_reshape)) + "]"
            if self.iota_perm is not None:
                s += "T(" + ",".join(map(str, self.iota_perm)) + ")"
        else:
            s += ",".join(map(str, self.devices or ()))
        if self.last_tile_dim_replicate:
            s += " last_tile_dim_replicate"
        if self.last_tile_dims:
            s += " last_tile_dims={" + ", ".join(self.last_tile_dims) + "}"
        return s + tail + "}"


@dataclass(frozen=True)
class ComputationLayout:
    """`entry_computation_layout={(p0, p1)->result}`."""
    parameters: tuple = ()
    result: object = None

    def __str__(self) -> str:
        return "{(" + ", ".join(str(p) for p in self.parameters) + ")->" + str(self.result) + "}"


@dataclass(frozen=True)
class InputOutputAlias:
    """`input_output_alias={ {0}: (0, {}, may-alias), ... }`: (output index, parameter,
    parameter index, kind) per entry."""
    entries: tuple[tuple[tuple[int, ...], int, tuple[int, ...], str], ...] = ()

    def __str__(self) -> str:
        if not self.entries:
            return "{}"
        return "{ " + ", ".join(f"{shape_index_str(o)}: ({p}, {shape_index_str(pi)}, {k})"
                                for o, p, pi, k in self.entries) + " }"


@dataclass(frozen=True)
class BufferDonor:
    """`buffer_donor={ (0, {}), (1, {}) }`: (parameter, parameter index) per entry."""
    entries: tuple[tuple[int, tuple[int, ...]], ...] = ()

    def __str__(self) -> str:
        if not self.entries:
            return "{}"
        return "{ " + ", ".join(f"({p}, {shape_index_str(i)})" for p, i in self.entries) + " }"


@dataclass(frozen=True)
class OutputOperandAliasing:
    """`output_to_operand_aliasing={{0}: (1, {}), ...}`: (output index, operand, operand
    index) per entry."""
    entries: tuple[tuple[tuple[int, ...], int, tuple[int, ...]], ...] = ()

    def __str__(self) -> str:
        return "{" + ", ".join(f"{shape_index_str(o)}: ({n}, {shape_index_str(i)})"
                               for o, n, i in self.entries) + "}"


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e16 else repr(float(v))


@dataclass(frozen=True)
class ResultAccuracy:
    """`result_accuracy={mode=highest}` or `{tolerance={atol=0,rtol=0,ulps=1}}`."""
    mode: str | None = None
    atol: float = 0.0
    rtol: float = 0.0
    ulps: float = 0.0

    def __str__(self) -> str:
        if self.mode is not None:
            return "{mode=" + self.mode + "}"
        return (f"{{tolerance={{atol={_num(self.atol)},rtol={_num(self.rtol)},"
                f"ulps={_num(self.ulps)}}}}}")


@dataclass(frozen=True, eq=False)
class LiteralValue:
    """A literal with its own shape, as custom-call's `literal=s32[2]{0} {1, 2}` prints it."""
    shape: object
    value: object

    # Printed by the text layer (hlo/text/attributes.format_value): the literal syntax
    # lives there, and the IR imports nothing from it.


@dataclass(frozen=True, eq=False)
class LiteralTuple:
    """custom-call `literal=( s32[4]{0} {4, 128}, pred[2]{0} {1, 0} )`: a tuple of literals,
    each with its own shape, as XLA prints it."""
    items: tuple

    # Printed by hlo/text/attributes.format_value, as LiteralValue is.


def expand_iota_groups(text: str) -> tuple[tuple[int, ...], ...]:
    """`[G,S]<=[dims]T(perm)`: iota over dims, transposed by perm, reshaped to G groups of S."""
    import re

    import numpy as np
    m = re.fullmatch(r"\[([\d,\s]*)\]<=\[([\d,\s]*)\](?:T\(([\d,\s]*)\))?", text)
    out_dims = [int(x) for x in m[1].split(",")]
    src_dims = [int(x) for x in m[2].split(",")]
    ids = np.arange(int(np.prod(src_dims))).reshape(src_dims)
    if m[3]:
        ids = ids.transpose([int(x) for x in m[3].split(",")])
    ids = ids.reshape(out_dims[0], -1)
    return tuple(tuple(int(x) for x in g) for g in ids)
