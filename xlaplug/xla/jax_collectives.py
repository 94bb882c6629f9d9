"""HLO collectives as jax's named-axis collectives, over the axis the jax builder was given.

Inside `shard_map(..., axis_names={"i"})` a decomposition's all-reduce over every device
becomes `lax.psum(x, "i")`, all-gather `lax.all_gather(..., tiled=True)`, reduce-scatter
`lax.psum_scatter(..., tiled=True)`, all-to-all `lax.all_to_all(..., tiled=True)`,
collective-permute `lax.ppermute`, replica-id / partition-id `lax.axis_index`.  The builder
counts the axis' devices as partitions, so "every device" (one group of all of them, or no
groups) is the axis; a group naming only some of the devices has no named-axis equivalent
here and is an error.  Without an axis the op runs on one device, where every collective is
the identity (as XLA runs it with one replica).
"""
from __future__ import annotations

import numpy as np

from ..hlo.errors import HloError
from .jax_lowering import MONOIDS, binary_monoid

_PCOLLECTIVE = {"add": "psum", "maximum": "pmax", "minimum": "pmin"}


def _check_groups(ins, n: int) -> None:
    rg = ins.attrs.get("replica_groups")
    groups = getattr(rg, "groups", None) if rg is not None else None
    if rg is not None and (getattr(rg, "iota", None) or getattr(rg, "mesh", None)):
        groups = None if n == 1 else "other"
    if groups in (None, ()) or groups == ((),) or tuple(map(tuple, groups)) == (tuple(range(n)),):
        return
    raise HloError(f"jax builder: {ins.opcode} over replica_groups {groups} has no named-axis "
                   f"equivalent (only one group of all {n} devices of the axis maps to lax)")


def _axis(env, ins):
    _check_groups(ins, env.axis_size)
    return env.axis_name


def _gather_all(lax, x, axis):
    """Every device's x stacked on a new leading dimension."""
    return lax.all_gather(x, axis, axis=0, tiled=False)


def _fold(jax, env, comp, stacked):
    """The reduction of a stacked leading dimension by reducer `comp`."""
    monoid = binary_monoid(comp)
    if monoid is not None:
        return getattr(jax.lax, MONOIDS[monoid][0])(stacked, (0,))
    acc = stacked[0]
    for k in range(1, stacked.shape[0]):  # devices in order, as XLA folds a group
        acc = env.call(comp, [acc, stacked[k]])
    return acc


def _all_reduce(jax, ins, ops, env):
    axis = _axis(env, ins)
    if axis is None:
        return tuple(ops) if ins.shape.is_tuple else ops[0]
    comp = ins.attrs["to_apply"]
    monoid = binary_monoid(comp)

    def one(x):
        if monoid in _PCOLLECTIVE:
            return getattr(jax.lax, _PCOLLECTIVE[monoid])(x, axis)
        return _fold(jax, env, comp, _gather_all(jax.lax, x, axis))
    outs = [one(x) for x in ops]
    return tuple(outs) if ins.shape.is_tuple else outs[0]


def _all_gather(jax, ins, ops, env):
    axis = _axis(env, ins)
    if len(ops) != 1:
        raise HloError("jax builder: all-gather of several operands has no lax equivalent")
    if axis is None:
        return ops[0]
    return jax.lax.all_gather(ops[0], axis, axis=int(ins.attrs["dimensions"][0]), tiled=True)


def _reduce_scatter(jax, ins, ops, env):
    axis = _axis(env, ins)
    if len(ops) != 1:
        raise HloError("jax builder: reduce-scatter of several operands has no lax equivalent")
    if axis is None:
        return ops[0]
    x, d = ops[0], int(ins.attrs["dimensions"][0])
    comp = ins.attrs["to_apply"]
    if binary_monoid(comp) == "add":
        return jax.lax.psum_scatter(x, axis, scatter_dimension=d, tiled=True)
    # Other reducers: reduce every device's operand, keep this device's block.
    whole = _fold(jax, env, comp, _gather_all(jax.lax, x, axis))
    size = ins.shape.dims[d]
    start = jax.lax.axis_index(axis) * size
    return jax.lax.dynamic_slice_in_dim(whole, start, size, axis=d)


def _all_to_all(jax, ins, ops, env):
    axis = _axis(env, ins)
    dims = ins.attrs.get("dimensions")
    if len(ops) != 1 or not dims:
        raise HloError("jax builder: a tuple all-to-all (no dimensions=) has no lax equivalent")
    if axis is None:
        return ops[0]
    d = int(dims[0])
    return jax.lax.all_to_all(ops[0], axis, d, d, tiled=True)


def _collective_permute(jax, ins, ops, env):
    pairs = [tuple(int(v) for v in p) for p in ins.attrs.get("source_target_pairs") or ()]
    x = ops[0]
    if env.axis_name is None:  # one device: it receives its own value only if 0 -> 0
        return x if (0, 0) in pairs else jax.lax.full_like(x, 0)
    return jax.lax.ppermute(x, env.axis_name, pairs)


def _collective_broadcast(jax, ins, ops, env):
    axis = _axis(env, ins)
    if axis is None:
        return ops[0]
    return _gather_all(jax.lax, ops[0], axis)[0]  # the group's first device's value


def _device_id(jax, ins, ops, env):
    if env.axis_name is None:
        return np.uint32(0)
    if ins.opcode == "replica-id":  # the builder counts the axis' devices as partitions
        return np.uint32(0)
    return jax.lax.convert_element_type(jax.lax.axis_index(env.axis_name), np.uint32)


LOWERINGS = {"all-reduce": _all_reduce, "all-gather": _all_gather,
             "reduce-scatter": _reduce_scatter, "all-to-all": _all_to_all,
             "collective-permute": _collective_permute,
             "collective-broadcast": _collective_broadcast,
             "replica-id": _device_id, "partition-id": _device_id}
