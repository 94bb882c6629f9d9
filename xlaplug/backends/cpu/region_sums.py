"""The reduces of a small region (region_code.py) in the unfused kernel's order.

loop_sums.py folds every reduce in row-major order from init (the HloEvaluator's order, and
the unfused kernel's for most reducers), but the unfused kernel (cpu/reductions.py) runs a
plain add / multiply / maximum / minimum with its identity as init as a numpy reduction, and
a region must give the interpreter's bits, so it follows numpy's iterator.  On a C-contiguous
array numpy drops dimensions of size 1, merges neighbours of the same kind (reduced or kept)
and walks the merged dimensions in row-major order, the last one innermost:

  * innermost reduced (a row sum; `numpy_order` tells this case): each row of K elements
    folds as row_folds.fast_fold does for row fusions (add: numpy's pairwise sum), onto the
    output element -- which starts at the identity, numpy's initial value;
  * innermost kept (a column sum: batch-norm statistics, a bias gradient): numpy adds rows
    in sequence, out[j] = out[j] + x[i, j] from out = 0 -- each add as under the kernel's
    FTZ / DAZ (a subnormal operand or sum is a signed zero); add only: a product under FTZ
    rounds first, and numpy's maximum in vector lanes picks between zeros its own way.

Every other reduce is loop_sums' fold, the unfused kernel's order.  Dots are not expressed
unless the pass's `sums` option asks (loop_sums: vector lanes or numba's BLAS, not numpy's).
RegionCodegen also takes gathers and scatters (region_gather.py), and writes two things its
own way for speed, with the same values: a select's array operands loaded before it, and a
broadcast into consecutive dimensions as a tile loop (see their methods).
"""
from __future__ import annotations

import numpy as np

from ...hlo.ir import Instruction
from ..common.scalar_codegen import ScalarCompileError
from . import comp_patterns as P
from . import loop_sums
from .jit_drivers import numba_dtype
from .loop_codegen import ArrayCodegen, Unsupported
from .region_gather import emit_gather, emit_scatter
from .row_folds import fast_fold


class RegionCodegen(ArrayCodegen):
    """ArrayCodegen with the unfused kernels' sums (module docstring); `sums`: loop_sums'
    own (faster, other bits)."""

    def __init__(self, consts: dict, prefix: str, sums: bool = False):
        super().__init__(consts, prefix)
        self.sums = sums
        self.flushers: set[str] = set()

    def emit(self, ins: Instruction, name: str) -> str:
        if not self.sums and ins.opcode == "dot":
            raise Unsupported("a dot (numpy's BLAS in the interpreter)")
        if ins.opcode in ("gather", "scatter"):
            self._flush()
            (emit_gather if ins.opcode == "gather" else emit_scatter)(self, ins, name)
            return name
        if ins.opcode == "broadcast" and self._block_broadcast(ins, name):
            return name
        if not self.sums and ins.opcode == "reduce":
            self._flush()
            numpy_reduce(self, ins, name)
            return name
        return super().emit(ins, name)

    def _block_broadcast(self, ins: Instruction, name: str) -> bool:
        """A broadcast whose operand fills consecutive result dimensions in order (a bias
        along the last: [outer, p, inner] with inner 1) as a tile loop whose innermost trip
        count LLVM cannot fold: loop_emitters' nest of constant loops is unrolled, not
        vectorized (f32[16] -> f32[8,16,16,16]: 8.5 us, 1.3 here); the same values."""
        x = ins.operands[0]
        dims = [int(d) for d in ins.attrs.get("dimensions", ())]
        p = x.shape.num_elements()
        if p <= 1 or not dims or dims != list(range(dims[0], dims[0] + len(dims))):
            return False
        out = [int(d) for d in ins.shape.dims]
        outer = int(np.prod(out[:dims[0]], dtype=np.int64))
        inner = int(np.prod(out[dims[-1] + 1:], dtype=np.int64))
        self._flush()
        self._alloc(ins, name)
        src = self.names[id(x)]
        if inner == 1:
            body = [f"for m in range(min({p}, len({src}))):", f"    {name}[q * {p} + m] = {src}[m]"]
        else:
            body = [f"for m in range({p}):", f"    for t in range(min({inner}, len({name}))):",
                    f"        {name}[(q * {p} + m) * {inner} + t] = {src}[m]"]
        self.lines.append(f"for q in range({outer}):")
        self.lines += ["    " + ln for ln in body]
        if src in self.clean:
            self.clean.add(name)
        return True

    def _elementwise(self, ins: Instruction, name: str) -> None:
        """A select's array operands are loaded before it: `a[o] if c else b[o]` is a branch
        and a load per element, which LLVM neither vectorizes nor predicts (a relu
        gradient's select on f32[8,16,16,16]: 180 us, ~15 loaded first); the same values."""
        if ins.opcode != "select":
            super()._elementwise(ins, name)
            return
        n = ins.shape.num_elements()
        self._open(n)
        refs = {}
        for k, o in enumerate(ins.operands):
            r = self._ref(o, n)
            if r.endswith("[o]"):
                self._loop_lines.append(f"l{k}_{name} = {r}")
                r = f"l{k}_{name}"
            refs[id(o)] = r
        try:
            expr = self.g.expr(ins, refs)
        except ScalarCompileError as e:
            raise Unsupported(str(e)) from None
        self._element(ins, name, expr)

    def flusher(self, t: str) -> str:
        """The name of a function flushing a subnormal `t` (f32 / f64) to a signed 0, as the
        kernel's FTZ / DAZ do, made once: as _xftz32 / _xftz64, but in one test, which LLVM
        turns into a select (their `x != 0 and ...` leaves a column sum's loop scalar).
        NaN * 0 is the NaN."""
        if t not in ("f32", "f64"):
            raise Unsupported(f"a numpy sum of {t}")
        name = f"{self.prefix}_ftz{t}"
        if name not in self.flushers:
            ct = "np.float32" if t == "f32" else "np.float64"
            tiny = f"{ct}({float(np.finfo(ct[3:]).tiny)!r})"
            self.pieces.append(f"@register_jitable\ndef {name}(x):\n"
                               f"    return x if abs(x) >= {tiny} else x * {ct}(0)\n")
            self.flushers.add(name)
        return name


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


ROWS = 8  # rows a column sum adds while holding its partial sums in registers


def numpy_order(dims, red) -> list[tuple[bool, int]]:
    """numpy's loop nest for a reduce over dimensions `red` of a C-contiguous array of
    `dims`, outermost first: (reduced?, size) per merged dimension (module docstring)."""
    out: list[tuple[bool, int]] = []
    for d, n in enumerate(dims):
        if n == 1:
            continue
        if out and out[-1][0] == (d in red):
            out[-1] = (out[-1][0], out[-1][1] * n)
        else:
            out.append((d in red, n))
    return out


def numpy_reduce(cg: RegionCodegen, ins: Instruction, name: str) -> None:
    if len(ins.operands) != 2:
        raise Unsupported("a variadic reduce")
    op = fast_op(ins)
    if op is None:
        loop_sums.EMITTERS["reduce"](cg, ins, name)  # the reducer's fold, as unfused
        return
    x, init = ins.operands
    red = {int(d) for d in ins.attrs.get("dimensions", ())}
    if 0 in (int(d) for d in x.shape.dims):
        raise Unsupported("an empty reduction")
    nest = numpy_order([int(d) for d in x.shape.dims], red)
    m = ins.shape.num_elements()
    cg._alloc(ins, name)
    # Every partial sum (product, max) is flushed: the result holds no subnormal, and the
    # elements of a clean operand load as they are (loop_daz.py).
    cg.clean.add(name)
    if not any(r for r, _ in nest[:-1]) and nest and nest[-1][0]:
        _rows(cg, ins, op, name, nest[-1][1], m, f"{cg.names[id(init)]}[0]", [])
        return
    if op != "add" and not (nest and nest[-1][0]):
        raise Unsupported(f"a numpy {op} over leading dimensions")
    cg.lines.append(f"{name}[:] = {cg.names[id(init)]}[0]")  # the identity: numpy's initial
    if not nest or not nest[-1][0]:   # innermost kept (or nothing to reduce): rows in order
        inner = nest[-1][1] if nest else 1
        outer = nest[:-1]
        xs, os = _bases(outer, inner, inner)
        f = cg.flusher(ins.shape.element_type)
        o, v = f"{name}[{os} + jk]", cg.names[id(x)]
        ld = "" if v in cg.clean else f
        # The trip count, len(out) at most, is not a constant to LLVM: a short constant loop
        # is unrolled, not vectorized (a column sum of f32[2048,16]: 24 us against 10).
        # Rows ROWS at a time, each column's sum held across them in a register (the same
        # adds in the same order): 12 -> 7 us.
        step = [f"for jk in range(min({inner}, len({name}))):",
                f"    {o} = {f}({o} + {ld}({v}[{xs} + jk]))"]
        if not outer or outer[-1][1] < 2 * ROWS:
            cg._nest([n for _, n in outer], step, "g")
            return
        last, nr = len(outer) - 1, outer[-1][1]
        xu = xs.replace(f"g{last} * ", f"(g{last} + u) * ")
        body = [f"for g{last} in range(0, {nr - nr % ROWS}, {ROWS}):",
                f"    for jk in range(min({inner}, len({name}))):", f"        a = {o}",
                f"        for u in range({ROWS}):",
                f"            a = {f}(a + {ld}({v}[{xu} + jk]))", f"        {o} = a",
                f"for g{last} in range({nr - nr % ROWS}, {nr}):"] + ["    " + ln for ln in step]
        cg._nest([n for _, n in outer[:-1]], body, "g")
        return
    outer, k = nest[:-1], nest[-1][1]
    xs, os = _bases(outer, k, 1)
    _rows(cg, ins, op, name, k, None, f"{name}[{os}]", outer, xs, os)


def _bases(outer, inner: int, kept: int) -> tuple[str, str]:
    """Index expressions over g0.. (the outer loops): the x element where the inner run of
    `inner` elements starts, and the output element where its `kept` results start."""
    xs, os, xstride, ostride = [], [], inner, kept
    for d in reversed(range(len(outer))):
        red, n = outer[d]
        xs.append(f"g{d} * {xstride}")
        xstride *= n
        if not red:
            os.append(f"g{d} * {ostride}")
            ostride *= n
    return " + ".join(xs) or "0", " + ".join(os) or "0"


def _rows(cg: RegionCodegen, ins: Instruction, op: str, name: str, k: int, m: int | None,
          init_v: str, outer, xs: str = "", os: str = "") -> None:
    """Rows of k contiguous elements folded as numpy's inner loop folds them (fast_fold),
    onto `init_v`: either m rows, row mr into element mr, or one row per iteration of the
    `outer` loops (g0..), starting at element xs of x, into element os."""
    x = ins.operands[0]
    j = f"{len(cg.pieces)}_{len(cg.lines)}"
    ct = "np." + numba_dtype(ins.shape.dtype).name
    # One row: the array itself (a slice of it, a view, costs numba ~10 ns of reference
    # counting: 6% of a scan step's f32[64] sum, 2026-12-06).
    buf = cg.names[id(x)] if m == 1 else "rowb"
    lines, allocs, consts = fast_fold(op, buf, k, init_v, "res", ct, j, "",
                                      cg.flusher(ins.shape.element_type),
                                      cg.names[id(x)] not in cg.clean)
    # fast_fold's module constants and scratch get names unique to this reduce.
    cg.consts.update(consts)
    cg.lines += allocs
    if m == 1:
        cg.lines += [*lines, f"{name}[0] = res"]
        return
    if m is not None:
        cg.lines.append(f"for mr in range({m}):")
        cg.lines += ["    " + ln for ln in [f"rowb = {cg.names[id(x)]}[mr * {k}:(mr + 1) * {k}]",
                                            *lines, f"{name}[mr] = res"]]
        return
    body = [f"rowb = {cg.names[id(x)]}[{xs}:{xs} + {k}]", *lines, f"{name}[{os}] = res"]
    cg._nest([n for _, n in outer], body, "g")
