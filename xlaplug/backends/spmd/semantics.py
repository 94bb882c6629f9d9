"""What each collective computes from its participants' values (host numpy arrays, in rank
order): the math only, shared by every transport (threads, MPI) and device.

Reductions start from rank 0's value and combine in rank order, so every device gets the
same bits and an f32 sum matches XLA:CPU's in-process communicator.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

Combine = Callable[[np.ndarray, np.ndarray], np.ndarray]


def reduce_in_rank_order(values: Sequence[np.ndarray], combine: Combine) -> np.ndarray:
    acc = np.array(values[0], copy=True)
    for v in values[1:]:
        acc = combine(acc, v)
    return acc


def gather(values: Sequence[np.ndarray], dim: int) -> np.ndarray:
    return np.concatenate([np.asarray(v) for v in values], axis=dim)


def scatter_part(x: np.ndarray, dim: int, n: int, rank: int) -> np.ndarray:
    """Part `rank` of x cut into n equal blocks along dim (reduce-scatter, all-to-all)."""
    size = x.shape[dim] // n
    index = [slice(None)] * x.ndim
    index[dim] = slice(rank * size, (rank + 1) * size)
    return np.ascontiguousarray(x[tuple(index)])


def all_to_all_array(values: Sequence[np.ndarray], split_dim: int, concat_dim: int,
                     rank: int) -> np.ndarray:
    """Rank `rank` receives block `rank` of every participant, concatenated in rank order."""
    n = len(values)
    return np.concatenate([scatter_part(np.asarray(v), split_dim, n, rank) for v in values],
                          axis=concat_dim)


def permute_source(pairs: Sequence[tuple[int, int]], me: int) -> int | None:
    """The id sending to `me` in collective-permute's source_target_pairs, or None."""
    sources = [s for s, t in pairs if t == me]
    return sources[0] if sources else None
