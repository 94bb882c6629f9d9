"""HLO gather and scatter as lax.gather / lax.scatter*, for the jax builder.

HLO names the index vector's dimension (`index_vector_dim`); lax keeps it last, so the
indices are moved (or given a trailing dimension of 1) and the indices' batching dimensions
renumbered.  Out-of-range starts: HLO's gather clamps them (lax's CLIP mode), XLA skips a
scatter's out-of-range windows (FILL_OR_DROP).  Scatter's combiner maps to a lax scatter
when it is `p1` (replace) or add / multiply / maximum / minimum.
"""
from __future__ import annotations

from ..hlo.errors import HloError
from .jax_lowering import binary_monoid

_SCATTERS = {"add": "scatter_add", "multiply": "scatter_mul", "maximum": "scatter_max",
             "minimum": "scatter_min"}


def _ints(a, key):
    return tuple(int(d) for d in (a.get(key) or ()))


def _index_vector_last(lax, indices, ivd: int, batching: tuple[int, ...]):
    """Indices with the index vector as their last dimension, and the batching dimensions
    renumbered to match."""
    rank = len(indices.shape)
    if ivd == rank:
        return lax.expand_dims(indices, (rank,)), batching
    if ivd != rank - 1:
        perm = [d for d in range(rank) if d != ivd] + [ivd]
        indices = lax.transpose(indices, perm)
    return indices, tuple(d if d < ivd else d - 1 for d in batching)


def gather(jax, ins, ops, env):
    lax = jax.lax
    a = ins.attrs
    indices, batching = _index_vector_last(lax, ops[1], int(a["index_vector_dim"]),
                                           _ints(a, "start_indices_batching_dims"))
    dn = lax.GatherDimensionNumbers(
        offset_dims=_ints(a, "offset_dims"), collapsed_slice_dims=_ints(a, "collapsed_slice_dims"),
        start_index_map=_ints(a, "start_index_map"),
        operand_batching_dims=_ints(a, "operand_batching_dims"),
        start_indices_batching_dims=batching)
    return lax.gather(ops[0], indices, dn, _ints(a, "slice_sizes"),
                      indices_are_sorted=bool(a.get("indices_are_sorted")),
                      mode=lax.GatherScatterMode.CLIP)


def scatter(jax, ins, ops, env):
    lax = jax.lax
    a = ins.attrs
    if len(ops) != 3:
        raise HloError("jax builder: a scatter of several operands has no lax equivalent")
    comp = a["to_apply"]
    params = comp.parameters
    if comp.root is params[1]:
        fn = lax.scatter
    elif binary_monoid(comp) in _SCATTERS:
        fn = getattr(lax, _SCATTERS[binary_monoid(comp)])
    else:
        raise HloError("jax builder: scatter with this combiner has no lax equivalent (lax "
                       "scatters replace, add, multiply, maximum or minimum)")
    indices, batching = _index_vector_last(lax, ops[1], int(a["index_vector_dim"]),
                                           _ints(a, "scatter_indices_batching_dims"))
    dn = lax.ScatterDimensionNumbers(
        update_window_dims=_ints(a, "update_window_dims"),
        inserted_window_dims=_ints(a, "inserted_window_dims"),
        scatter_dims_to_operand_dims=_ints(a, "scatter_dims_to_operand_dims"),
        operand_batching_dims=_ints(a, "input_batching_dims"),
        scatter_indices_batching_dims=batching)
    return fn(ops[0], indices, ops[2], dn, indices_are_sorted=bool(a.get("indices_are_sorted")),
              unique_indices=bool(a.get("unique_indices")),
              mode=lax.GatherScatterMode.FILL_OR_DROP)
