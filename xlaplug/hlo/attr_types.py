"""Typed values of instruction attributes (the structured ones)."""
from __future__ import annotations

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
    """Explicit `{{0,1},{2,3}}` groups, or the iota form `[2,2]<=[4]` (kept as text)."""
    groups: tuple[tuple[int, ...], ...] | None = None
    iota: str | None = None

    def expanded(self) -> tuple[tuple[int, ...], ...]:
        if self.groups is not None:
            return self.groups
        from .attributes import expand_iota_groups
        return expand_iota_groups(self.iota)

    def __str__(self) -> str:
        if self.iota is not None:
            return self.iota
        return "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in self.groups) + "}"
