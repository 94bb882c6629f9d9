"""Running an `xlaplug.shard_map` region (passes/sdy_shard_map.py): the global operands are
cut into each mesh device's shards by the region's in_shardings, the body runs on every
device of the mesh at once (one thread each, its collectives over the mesh: device d is
partition d), and the devices' results are put back together by the out_shardings
(replicated results come from the devices at coordinate 0 of the axes they do not use)."""
from __future__ import annotations

import numpy as np

from ...hlo.text import sdy
from ...hlo.errors import HloError
from ...backends.common.errors import ExecutionError
from ...backends.spmd.groups import DeviceGrid
from ...backends.spmd.place import place_of


def _blocks(mesh: sdy.SdyMesh, sharding: sdy.ValueSharding, shape, device: int):
    """The index of `device`'s block along each dimension, and the block counts."""
    sizes = dict(mesh.axes)
    coords = mesh.coords(device)
    index, counts = [], []
    for d in range(len(shape)):
        axes = sharding.dims[d] if d < len(sharding.dims) else ()
        k, n = 0, 1
        for a in axes:
            k, n = k * sizes[a] + coords[a], n * sizes[a]
        index.append(k)
        counts.append(n)
    return index, counts


def _local(x: np.ndarray, index, counts) -> np.ndarray:
    sl = tuple(slice(k * (s // n), (k + 1) * (s // n)) for k, n, s in zip(index, counts, x.shape))
    return np.ascontiguousarray(x[sl])


def _plan(ins, module_meshes):
    fa = ins.attrs.get("frontend_attributes") or {}
    ins_sh = sdy.parse_shardings(fa.get("xla.sdy.in_shardings", ""), "in_shardings")
    outs_sh = sdy.parse_shardings(fa.get("xla.sdy.out_shardings", ""), "out_shardings")
    names = {s.mesh for s in ins_sh + outs_sh}
    if len(names) != 1 or next(iter(names)) not in module_meshes:
        raise ExecutionError(f"shard_map '{ins.name}': its shardings name the meshes "
                             f"{sorted(names)}; the module defines {sorted(module_meshes)}")
    mesh = module_meshes[next(iter(names))]
    manual = sdy.parse_manual_axes(fa.get("xla.sdy.manual_axes", ""))
    if set(manual) != {a for a, _ in mesh.axes}:
        raise ExecutionError(f"shard_map '{ins.name}': manual over {list(manual)} of the mesh "
                             f"axes {[a for a, _ in mesh.axes]}: a region that leaves axes to "
                             "the partitioner is not supported")
    return mesh, ins_sh, outs_sh


def region_devices(module) -> int:
    """The most devices one of the module's shard_map regions runs at once (1: none)."""
    from ...hlo.opcodes import SHARD_MAP_TARGET
    most = 1
    for comp in module.computations:
        for ins in comp.instructions:
            if ins.opcode != "custom-call" or \
                    ins.attrs.get("custom_call_target") != SHARD_MAP_TARGET:
                continue
            try:
                meshes = sdy.parse_meshes((ins.attrs.get("frontend_attributes") or {}).get(
                    "xlaplug.meshes", ""))
                most = max(most, _plan(ins, meshes)[0].size)
            except (HloError, ExecutionError):
                pass  # the region reports it when it runs
    return most


def run_shard_map(ins, args, ctx):
    from ..executor import ExecContext
    from .runner import run_devices
    if place_of(ctx).grid.count != 1:
        raise ExecutionError(f"shard_map '{ins.name}': a global program's region runs on its "
                             "mesh; this module already runs on several devices")
    try:
        meshes = sdy.parse_meshes((ins.attrs.get("frontend_attributes") or {}).get(
            "xlaplug.meshes", ""))
        mesh, ins_sh, outs_sh = _plan(ins, meshes)
    except HloError as e:
        raise ExecutionError(f"shard_map '{ins.name}': {e.message}") from None
    body = ins.attrs["called_computations"][0]
    host = [np.asarray(ctx.memory.to_host(a, o.shape)) for a, o in zip(args, ins.operands)]
    n = mesh.size
    device_args = []
    for d in range(n):
        row = []
        for x, sh in zip(host, ins_sh):
            index, counts = _blocks(mesh, sh, x.shape, d)
            row.append(_local(x, index, counts))
        device_args.append(row)
    options = dict(ctx.options)

    def make(d):  # rng state: the mesh device's own, kept with the calling device's
        return ExecContext(ctx.device, options, overrides=ctx.overrides,
                           rng=ctx.rng.region(ins, d), runtime=ctx.runtime)

    from ...hlo.ir import Module
    region = Module(f"{ins.name}.region", [body], body)
    results = run_devices(region, device_args, DeviceGrid(1, n), make,
                          ctx.options.get("collective_timeout", 60.0))
    leaves = [list(r) if isinstance(r, tuple) else [r] for r in results]
    shapes = ins.shape.tuple_shapes if ins.shape.is_tuple else (ins.shape,)
    outs = []
    for j, (s, sh) in enumerate(zip(shapes, outs_sh)):
        out = np.empty(s.dims, s.dtype)
        used = {a for axes in sh.dims for a in axes}
        for d in range(n):
            coords = mesh.coords(d)
            if any(coords[a] for a, _ in mesh.axes if a not in used):
                continue  # a replica of a block another device supplies
            index, counts = _blocks(mesh, sh, s.dims, d)
            local = np.asarray(leaves[d][j])
            sl = tuple(slice(k * local.shape[i], (k + 1) * local.shape[i])
                       for i, k in enumerate(index))
            out[sl] = local
        outs.append(ctx.memory.to_device(out))
    return tuple(outs) if ins.shape.is_tuple else outs[0]

