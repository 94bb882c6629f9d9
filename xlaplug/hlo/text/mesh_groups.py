"""Replica groups written as mesh axes (XLA's MeshAxesReplicaGroupList, v3 collective device
lists): `mesh['x'=2,'y'=4] {'y'}`, a mesh with its own device order
`mesh['x'=2,'y'=4], device_ids=([4,2]T(1,0)) {'x'}` (or an explicit id list), and sub-axes
`{'y':(2)2}` (the part of axis y of size 2 whose minor axes have size 2).

A group is every device of the mesh that differs only along the named axes, listed in the
order the axes are named (xla/hlo/ir/replica_group.cc, flattened_replica_groups): the mesh's
device array is reshaped so each named (sub-)axis is a dimension of its own, the named
dimensions are transposed to the end, and the result is cut into groups.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np


class MeshError(ValueError):
    def __init__(self, msg: str, offset: int = 0):
        super().__init__(msg)
        self.offset = offset


@dataclass(frozen=True)
class AxisRef:
    axis: int                         # index into the mesh's axes
    sub: tuple[int, int] | None = None  # (pre_size, size) of a sub-axis


@dataclass(frozen=True)
class MeshGroups:
    names: tuple[str, ...]
    sizes: tuple[int, ...]
    device_ids: tuple[int, ...] | None   # the mesh's devices in row-major order; None: iota
    iota: tuple[tuple[int, ...], tuple[int, ...]] | None  # device_ids=([reshape]T(perm))
    axes: tuple[AxisRef, ...]

    # ---- meaning -------------------------------------------------------------------
    def devices(self) -> np.ndarray:
        n = math.prod(self.sizes)
        if self.iota is not None:
            reshape, perm = self.iota
            return np.arange(n).reshape(reshape).transpose(perm).reshape(self.sizes)
        if self.device_ids is not None:
            return np.array(self.device_ids).reshape(self.sizes)
        return np.arange(n).reshape(self.sizes)

    def _split(self):
        """(reindexed dimension sizes, the dimension of each named axis, in naming order)."""
        per_axis: dict[int, list[int]] = {}
        for i, a in enumerate(self.axes):
            per_axis.setdefault(a.axis, []).append(i)
        dims: list[int] = []
        grouped = [0] * len(self.axes)
        for axis, full in enumerate(self.sizes):
            refs = per_axis.get(axis)
            if not refs:
                dims.append(full)
                continue
            if len(refs) == 1 and self.axes[refs[0]].sub is None:
                grouped[refs[0]] = len(dims)
                dims.append(full)
                continue
            # Sub-axes of one axis, minor to major by pre_size, with filler dimensions.
            prefix = 1
            for i in sorted(refs, key=lambda k: self.axes[k].sub[0]):
                pre, size = self.axes[i].sub
                if pre != prefix:
                    dims.append(pre // prefix)
                    prefix = pre
                grouped[i] = len(dims)
                dims.append(size)
                prefix *= size
            if prefix != full:
                dims.append(full // prefix)
        return dims, grouped

    def expanded(self) -> tuple[tuple[int, ...], ...]:
        dims, grouped = self._split()
        rest = [d for d in range(len(dims)) if d not in grouped]
        arr = self.devices().reshape(dims).transpose(rest + grouped)
        per = math.prod(dims[d] for d in grouped) if grouped else 1
        return tuple(tuple(int(x) for x in g) for g in arr.reshape(-1, per))

    # ---- text ------------------------------------------------------------------------
    def __str__(self) -> str:
        mesh = "mesh[" + ",".join(f"'{n}'={s}" for n, s in zip(self.names, self.sizes)) + "]"
        if self.iota is not None:
            reshape, perm = self.iota
            mesh += (f", device_ids=([{','.join(map(str, reshape))}]"
                     f"T({','.join(map(str, perm))}))")
        elif self.device_ids is not None:
            mesh += f", device_ids=({','.join(map(str, self.device_ids))})"
        refs = []
        for a in self.axes:
            r = f"'{self.names[a.axis]}'"
            if a.sub is not None:
                r += f":({a.sub[0]}){a.sub[1]}"
            refs.append(r)
        return mesh + " {" + ",".join(refs) + "}"


_NAME = r"'([^']*)'|\"([^\"]*)\"|([A-Za-z_][\w.]*)"
_MESH_AXIS = re.compile(r"\s*(?:" + _NAME + r")\s*=\s*(\d+)\s*")
_DEVICE_IDS = re.compile(r"\s*,?\s*device_ids\s*=\s*\(\s*(?:\[([\d,\s]*)\]\s*T\(([\d,\s]*)\)"
                         r"|([\d,\s]*))\s*\)\s*")
_AXIS_REF = re.compile(r"\s*(?:" + _NAME + r")\s*(?::\s*\(\s*(\d+)\s*\)\s*(\d+))?\s*")


def _ints(s: str) -> tuple[int, ...]:
    return tuple(int(x) for x in s.split(",") if x.strip())


def parse_mesh_groups(t: str) -> MeshGroups:
    """`mesh[...] [, device_ids=(...)] {axes}` (device_ids also inside the brackets)."""
    if not t.startswith("mesh"):
        raise MeshError("expected 'mesh[...] {axes}'")
    i = t.find("[")
    j = t.find("]", i)
    if i < 0 or j < 0:
        raise MeshError("expected '[' and ']' around the mesh axes", max(i, 0))
    inner = t[i + 1:j]
    names, sizes = [], []
    ids_text = None
    at = inner.find("device_ids")
    if at >= 0:
        ids_text, inner = inner[at:], inner[:at].rstrip().rstrip(",")
    for part in (p for p in inner.split(",") if p.strip()):
        m = _MESH_AXIS.fullmatch(part)
        if not m:
            raise MeshError(f"mesh axis '{part.strip()}' is not NAME=SIZE", i + 1)
        names.append(next(g for g in m.groups()[:3] if g is not None))
        sizes.append(int(m[4]))
    if not names:
        raise MeshError("a mesh needs at least one axis", i)
    if len(set(names)) != len(names):
        raise MeshError("mesh has duplicate axis names", i)
    rest = t[j + 1:]
    k = rest.find("{")
    if k < 0 or not rest.rstrip().endswith("}"):
        raise MeshError("expected the group's axes in braces after the mesh: {'x'}", j + 1)
    if rest[:k].strip():
        ids_text = rest[:k]
    n = math.prod(sizes)
    device_ids, iota = None, None
    if ids_text is not None:
        m = _DEVICE_IDS.fullmatch(ids_text)
        if not m:
            raise MeshError(f"malformed device_ids '{ids_text.strip()}'", j + 1)
        if m[3] is not None:
            device_ids = _ints(m[3])
            if len(device_ids) != n:
                raise MeshError(f"expected {n} device_ids based on mesh axes, but got "
                                f"{len(device_ids)}", j + 1)
            if sorted(device_ids) != list(range(n)):
                raise MeshError("device_ids must be a permutation of 0..N-1", j + 1)
        else:
            reshape, perm = _ints(m[1]), _ints(m[2])
            if math.prod(reshape) != n or sorted(perm) != list(range(len(reshape))):
                raise MeshError(f"device_ids [{m[1]}]T({m[2]}) do not fit a mesh of {n} "
                                "devices", j + 1)
            iota = (reshape, perm)
    body = rest[k:].strip()[1:-1]
    axes = []
    for part in (p for p in body.split(",") if p.strip()):
        m = _AXIS_REF.fullmatch(part)
        if not m:
            raise MeshError(f"malformed axis '{part.strip()}'", j + 1 + k)
        name = next(g for g in m.groups()[:3] if g is not None)
        if name in names:
            axis = names.index(name)
        elif name.isdigit():
            axis = int(name)
            if axis >= len(names):
                raise MeshError(f"axis index {axis} is out of bounds for mesh with "
                                f"{len(names)} axes", j + 1 + k)
        else:
            raise MeshError(f"axis '{name}' is not a valid axis name or index in the mesh",
                            j + 1 + k)
        sub = None
        if m[4] is not None:
            sub = (int(m[4]), int(m[5]))
            pre, size = sub
            if pre < 1 or size < 2 or sizes[axis] % (pre * size) or size >= sizes[axis]:
                raise MeshError(f"sub-axis '{name}':({pre}){size} does not fit axis size "
                                f"{sizes[axis]}", j + 1 + k)
        axes.append(AxisRef(axis, sub))
    seen: dict[int, list] = {}
    for a in axes:
        others = seen.setdefault(a.axis, [])
        for b in others:
            if a.sub is None or b.sub is None or (
                    a.sub[0] < b.sub[0] * b.sub[1] and b.sub[0] < a.sub[0] * a.sub[1]):
                raise MeshError(f"axis '{names[a.axis]}' is named twice or overlaps", j + 1 + k)
        others.append(a)
    return MeshGroups(tuple(names), tuple(sizes), device_ids, iota, tuple(axes))
