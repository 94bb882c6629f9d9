"""Shardy's attributes as jax prints them in HLO before partitioning: the module's meshes
(`frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<["x"=2, "y"=4]>}}`) and a shard_map
region's `xla.sdy.in_shardings` / `out_shardings`
(`#sdy.sharding_per_value<[<@mesh, [{"x"}, {}]>, ...]>`) and `xla.sdy.manual_axes`.

A dimension sharded over axes ("x", "y") is cut into size(x) * size(y) blocks, x major; a
device's block is its mesh coordinates along those axes, in that order.  Axes that shard no
dimension of a value replicate it.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..errors import HloError

_MESH = re.compile(r"(\w+)\s*=\s*#sdy\.mesh<\[(.*?)\](.*?)>")
_AXIS = re.compile(r'"([^"]+)"\s*=\s*(\d+)')
_VALUE = re.compile(r"<@(\w+),\s*\[(.*?)\](.*?)>(?=,\s*<@|\]>?$|$)")
_DIM = re.compile(r"\{([^{}]*)\}")
_REF = re.compile(r'"([^"]+)"(:\(\d+\)\d+)?')


@dataclass(frozen=True)
class SdyMesh:
    name: str
    axes: tuple[tuple[str, int], ...]

    @property
    def size(self) -> int:
        return math.prod(s for _, s in self.axes)

    def coords(self, device: int) -> dict[str, int]:
        """Mesh coordinates of device `device` (row-major over the axes: an iota mesh)."""
        out, rest = {}, device
        for name, size in reversed(self.axes):
            out[name] = rest % size
            rest //= size
        return out


@dataclass(frozen=True)
class ValueSharding:
    mesh: str
    dims: tuple[tuple[str, ...], ...]  # per dimension, the axes that shard it (major first)


def _text(v) -> str:
    return getattr(v, "text", v) if not isinstance(v, str) else v


def meshes_text(module) -> str:
    """The module's `xla.sdy.meshes` frontend attribute, as text ('' without one)."""
    fa = module.attrs.get("frontend_attributes") or {}
    return _text(fa.get("xla.sdy.meshes", "")) if isinstance(fa, dict) else ""


def parse_meshes(text: str) -> dict[str, SdyMesh]:
    """`{mesh = #sdy.mesh<["x"=2, "y"=4]>, ...}` -> meshes by name."""
    meshes = {}
    for m in _MESH.finditer(text.replace('\\"', '"')):
        if "device_ids" in m.group(3):
            raise HloError(f"sdy mesh '{m.group(1)}' with its own device order "
                           "(device_ids=) is not supported")
        meshes[m.group(1)] = SdyMesh(m.group(1), tuple((a, int(s)) for a, s in
                                                       _AXIS.findall(m.group(2))))
    return meshes


def parse_shardings(text: str, what: str) -> list[ValueSharding]:
    text = _text(text).replace('\\"', '"').strip()
    body = text[len("#sdy.sharding_per_value<["):-2] if text.startswith(
        "#sdy.sharding_per_value<[") else text
    out = []
    for m in _VALUE.finditer(body):
        dims = []
        for d in _DIM.findall(m.group(2)):
            refs = _REF.findall(d)
            if any(sub for _, sub in refs):
                raise HloError(f"{what}: sub-axis shardings ({d.strip()}) are not supported")
            if "?" in d:
                raise HloError(f"{what}: open dimension shardings ('?') are not supported")
            dims.append(tuple(a for a, _ in refs))
        out.append(ValueSharding(m.group(1), tuple(dims)))
    if not out and body:
        raise HloError(f"{what}: cannot read the sharding '{text[:80]}'")
    return out


def parse_manual_axes(text: str) -> tuple[str, ...]:
    return tuple(re.findall(r'"([^"]+)"', _text(text).replace('\\"', '"')))
