"""A global program -- jax's, before XLA's SPMD partitioner cuts it -- as the reference of
`run --reference xla`: how many devices it is for, and its global values cut into the shards
XLA's partitioned executable takes and put back together from the shards it gives.

jax prints such a program with Shardy's attributes (`frontend_attributes={xla.sdy.meshes=
{mesh = #sdy.mesh<["x"=4]>}}`, shard_map regions as `xla.sdy.GlobalToLocalShape` ...
`xla.sdy.LocalToGlobalShape`), or, with Shardy off, GSPMD's `sharding={devices=[4,1]<=[4]}`.
Either way it is one program for the whole mesh: XLA compiles it for as many partitions as
the mesh has devices, and the executable's parameter and output shardings say which block of
each global value every device holds.  xlaplug runs the same program on one device (a
shard_map region runs its body on every device of its mesh), so the two are compared on
the global values.

Arrays are cut as XLA pads them: a dimension of size s split n ways is n blocks of
ceil(s / n), the last one padded.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from ..hlo.errors import HloError
from ..hlo.ir import Module
from ..hlo.text import sdy


class GlobalProgramError(HloError):
    """A global program the reference cannot run as XLA would (one line, exit 2)."""

    def headline(self) -> str:
        return f"error: --reference xla: {self.message}"

    def __str__(self) -> str:
        return self.headline()


def _sharding_devices(sharding) -> int:
    """Devices a `sharding=` annotation names (0 for replicated, manual, ...)."""
    if sharding is None:
        return 0
    if sharding.is_tuple:
        return max((_sharding_devices(e) for e in sharding.elements), default=0)
    if sharding.kind == "tiled":
        return max(sharding.device_ids(), default=-1) + 1
    if sharding.kind == "maximal" and sharding.device is not None:
        return sharding.device + 1
    return 0


def global_devices(module: Module) -> tuple[int, bool]:
    """(devices, Shardy?) of a global program: its Shardy mesh's device count, else the most
    devices its `sharding=` annotations name; (1, False) for a program with neither."""
    text = sdy.meshes_text(module)
    if text:
        try:
            meshes = sdy.parse_meshes(text)
        except HloError as e:
            raise GlobalProgramError(e.message) from None
        sizes = {m.size for m in meshes.values()}
        if len(sizes) > 1:
            raise GlobalProgramError(f"meshes of {len(sizes)} different sizes "
                                     f"({', '.join(map(str, sorted(sizes)))} devices) in one "
                                     "program are not supported")
        return (sizes.pop() if sizes else 1), True
    n = max((_sharding_devices(i.attrs.get("sharding")) for c in module.computations
             for i in c.instructions), default=0)
    return max(n, 1), False


def _ways(hs, rank: int) -> list[int]:
    """Blocks along each dimension of a value with HloSharding `hs`."""
    if hs.is_replicated():
        return [1] * rank
    if hs.is_maximal() or hs.is_manual() or not hs.is_tiled():
        raise GlobalProgramError(f"XLA's partitioned executable has a {hs} value; the "
                                 "reference takes tiled and replicated ones")
    return list(hs.tile_assignment_dimensions()[:rank])


def cut(x: np.ndarray, hs, devices: int, indices) -> tuple[tuple[int, ...], list[np.ndarray]]:
    """(padded global shape, each device's shard) of the global value `x` under `hs`;
    `indices` is jax's op_sharding_to_numpy_indices."""
    ways = _ways(hs, x.ndim)
    padded = tuple(n * math.ceil(s / n) for s, n in zip(x.shape, ways))
    if padded != x.shape:
        x = np.pad(x, [(0, p - s) for s, p in zip(x.shape, padded)])
    where = indices(hs, padded, devices)
    return padded, [np.ascontiguousarray(x[where[d]]) for d in range(devices)]


def assemble(shards: list[np.ndarray], hs, indices, shape: tuple[int, ...]) -> np.ndarray:
    """The global value of `shape` put together from each device's shard under `hs` (a
    replicated block from the first device that holds it)."""
    ways = _ways(hs, len(shape))
    padded = tuple(n * shards[0].shape[i] for i, n in enumerate(ways))
    out = np.empty(padded, shards[0].dtype)
    done = set()
    for d, where in enumerate(indices(hs, padded, len(shards))):
        key = tuple((s.start, s.stop) for s in where)
        if key not in done:
            out[where] = shards[d]
            done.add(key)
    return np.ascontiguousarray(out[tuple(slice(0, s) for s in shape)])


def numpy_indices(hs, shape, devices: int, xc) -> np.ndarray:
    """Each device's block of a value of `shape` under HloSharding `hs`, as numpy indices: jax's
    op_sharding_to_numpy_indices (jax/_src/op_shardings.py) for a process without jax, `xc`
    jaxlib's xla_client (its OpSharding types)."""
    indices = np.empty(devices, dtype=np.object_)
    if hs.num_devices() == 1 or hs.is_replicated():
        indices.fill((slice(None),) * len(shape))
        return indices
    partitions, replicas = _ways_and_replicas(hs, xc)
    axes = [[slice(None)] if n == 1 else
            [slice(i * (dim // n), (i + 1) * (dim // n)) for i in range(n)]
            for dim, n in zip(shape, partitions)]
    device = iter(hs.tile_assignment_devices())
    for where in itertools.product(*axes):
        for _ in range(replicas):
            indices[next(device)] = where
    return indices


def _ways_and_replicas(hs, xc) -> tuple[list[int], int]:
    """jax's get_num_ways_dim_sharded: blocks along each dimension, and copies of each."""
    if hs.is_unreduced():
        return [], 1
    parts = list(hs.tile_assignment_dimensions())
    kinds = hs.subgroup_types()
    T = xc.OpSharding.Type
    if kinds == [T.REPLICATED]:
        return parts[:-1], parts[-1]
    if kinds == [T.UNREDUCED]:
        return parts[:-1], 1
    if set(kinds) == {T.REPLICATED, T.UNREDUCED}:
        return parts[:-2], parts[-2:][kinds.index(T.REPLICATED)]
    if hs.replicate_on_last_tile_dim():
        return parts[:-1], parts[-1]
    if kinds:
        raise GlobalProgramError(f"XLA's partitioned executable has a {hs} value; the "
                                 "reference takes tiled and replicated ones")
    return parts, 1
