"""The reduces of a small region (region_code.py) in the unfused kernel's order.

loop_sums.py folds every reduce in row-major order from init (the HloEvaluator's order, and
the unfused kernel's for most reducers), but the unfused kernel (cpu/reductions.py) runs a
plain add / multiply / maximum / minimum with its identity as init as a numpy reduction:
numpy's pairwise sums.  A region must give the interpreter's bits, so such a reduce over the
trailing dimensions (rows of K elements, as numpy's inner loop runs them) folds as
row_folds.fast_fold does for row fusions; over other dimensions (numpy's order there is its
iterator's) it is not expressed, and stays outside the region.  Every other reduce is
loop_sums' fold, the unfused kernel's order.  Dots are not expressed unless the pass's
`sums` option asks (loop_sums: vector lanes or numba's BLAS, not numpy's).
"""
from __future__ import annotations

import numpy as np

from ...hlo.ir import Instruction
from . import comp_patterns as P
from . import loop_sums
from .jit_drivers import numba_dtype
from .loop_codegen import ArrayCodegen, Unsupported
from .row_folds import fast_fold


class RegionCodegen(ArrayCodegen):
    """ArrayCodegen with the unfused kernels' sums (module docstring); `sums`: loop_sums'
    own (faster, other bits)."""

    def __init__(self, consts: dict, prefix: str, sums: bool = False):
        super().__init__(consts, prefix)
        self.sums = sums

    def emit(self, ins: Instruction, name: str) -> str:
        if not self.sums and ins.opcode == "dot":
            raise Unsupported("a dot (numpy's BLAS in the interpreter)")
        if not self.sums and ins.opcode == "reduce":
            self._flush()
            numpy_reduce(self, ins, name)
            return name
        return super().emit(ins, name)


def fast_op(ins: Instruction) -> str | None:
    """The numpy fast path the unfused kernel takes for this reduce (as row_loop._fast):
    "add", "maximum", "minimum" or "multiply"; None: the reducer's own fold.  An init that
    is not a constant here cannot be told apart: Unsupported."""
    x, init = ins.operands
    op = P.binary_op(ins.attrs["to_apply"])
    t = ins.shape.element_type
    if op not in ("add", "maximum", "minimum", "multiply") or t[0] not in "fb" \
            or x.shape.element_type != t \
            or P.ufunc_for(op, t, widened=True, xla_loop=True) is None:
        return None
    if init.opcode != "constant" or init.literal is None:
        raise Unsupported("a reduce whose init value is not a constant here")
    return op if P.is_identity(op, init.literal) else None


def numpy_reduce(cg: RegionCodegen, ins: Instruction, name: str) -> None:
    if len(ins.operands) != 2:
        raise Unsupported("a variadic reduce")
    op = fast_op(ins)
    if op is None:
        loop_sums.EMITTERS["reduce"](cg, ins, name)  # the reducer's fold, as unfused
        return
    x, init = ins.operands
    rank = x.shape.rank
    red = sorted(int(d) for d in ins.attrs.get("dimensions", ()))
    if red != list(range(rank - len(red), rank)):
        raise Unsupported("a numpy reduction over leading dimensions")
    k = int(np.prod([int(x.shape.dims[d]) for d in red], dtype=np.int64))
    m = ins.shape.num_elements()
    if k == 0:
        raise Unsupported("an empty reduction")
    j = f"{len(cg.pieces)}_{len(cg.lines)}"
    ct = "np." + numba_dtype(ins.shape.dtype).name
    lines, allocs, consts = fast_fold(op, "rowb", k, f"{cg.names[id(init)]}[0]", "res", ct,
                                      j, "    ")
    # fast_fold's module constants and scratch get names unique to this reduce.
    cg.consts.update(consts)
    cg._alloc(ins, name)
    cg.lines += allocs
    cg.lines.append(f"for mr in range({m}):")
    cg.lines.append(f"    rowb = {cg.names[id(x)]}[mr * {k}:(mr + 1) * {k}]")
    cg.lines += lines
    cg.lines.append(f"    {name}[mr] = res")
