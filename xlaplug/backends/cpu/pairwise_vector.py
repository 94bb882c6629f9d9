"""numpy's pairwise sum of a row as LLVM vector code: the bits np.add.reduce gives, at the
speed of the memory.

numpy sums a contiguous run of n >= 8 elements in blocks ("leaves") of at most 128: each
leaf with 8 accumulators (r[t] = x[t], then r[t] += x[8q + t]), added as
((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)), then the leaf's last n % 8 elements in
order; longer runs split in halves at multiples of 8 and the halves' sums are added
(`pairwise_program` lists the leaves and adds).  The 8 accumulators are one vector
of 8 lanes: each step of a leaf is one vector add.  numba leaves the scalar form scalar
(its SLP vectorizer is off: numba#8705), one add per element -- a row sum of
f32[4096,1024] took 0.60 ms on one core, numpy's own kernel as long, XLA:CPU's 0.18 ms
(2026-12-06, load 0.3).  `pairwise_sum` writes the vectors itself, and runs up to
LEAVES_AT_ONCE leaves side by side in one loop: one leaf is a chain of dependent adds
(each waits for the last), several keep the adders busy.  Lane t of a vector add is the
scalar add of lane t, in IEEE arithmetic (no fast-math flags): the same bits.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ..common.row_contents import VECTOR_SUM_MAX

LEAVES_AT_ONCE = 8  # accumulator vectors live at once: 8 of the 16 (AVX2) or 32 registers
MAX_ELEMENTS = VECTOR_SUM_MAX  # the longest row: the code grows with its leaf count
# Generated modules are cached on disk by their text; this file's hash goes into the import
# line they hold, so a change here is never served from an old module's machine code.
_DIGEST = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
IMPORT = ("from xlaplug.backends.cpu.pairwise_vector import pairwise_sum as _xpairwise"
          f"  # {_DIGEST}\n")


def pairwise_program(n: int) -> tuple[list[int], list[int], list[int]]:
    """numpy's pairwise sum of n >= 8 elements as (leaf starts, leaf lengths, program): the
    program lists leaves (index >= 0) and adds (-1: the two values on top of the stack)
    in postfix order -- a leaf is at most 128 elements, a longer range splits at
    n2 = n // 2 rounded down to a multiple of 8."""
    starts, lens, prog = [], [], []

    def walk(s: int, n: int) -> None:
        if n <= 128:
            prog.append(len(starts))
            starts.append(s)
            lens.append(n)
            return
        n2 = n // 2
        n2 -= n2 % 8
        walk(s, n2)
        walk(s + n2, n - n2)
        prog.append(-1)
    walk(0, n)
    return starts, lens, prog


def vectorizable(ct: str, k: int) -> bool:
    """Whether `pairwise_sum` takes a row of k elements of numba type name `ct`."""
    return ct in ("np.float32", "np.float64") and 8 <= k <= MAX_ELEMENTS


@intrinsic(prefer_literal=True)
def pairwise_sum(typingctx, buf, n):
    """numpy's pairwise sum of buf[:n] (a contiguous f32 or f64 row; n a constant >= 8)."""
    dt = getattr(buf, "dtype", None)
    if not isinstance(n, types.IntegerLiteral) or dt not in (types.float32, types.float64) \
            or buf.ndim != 1 or buf.layout != "C" or not 8 <= n.literal_value <= MAX_ELEMENTS:
        return None
    starts, lens, prog = pairwise_program(n.literal_value)

    def codegen(context, builder, sig, args):
        ft = ir.FloatType() if dt == types.float32 else ir.DoubleType()
        width = dt.bitwidth // 8
        vt, i64 = ir.VectorType(ft, 8), ir.IntType(64)
        data = context.make_array(sig.args[0])(context, builder, args[0]).data
        const = lambda v: ir.Constant(i64, v)  # noqa: E731

        def vload(idx):
            ptr = builder.bitcast(builder.gep(data, [idx]), vt.as_pointer())
            return builder.load(ptr, align=width)

        def steps(accs: dict, lo: int, hi: int) -> None:  # acc_c += x[s_c + q], q in lo..hi
            if hi <= lo:
                return
            with cgutils.for_range_slice(builder, const(lo), const(hi), const(8)) as (q, _):
                for c, acc in accs.items():
                    v = builder.fadd(builder.load(acc), vload(builder.add(q, const(starts[c]))))
                    builder.store(v, acc)

        sums = []
        for g in range(0, len(starts), LEAVES_AT_ONCE):
            group = range(g, min(g + LEAVES_AT_ONCE, len(starts)))
            # (allocas: LLVM keeps them in registers)
            accs = {c: cgutils.alloca_once_value(builder, vload(const(starts[c])))
                    for c in group}
            n8 = {c: lens[c] - lens[c] % 8 for c in group}
            common = min(n8.values())
            steps(accs, 8, common)
            for c in group:
                steps({c: accs[c]}, common, n8[c])  # a longer leaf's last steps, alone
                v = builder.load(accs[c])
                r = [builder.extract_element(v, ir.Constant(ir.IntType(32), t))
                     for t in range(8)]
                s = builder.fadd(builder.fadd(builder.fadd(r[0], r[1]),
                                              builder.fadd(r[2], r[3])),
                                 builder.fadd(builder.fadd(r[4], r[5]),
                                              builder.fadd(r[6], r[7])))
                for q in range(n8[c], lens[c]):  # the leaf's last elements, in order
                    s = builder.fadd(s, builder.load(builder.gep(data, [const(starts[c] + q)])))
                sums.append(s)
        stack: list = []
        for c in prog:  # the program's adds, in its postfix order
            if c < 0:
                b, a = stack.pop(), stack.pop()
                stack.append(builder.fadd(a, b))
            else:
                stack.append(sums[c])
        return stack[0]
    return dt(buf, n), codegen
