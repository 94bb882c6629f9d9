"""A compiled loop's matrix-times-vector dot whose matrix the loop never changes, as vector
code over the matrix transposed once per loop run.

An RNN cell's `w @ h` (w: f32[64,64], a state leaf the body passes on unchanged, or a
constant) was a row dot (loop_sums._rows_dot): each result a sum of a row in vector lanes,
ending in a horizontal add of the lanes -- 64 of them, 120 ns a step of a 1,000-step scan
whose whole step XLA runs in 180 ns.  Transposed (wt[k, i] = w[i, k]), the product is
out = sum_k h[k] wt[k, :], a sum of rows scaled by the vector's elements: no horizontal
adds, each group of 16 outputs one vector register.  numba's loop vectorizer does not keep
such accumulators in registers across k (it stores and reloads them, or gives up on the
aliasing checks), so `matvec_t` writes the LLVM vector code itself: for each block of up to
64 outputs, two chains of vector multiply-adds (even and odd k, so consecutive steps do not
wait on each other), added at the end -- 39 ns for the 64x64 product (CPU time, 2026-12-06,
load 5; the row dot 122 ns in the same run).

The transpose: `run` (compiled_while.py) fills a buffer of the loop before its first
iteration (ArrayCodegen.hoisted); a constant matrix is transposed here.  The sum's order is
not BLAS's (nor was the row dot's, nor XLA's tiles'): results agree with XLA to rounding,
as the interpreter's BLAS does (tests/test_compiled_while.py's tolerances).
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ...hlo.ir import Computation, Instruction

if TYPE_CHECKING:
    from .loop_codegen import ArrayCodegen

# Up to this many matrix elements: the transposed copy costs about one product's memory
# traffic per loop run (4,096 elements: ~3 us, against 80 ns saved per iteration).
MAX_ELEMENTS = 1 << 16
_BLOCK_BYTES = 256  # outputs per block: 4 AVX-512 registers (x 2 chains: 8 of 32)
# Generated modules are cached on disk by their text: this file's hash goes into the text,
# so a change to the code below is never served from an old module's machine code.
_DIGEST = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def passed_through(comp: Computation) -> set[int]:
    """The state leaves a loop body returns unchanged (its root's operand i is leaf i)."""
    root, param = comp.root, comp.parameters[0]
    if root.opcode != "tuple":
        return set()
    return {i for i, o in enumerate(root.operands)
            if o.opcode == "get-tuple-element" and o.operands[0] is param
            and int(o.attrs["index"]) == i}


def _lanes(n: int, width: int) -> int:
    """Lanes of a vector of `width`-byte elements: the most (a vector of up to 64 bytes)
    that divide n, at least two; 0 when none does."""
    for lanes in (64 // width, 32 // width, 16 // width):
        if lanes >= 2 and n % lanes == 0:
            return lanes
    return 0


@intrinsic(prefer_literal=True)
def matvec_t(typingctx, wt, x, out, n, k):
    """out[:n] = sum over j < k of x[j] * wt[j * n:(j + 1) * n] (flat f32 or f64 arrays;
    n and k constants; n a multiple of the lanes `_lanes` picks)."""
    if not (isinstance(n, types.IntegerLiteral) and isinstance(k, types.IntegerLiteral)):
        return None
    dt = getattr(out, "dtype", None)
    if dt not in (types.float32, types.float64) or any(
            getattr(a, "dtype", None) != dt or a.ndim != 1 for a in (wt, x, out)):
        return None
    N, K = n.literal_value, k.literal_value
    width = dt.bitwidth // 8
    W = _lanes(N, width)
    if W == 0 or K < 1:
        return None

    def codegen(context, builder, sig, args):
        ft = ir.FloatType() if width == 4 else ir.DoubleType()
        vt, i64 = ir.VectorType(ft, W), ir.IntType(64)
        fma = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(vt, [vt, vt, vt]),
            f"llvm.fmuladd.v{W}f{width * 8}")
        wd, xd, od = (context.make_array(t)(context, builder, a).data
                      for t, a in zip(sig.args[:3], args[:3]))
        const = lambda v: ir.Constant(i64, v)  # noqa: E731

        def at(ptr, idx):
            return builder.bitcast(builder.gep(ptr, [idx]), vt.as_pointer())

        def splat(v):
            u = builder.insert_element(ir.Constant(vt, ir.Undefined), v, ir.Constant(
                ir.IntType(32), 0))
            return builder.shuffle_vector(u, ir.Constant(vt, ir.Undefined), ir.Constant(
                ir.VectorType(ir.IntType(32), W), [0] * W))

        def step(kk, accs, j0):  # acc += x[kk] * wt[kk, j0:j0 + W len(accs)]
            xs = splat(builder.load(builder.gep(xd, [kk])))
            base = builder.add(builder.mul(kk, const(N)), const(j0))
            for v, acc in enumerate(accs):
                w = builder.load(at(wd, builder.add(base, const(v * W))), align=width)
                builder.store(builder.call(fma, [w, xs, builder.load(acc)]), acc)

        per_block = max(1, _BLOCK_BYTES // (W * width))
        zero = ir.Constant(vt, [0.0] * W)
        for j0 in range(0, N, W * per_block):
            nv = min(per_block, (N - j0) // W)
            # two chains: even k and odd k (allocas: LLVM keeps them in registers)
            chains = [[cgutils.alloca_once_value(builder, zero) for _ in range(nv)]
                      for _ in range(2)]
            with cgutils.for_range_slice(builder, const(0), const(K - K % 2),
                                         const(2)) as (kk, _):
                step(kk, chains[0], j0)
                step(builder.add(kk, const(1)), chains[1], j0)
            if K % 2:
                step(const(K - 1), chains[0], j0)
            for v in range(nv):
                s = builder.fadd(builder.load(chains[0][v]), builder.load(chains[1][v]))
                builder.store(s, at(od, const(j0 + v * W)), align=width)
        return context.get_dummy_value()
    return types.none(wt, x, out, n, k), codegen


def emit(cg: ArrayCodegen, ins: Instruction, name: str, lc: int, rc: int) -> bool:
    """The dot as matvec_t over the transposed matrix, when it is a matrix (contracted
    along its rows) times a vector and the matrix is a constant or a leaf the body passes
    on unchanged (module docstring); else False."""
    lhs, rhs = ins.operands
    t = ins.shape.element_type
    if t not in ("f32", "f64") or lhs.shape.rank != 2 or rhs.shape.rank != 1 or lc != 1:
        return False
    m, k = (int(d) for d in lhs.shape.dims)
    if m * k > MAX_ELEMENTS or _lanes(m, 4 if t == "f32" else 8) == 0:
        return False
    w, x = cg.names[id(lhs)], cg.names[id(rhs)]
    if w in cg.consts and cg.consts[w].size == m * k:
        wt = f"{w}T"
        cg.consts[wt] = np.ascontiguousarray(cg.consts[w].reshape(m, k).T).reshape(-1)
    elif w.startswith("p") and w[1:].isdigit() and int(w[1:]) in cg.invariant:
        wt = f"{w}T"
        if wt not in cg.buffers:  # (two dots of one matrix share its transpose)
            cg._alloc(ins, wt)
            cg.buffers[wt] = (m * k, cg.buffers[wt][1])
            buf = f"{cg.prefix}_{wt}"  # its name in `run` (compiled_while._run_source)
            cg.hoisted += [f"for i in range({m}):", f"    for c in range({k}):",
                           f"        {buf}[c * {m} + i] = {w}[i * {k} + c]"]
    else:
        return False
    if not any(p.startswith("from xlaplug.backends.cpu.loop_matvec") for p in cg.pieces):
        cg.pieces.insert(0, "from xlaplug.backends.cpu.loop_matvec import matvec_t as "
                            f"_matvec_t  # {_DIGEST}\n")
    cg._alloc(ins, name)
    cg.lines.append(f"_matvec_t({wt}, {x}, {name}, {m}, {k})")
    return True
