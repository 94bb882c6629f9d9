"""Loop code (loop_codegen.py) of the ops that sum: reduce (folded in row-major order of the
reduced dimensions, as the HloEvaluator does; a plain f32/f64 sum runs its add chain
unflushed while no partial sum is subnormal) and dot on f32/f64 (a matrix the loop never
changes times a vector as vector code over its transpose, loop_matvec.py; another matrix
times a vector summed in vector lanes; a small f32 dot a tiled loop in BLAS's order,
tile_dot.py; from
BLAS_MIN_MACS multiply-adds BLAS, when scipy is installed; else a loop in contraction
order)."""
from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

import numpy as np

from ...hlo.ir import Computation, Instruction
from ..common.scalar_codegen import ScalarCompileError
from .jit_cache import scalar_piece
from . import loop_matvec, tile_dot
from .jit_drivers import numba_dtype
from .loop_index import Unsupported, _dims, _lin

if TYPE_CHECKING:
    from .loop_codegen import ArrayCodegen

# From this many multiply-adds a dot calls BLAS: a numba loop in contraction order takes
# ~0.6 ns a multiply-add (a dependent chain), a BLAS call ~0.25 us plus its work
# (f32[64,64] x f32[64]: 2.4 us as a loop, 0.39 us through np.dot; measured 2026-12-02).
BLAS_MIN_MACS = 512
_HAS_SCIPY = importlib.util.find_spec("scipy") is not None


def _reduce(cg: ArrayCodegen, ins: Instruction, name: str) -> None:
    if len(ins.operands) != 2:
        raise Unsupported("a variadic reduce")
    x, init = ins.operands
    try:
        src, consts, rname = scalar_piece(ins.attrs["to_apply"],
                                          f"{cg.prefix}R{len(cg.pieces)}")
    except ScalarCompileError as e:
        raise Unsupported(str(e)) from None
    cg.pieces.append(src)
    cg.consts.update(consts)
    red = sorted(int(d) for d in ins.attrs.get("dimensions", ()))
    kept = [d for d in range(x.shape.rank) if d not in red]
    out_dims = _dims(ins)
    cg._alloc(ins, name)
    src = [""] * x.shape.rank
    for j, d in enumerate(kept):
        src[d] = f"j{j}"
    for j, d in enumerate(red):
        src[d] = f"r{j}"
    elem = cg._operand(ins, 0, src)

    def fold(step: list[str]) -> list[str]:
        out = [f"acc = {cg.names[id(init)]}[0]"]
        for j, d in enumerate(red):
            out.append("    " * j + f"for r{j} in range({int(x.shape.dims[d])}):")
        return out + ["    " * len(red) + ln for ln in step]

    t = ins.shape.element_type
    if _plain_add(ins.attrs["to_apply"], t):
        # The reducer is ftz(ftz(acc) + ftz(x)).  Where no partial sum is subnormal, the
        # flush of the sum changes nothing, so the chain of adds runs without it (the test
        # is off the chain); the rare fold that meets one is redone step by step.
        ftz, ct = ("_xftz32", "np.float32") if t == "f32" else ("_xftz64", "np.float64")
        tiny = repr(float(np.finfo(np.float32 if t == "f32" else np.float64).tiny))
        loops = fold([f"acc = {ct}(acc + {ftz}({elem}))",
                      f"sub |= (acc != 0) & (abs(acc) < {tiny})"])
        loops[0:1] = [f"acc = {ftz}({cg.names[id(init)]}[0])", "sub = False"]
        loops += ["if sub:"] + ["    " + ln for ln in fold([f"acc = {rname}(acc, {elem})"])]
    else:
        loops = fold([f"acc = {rname}(acc, {elem})"])
    loops.append(f"{name}[{_lin([f'j{j}' for j in range(len(kept))], out_dims)}] = acc")
    cg._nest(out_dims, loops)


def _plain_add(comp: Computation, t: str) -> bool:
    """Whether a reducer is add(acc, x) of its two f32/f64 parameters (either order)."""
    ps = comp.parameters
    return t in ("f32", "f64") and len(ps) == 2 and comp.root.opcode == "add" \
        and {id(o) for o in comp.root.operands} == {id(p) for p in ps} \
        and all(p.shape.element_type == t and p.shape.rank == 0 for p in ps)


def _dot(cg: ArrayCodegen, ins: Instruction, name: str) -> None:
    lhs, rhs = ins.operands
    t = ins.shape.element_type
    if t not in ("f32", "f64") or {lhs.shape.element_type, rhs.shape.element_type} != {t}:
        raise Unsupported("dot other than f32/f64")
    a = ins.attrs
    lb, rb = list(a.get("lhs_batch_dims", ())), list(a.get("rhs_batch_dims", ()))
    lc, rc = list(a.get("lhs_contracting_dims", ())), list(a.get("rhs_contracting_dims", ()))
    lf = [d for d in range(lhs.shape.rank) if d not in lb and d not in lc]
    rf = [d for d in range(rhs.shape.rank) if d not in rb and d not in rc]
    out_dims = _dims(ins)
    if not lb and len(lc) == 1 and (loop_matvec.emit(cg, ins, name, lc[0], rc[0]) or
                                     _rows_dot(cg, ins, name, lc[0], rc[0]) or
                                     _tile_dot(cg, ins, name, lc[0], rc[0]) or
                                     _blas_dot(cg, ins, name, lc[0], rc[0])):
        return
    li, ri = [""] * lhs.shape.rank, [""] * rhs.shape.rank
    j = 0
    for x, y in zip(lb, rb):
        li[x] = ri[y] = f"j{j}"
        j += 1
    for d in lf:
        li[d] = f"j{j}"
        j += 1
    for d in rf:
        ri[d] = f"j{j}"
        j += 1
    for k, (x, y) in enumerate(zip(lc, rc)):
        li[x] = ri[y] = f"c{k}"
    ct = "np." + numba_dtype(ins.shape.dtype).name
    body = [f"acc = {ct}(0)"]
    for k, x in enumerate(lc):
        body.append("    " * k + f"for c{k} in range({int(lhs.shape.dims[x])}):")
    body.append("    " * len(lc) + f"acc = {ct}(acc + {ct}({cg._operand(ins, 0, li)} * "
                f"{cg._operand(ins, 1, ri)}))")
    body.append(f"{name}[{_lin([f'j{k}' for k in range(len(out_dims))], out_dims)}] = acc")
    cg._alloc(ins, name)
    cg._nest(out_dims, body)


def _rows_dot(cg: ArrayCodegen, ins: Instruction, name: str, lc: int, rc: int) -> bool:
    """A dot whose operands are rows contracted along their last (contiguous) dimension --
    a matrix times a vector, as in an RNN cell: each result a sum of products of two
    contiguous rows, in a function of its own compiled with reassociation allowed, so that
    LLVM sums each row in vector lanes (0.3 us for f32[64,64] x f32[64], against 0.48
    through BLAS and 2.4 in contraction order; measured 2026-12-02)."""
    lhs, rhs = ins.operands
    if lhs.shape.rank > 2 or rhs.shape.rank > 2 or lc != lhs.shape.rank - 1 \
            or rc != rhs.shape.rank - 1:
        return False
    k = int(lhs.shape.dims[lc])
    m = int(lhs.shape.dims[0]) if lhs.shape.rank == 2 else 1
    n = int(rhs.shape.dims[0]) if rhs.shape.rank == 2 else 1
    ct = "np." + numba_dtype(ins.shape.dtype).name
    fn = f"{cg.prefix}D{len(cg.pieces)}"
    cg.pieces.append("\n".join([
        "from xlaplug.backends.cpu.jit_options import callee_njit as _njit", f"def {fn}(a, b, out):",
        f"    for i in range({m}):", f"        for j in range({n}):",
        f"            acc = {ct}(0)", f"            for c in range({k}):",
        f"                acc += a[i * {k} + c] * b[j * {k} + c]",
        f"            out[i * {n} + j] = acc",
        f'{fn} = _njit(fastmath={{"reassoc"}}, nogil=True, error_model="numpy")({fn})', ""]))
    cg._alloc(ins, name)
    cg.lines.append(f"{fn}({cg.names[id(lhs)]}, {cg.names[id(rhs)]}, {name})")
    return True


def _tile_dot(cg: ArrayCodegen, ins: Instruction, name: str, lc: int, rc: int) -> bool:
    """A small f32 dot as a tiled loop in a function of its own, where its order is BLAS's
    (tile_dot.py: the interpreter's bits, faster than numba's BLAS call)."""
    lhs, rhs = ins.operands
    ld, rd = tuple(map(int, lhs.shape.dims)), tuple(map(int, rhs.shape.dims))
    form = tile_dot.tile_form(ld, rd, lc, rc)
    if ins.shape.element_type != "f32" or form is None:
        return False
    x_is_lhs, m, k, n, xi = form
    if m * k * n > tile_dot.TILE_MAX_MACS:
        return False
    chains = tile_dot.blas_chains(ld, rd, lc, rc)
    if chains is None:
        return False
    fn = f"{cg.prefix}T{len(cg.pieces)}"
    cg.pieces.append(tile_dot.tile_source(fn, m, k, n, xi, chains))
    cg._alloc(ins, name)
    args = [cg.names[id(lhs)], cg.names[id(rhs)], name]
    if not x_is_lhs:
        args[:2] = args[1::-1]
    if chains == 2:
        cg.buffers[f"{name}_odd"] = cg.buffers[name]
        args.append(f"{name}_odd")
    cg.lines.append(f"{fn}({', '.join(args)})")
    return True


def _blas_dot(cg: ArrayCodegen, ins: Instruction, name: str, lc: int, rc: int) -> bool:
    """np.dot of the operands as (M, K) / (K,) and (K, N) / (K,) views -- transposed views
    where the contracting dimension is the other one -- into the result's buffer; False
    (the loop then) for small dots, ranks above 2, or without scipy."""
    lhs, rhs = ins.operands
    if not _HAS_SCIPY or lhs.shape.rank > 2 or rhs.shape.rank > 2:
        return False
    k = int(lhs.shape.dims[lc])
    if k * ins.shape.num_elements() < BLAS_MIN_MACS:
        return False

    def view(x: Instruction, contracting: int, k_first: bool) -> str:
        v = cg.names[id(x)]
        if x.shape.rank == 1:
            return v
        d0, d1 = (int(n) for n in x.shape.dims)
        # (M, K) for the lhs, (K, N) for the rhs: as stored, or the transpose of it.
        return f"{v}.reshape({d0}, {d1})" + ("" if (contracting == 0) == k_first else ".T")

    a, b = view(lhs, lc, False), view(rhs, rc, True)
    cg._alloc(ins, name)
    if ins.shape.rank == 0:
        cg.lines.append(f"{name}[0] = np.dot({a}, {b})")
    else:
        cg.lines.append(f"np.dot({a}, {b}, {name}.reshape({', '.join(map(str, _dims(ins)))},))")
    return True


EMITTERS = {"reduce": _reduce, "dot": _dot}
