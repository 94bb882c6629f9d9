"""Window plans: where each window of a reduce-window or select-and-scatter lies in its
operand, worked out once as plain data that the CPU and CUDA kernels both read -- so the
two devices cannot place a window differently.

XLA's placement (operation semantics, ReduceWindow; HloEvaluator's IterateThroughWindow):
along a dimension, output position o and window position w reach position
o*stride + w*window_dilation - padding_low of the operand base-dilated (element i sits at
i*base_dilation) and padded.  A position on padding or in a dilation hole holds no operand
element: the kernels skip it (the fold starts from the init value and takes only operand
elements, which with an identity init value is the same as padding with it).

* `reach`: per dimension, the operand index each (output position, window position) pair
  reaches, or -1 -- the table every window kernel walks;
* `cover_ranges`: per dimension, the first and last output positions whose windows reach
  each operand index -- what a kernel that runs per operand element (CUDA's
  select-and-scatter scatter phase) searches.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import ExecutionError
from .plans import row_strides


@dataclass(frozen=True, eq=False)
class WindowPlan:
    """One window over an operand of `operand_dims` giving `out_dims` positions; per
    dimension its size, stride, padding and dilations.  `reach[reach_offsets[d] +
    o * sizes[d] + w]` is the operand index along d of output position o, window position
    w, or -1 (padding or a dilation hole)."""
    operand_dims: tuple[int, ...]
    operand_strides: tuple[int, ...]   # row-major, in elements
    out_dims: tuple[int, ...]
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    pad_lo: tuple[int, ...]
    pad_hi: tuple[int, ...]
    lhs_dilate: tuple[int, ...]        # base dilation
    rhs_dilate: tuple[int, ...]        # window dilation
    reach: np.ndarray                  # int64, every dimension's table concatenated
    reach_offsets: tuple[int, ...]

    @property
    def window_elements(self) -> int:
        n = 1
        for s in self.sizes:
            n *= s
        return n


def window_plan(ins, operand_dims, out_dims) -> WindowPlan:
    """The plan of `ins`'s `window` attribute over an operand of `operand_dims` giving
    `out_dims` positions (the result's dims for reduce-window, the source's for
    select-and-scatter); an ExecutionError when the ranks differ."""
    wdims = tuple(ins.attrs["window"].dims)
    operand_dims = tuple(int(n) for n in operand_dims)
    out_dims = tuple(int(n) for n in out_dims)
    if not len(wdims) == len(operand_dims) == len(out_dims):
        raise ExecutionError(f"{ins.opcode} '{ins.name}': a window of rank {len(wdims)} for "
                             f"an operand of rank {len(operand_dims)} and positions of "
                             f"rank {len(out_dims)}")
    parts, offsets, off = [], [], 0
    for n, o_n, wd in zip(operand_dims, out_dims, wdims):
        o = np.arange(o_n, dtype=np.int64)[:, None]
        w = np.arange(wd.size, dtype=np.int64)[None, :]
        pos = o * wd.stride + w * wd.rhs_dilate - wd.pad_lo
        idx = pos // wd.lhs_dilate
        ok = (pos >= 0) & (pos % wd.lhs_dilate == 0) & (idx < n)
        table = np.where(ok, idx, -1).reshape(-1)
        parts.append(table)
        offsets.append(off)
        off += table.size
    reach = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    return WindowPlan(operand_dims, row_strides(operand_dims), out_dims,
                      tuple(wd.size for wd in wdims), tuple(wd.stride for wd in wdims),
                      tuple(wd.pad_lo for wd in wdims), tuple(wd.pad_hi for wd in wdims),
                      tuple(wd.lhs_dilate for wd in wdims),
                      tuple(wd.rhs_dilate for wd in wdims), reach, tuple(offsets))


def cover_ranges(plan: WindowPlan):
    """(first, last, offsets): `first[offsets[d] + i]` .. `last[offsets[d] + i]` are the
    output positions along d whose windows reach operand index i (first > last: none).
    Read from `reach`, so it agrees with the kernels that walk windows forward."""
    firsts, lasts, offsets, off = [], [], [], 0
    for d, (n, o_n, size) in enumerate(zip(plan.operand_dims, plan.out_dims, plan.sizes)):
        start = plan.reach_offsets[d]
        table = plan.reach[start:start + o_n * size].reshape(o_n, size)
        o = np.broadcast_to(np.arange(o_n, dtype=np.int64)[:, None], table.shape)
        hit = table >= 0
        first = np.full(n, o_n, np.int64)
        last = np.full(n, -1, np.int64)
        np.minimum.at(first, table[hit], o[hit])
        np.maximum.at(last, table[hit], o[hit])
        firsts.append(first)
        lasts.append(last)
        offsets.append(off)
        off += n
    empty = np.zeros(0, np.int64)
    return (np.concatenate(firsts) if firsts else empty,
            np.concatenate(lasts) if lasts else empty, tuple(offsets))
