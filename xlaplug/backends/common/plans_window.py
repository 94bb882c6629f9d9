"""Window plans: the geometry of a reduce-window or select-and-scatter window, checked once
and held as plain data that the CPU and CUDA kernels both read.

XLA's placement (operation semantics, ReduceWindow; HloEvaluator's IterateThroughWindow):
along a dimension, output position o and window position w reach position
o*stride + w*window_dilation - padding_low of the operand base-dilated (element i sits at
i*base_dilation) and padded.  A position on padding or in a dilation hole holds no operand
element: the kernels skip it (the fold starts from the init value and takes only operand
elements, which with an identity init value is the same as padding with it).

The CPU's generic kernels read that rule from a per-dimension table of outputs x window
entries (cpu/reduce_window.py); the CUDA kernels compute it per thread, since the table of a
cumsum's reduce-window (window = operand length) would grow as N^2.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import ExecutionError
from .plans import row_strides


@dataclass(frozen=True)
class WindowPlan:
    """One window over an operand of `operand_dims` giving `out_dims` positions; per
    dimension its size, stride, padding and dilations."""
    operand_dims: tuple[int, ...]
    operand_strides: tuple[int, ...]   # row-major, in elements
    out_dims: tuple[int, ...]
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    pad_lo: tuple[int, ...]
    pad_hi: tuple[int, ...]
    lhs_dilate: tuple[int, ...]        # base dilation
    rhs_dilate: tuple[int, ...]        # window dilation

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
    return WindowPlan(operand_dims, row_strides(operand_dims), out_dims,
                      tuple(wd.size for wd in wdims), tuple(wd.stride for wd in wdims),
                      tuple(wd.pad_lo for wd in wdims), tuple(wd.pad_hi for wd in wdims),
                      tuple(wd.lhs_dilate for wd in wdims),
                      tuple(wd.rhs_dilate for wd in wdims))
