"""A numba intrinsic: an atomic fetch-and-add on an int64 in memory, by address -- the work
counter from which the convolution loops' threads take their next chunk (conv_chunks.py,
conv_phases.py), so that a thread the OS keeps off its core (a shared machine) leaves its
chunks to the others instead of every thread waiting for its fixed share.  Which thread
computes a chunk never changes its bits: each chunk is its own gemm.  The loops' cache keys
are their texts: a change here bumps conv_chunks.VERSION."""
from __future__ import annotations

from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic


@intrinsic
def fetch_add(typingctx, address, value):
    """The int64 at `address` before `value` is added to it, atomically (sequentially
    consistent)."""
    if not (isinstance(address, types.Integer) and isinstance(value, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        a, v = args
        a = builder.sext(a, i64) if a.type.width < 64 else a
        v = builder.sext(v, i64) if v.type.width < 64 else v
        return builder.atomic_rmw("add", builder.inttoptr(a, i64.as_pointer()), v, "seq_cst")
    return types.int64(address, value), codegen
