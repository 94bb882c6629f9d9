"""A row fusion (common/row_contents.py: reduces over trailing dimensions with their
elementwise producers and consumers -- ours from passes/reduce_fusion.py, or XLA's kInput,
kLoop and `__ynn_fusion` bodies) as one compiled loop over blocks of rows:

    def RB_rows(m0, m1, o0, p0):            # softmax over rows of 1024
        t1 = np.empty(1024, np.float32)     # scratch: once per block of rows
        for m in range(m0, m1):
            x0 = p0[base:base + 1024]       # the row's slices (base = m * 1024)
            <max of x0: 8 lanes>            # pass 1 reads x (in place)
            for k in range(1024):           # pass 2: exp(x - max) into the row buffer...
                t1[k] = <exp(x0[k] - red0)>
            <pairwise sum of t1>            # ...and its sum, as numpy orders it
            for k in range(1024):           # pass 3: the output, from the buffer
                q0[k] = <t1[k] / red1>
    def rowloop(o0, p0):
        for b in prange(128):               # numba's threads take blocks of 32 rows
            RB_rows(b * 32, min((b + 1) * 32, 4096), o0, p0)

Each reduce is a loop over its row filling a row buffer (its full-level producers inline;
a parameter's row is read in place), then its fold; row-level ops run once per row; full
outputs are written by one last loop, which reads a value from a reduce's buffer instead of
computing it again.  A row of a few KiB stays in cache: memory is read once and written
once, and no f32[M,K] temporary exists.  Indexing a row's slice by the loop variable is
what lets LLVM vectorize (indexing the whole array at m*K + k in a prange body, numba's
negative-index checks kept every loop scalar: 10x slower).

The folds are the unfused kernel's (cpu/reductions.py), so fusing changes no bits: where
it takes its numpy fast path, numpy's order (row_folds.py: pairwise sums); every other
reducer folds in row-major order from init (the HloEvaluator's order, the unfused compiled
fold's).  Scalar semantics are the SCALAR_OPS templates, with XLA's multiply-add
contraction inside the fusion (as cpu/fused_loop.py).
"""
from __future__ import annotations

import re

from ...hlo.ir import Computation, Instruction
from ..common.fusion_contents import index_step, param_index_map
from ..common.row_contents import FULL, ROW, postorder, row_broadcast
from ..common.scalar_codegen import ScalarGen
from . import comp_patterns as P
from .bf16_convert import is_bf16
from .jit_cache import cached_function, scalar_piece
from .jit_drivers import numba_dtype
from .row_flush import note, note_constant, strip
from . import hardware_flush
from .pairwise_vector import IMPORT
from .row_folds import fast_fold


RE_I = re.compile(r"\bi\b")  # the loop index in param_index_map's expressions


class RowLoopGen:
    """Source of `rowloop(o0.., p0..)` for a row fusion (M rows of K; levels from
    row_contents.row_shape); `consts` and reducer `pieces` go into the module with it."""

    def __init__(self, comp: Computation, m: int, k: int, levels: dict,
                 identity_params: frozenset = frozenset()):
        self.comp, self.m, self.k, self.levels = comp, m, k, levels
        self.identity_params = identity_params  # scalar parameters holding their reduce's identity
        # Blocks of rows under the MXCSR's FTZ and DAZ (hardware_flush.py); its prelude is
        # the module's first piece.
        self.hardware = hardware_flush.eligible(comp)
        self.pieces: list[str] = [hardware_flush.PRELUDE] if self.hardware else []
        self.order = postorder(comp)
        self.g = ScalarGen()
        self.g.elementwise = True
        users: dict[int, int] = {}
        for ins in self.order:
            for o in ins.operands:
                users[id(o)] = users.get(id(o), 0) + 1
        self.contract = ScalarGen._contractions(self.order, users, comp, True)
        self.fused = {id(x) for mul, _, via in self.contract.values() for x in (mul, *via)}
        self.consts: dict = {}
        self.row_names: dict[int, str] = {}
        # Full values a reduce's loop left in its row buffer: later loops read them there
        # (softmax's output reads exp(x - max) from the sum's buffer, not computing it again).
        self.buffered: dict[int, str] = {}
        self.allocs: list[str] = []  # scratch arrays, allocated once per block of rows
        self.block = 0  # rows per block (0: up to 32, at least 32 blocks)
        self.n_tmp = 0
        # (param, index map) -> (its per-row name, the read that sets it at each row's base)
        self.row_reads: dict[tuple[int, str], tuple[str, str]] = {}
        self.bits = {p.parameter_number for p in comp.parameters if is_bf16(p.shape.dtype)}
        self.clean: set[str] = set()  # names of values that hold no subnormal (row_flush.py)

    # ---- names and expressions --------------------------------------------------------

    def _load(self, n: int, read: str) -> str:
        """A read of parameter n as a value: a bf16 one is read as its bits and widened here
        (jit_drivers.loop_storage)."""
        return f"_xbf16_load({read})" if n in self.bits else read

    def _param(self, p: Instruction, full: bool) -> str:
        n, pn = p.shape.num_elements(), p.parameter_number
        if full and n == self.m * self.k:
            return self._load(pn, f"x{pn}[k]")   # its row's slice (see `source`)
        return self._load(pn, f"p{pn}[{'m' if n == self.m and n > 1 else '0'}]")

    def _const(self, ins: Instruction) -> str:
        name = "R" + self.g.const(ins)[1:]   # _K3 -> RK3
        self.consts[name] = self.g.consts[int(name[2:])]
        note_constant(name, self.consts[name], self.clean)
        return name

    def _value(self, ins: Instruction, names: dict, full: bool) -> str | None:
        """The expression (a name, or a parameter read) of a value with no code of its own:
        parameters, constants, broadcasts and reshapes; None when it needs a line."""
        op = ins.opcode
        if op == "parameter":
            return self._param(ins, full)
        if op == "constant":
            return self._const(ins)
        if op == "broadcast":
            src = ins.operands[0]
            if full and src.shape.num_elements() != 1 and not (
                    self.levels.get(id(src)) == ROW and row_broadcast(ins, self.m)):
                if _column_broadcast(ins, self.k):  # (a layernorm's scale and offset)
                    return self._load(src.parameter_number, f"p{src.parameter_number}[k]")
                return self._broadcast_read(src.parameter_number, param_index_map(ins))
            return names[id(src)]
        if op in ("reshape", "copy", "bitcast"):  # (row_contents accepts plain bitcasts only)
            return names[id(ins.operands[0])]
        return None

    def _broadcast_read(self, n: int, expr: str) -> str:
        """Parameter n read through a broadcast's index map at element base + k: where the
        index is affine in k within a row, a per-row slice (or value) read at k, so the loop
        vectorizes (the softmax's causal mask, pred[128,128] under [8,4,128,128], read at
        `((i // 128) % 128) * 128 + i % 128`, kept its loop scalar: 2.4 ms against 1.3 on one
        thread); else the map itself at base + k."""
        step = index_step(expr, self.k)
        at = re.sub(RE_I, "base", expr)
        if step == 0 or step == 1:
            name = f"y{n}_{len(self.row_reads)}"
            read = f"p{n}[{at}]" if step == 0 else f"p{n}[{at}:{at} + {self.k}]"
            name = self.row_reads.setdefault((n, expr), (name, f"{name} = {read}"))[0]
            return self._load(n, name if step == 0 else f"{name}[k]")
        if step is not None:
            return self._load(n, f"p{n}[({at}) + k * {step}]")
        return self._load(n, f"p{n}[{re.sub(RE_I, '(base + k)', expr)}]")

    def _line(self, ins: Instruction, names: dict, full: bool, out: list[str], pad: str):
        v = self._value(ins, names, full)
        if v is not None:
            names[id(ins)] = v
            return
        if id(ins) in self.contract:
            expr = ScalarGen._fma_expr(ins, *self.contract[id(ins)][:2], names)
        else:
            expr = self.g.expr(ins, names)
        self.n_tmp += 1
        name = f"{'e' if full else 'r'}{self.n_tmp}"
        expr = strip(expr, self.clean)
        note(name, expr, self.clean, ins, names)
        out.append(f"{pad}{name} = {expr}")
        names[id(ins)] = name

    def _full_body(self, targets: list[Instruction], pad: str) -> tuple[list[str], dict]:
        """Lines computing the full-level `targets` at element i (their full producers
        inline), and the names they end up under."""
        need: set[int] = set()
        stack = list(targets)
        while stack:
            v = stack.pop()
            if id(v) in need or self.levels.get(id(v)) != FULL or v.opcode == "parameter" \
                    or id(v) in self.buffered:
                continue
            need.add(id(v))
            if not (v.opcode == "broadcast" and self.levels.get(id(v.operands[0])) != FULL):
                stack.extend(v.operands)
        names = {**self.row_names, **self.buffered}
        lines: list[str] = []
        for ins in self.order:
            if ins.opcode == "parameter" and self.levels.get(id(ins)) == FULL:
                names[id(ins)] = self._param(ins, True)
            elif id(ins) in need and id(ins) not in self.fused:
                self._line(ins, names, True, lines, pad)
        return lines, names

    # ---- the reduction loops ----------------------------------------------------------

    def _fast(self, ins: Instruction) -> str | None:
        """The unfused kernel's numpy fast path this reduce takes (cpu/reductions.py: one
        binary op with its identity as init, not a narrow add or multiply): "add", "maximum",
        "minimum" or "multiply", folded as numpy folds them; None: the reducer's own fold."""
        x, init = ins.operands
        comp = ins.attrs["to_apply"]
        op = P.binary_op(comp)
        if op is None or P.ufunc_for(op, ins.shape.element_type, widened=True,
                                     xla_loop=True) is None:
            return None
        t = ins.shape.element_type
        if op not in ("add", "maximum", "minimum", "multiply") or t[0] not in "fb":
            return None
        if init.opcode == "constant":
            ok = P.is_identity(op, init.literal)
        else:  # a parameter: its value, given at run time (row_fusion.py)
            ok = init.opcode == "parameter" and init.parameter_number in self.identity_params
        return op if ok else None

    def _reduce(self, ins: Instruction, out: list[str], pad: str) -> str:
        """One reduce: its operand's row into a buffer (one vectorized loop over K, the
        producers inline; a parameter's row is read in place), then the fold."""
        x, init = ins.operands
        j = len(self.pieces)
        K = self.k
        ct = "np." + numba_dtype(ins.shape.dtype).name
        init_v, res = self.row_names[id(init)], f"red{j}"
        p2 = pad + "    "
        if x.opcode == "parameter" and x.parameter_number not in self.bits:
            buf = f"x{x.parameter_number}"
        else:
            buf = f"t{j}"
            body, names = self._full_body([x], p2)
            self.allocs.append(f"{buf} = np.empty({K}, {ct})")
            out += [f"{pad}for k in range({K}):", *body,
                    f"{p2}{buf}[k] = {names[id(x)]}"]
            self.buffered[id(x)] = f"{buf}[k]"
            if names[id(x)] in self.clean:
                self.clean.add(f"{buf}[k]")
        op = self._fast(ins)
        if op is not None:  # as the unfused kernel's numpy fast path folds
            lines, allocs, consts = fast_fold(op, buf, K, init_v, res, ct, j, pad, vector=True,
                                              daz=self.hardware)
            if any("_xpairwise(" in ln for ln in lines) and IMPORT not in self.pieces:
                self.pieces.append(IMPORT)
            out += lines
            self.allocs += allocs
            self.consts.update(consts)
        else:  # the reducer's fold in row-major order, from init (the HloEvaluator's)
            src, consts, rname = scalar_piece(ins.attrs["to_apply"], f"RR{j}")
            self.pieces.append(src)
            self.consts.update(consts)
            out += [f"{pad}{res} = {init_v}", f"{pad}for k in range({K}):",
                    f"{p2}{res} = {rname}({res}, {buf}[k])"]
        self.pieces.append("")  # (one piece per reduce: names stay apart)
        return res

    # ---- the function -----------------------------------------------------------------

    def source(self, parallel: bool) -> str:
        """`RB_rows(m0, m1, o.., p..)`, the work of rows m0..m1-1 (its scratch arrays
        allocated once for them all), and `rowloop(o.., p..)` calling it per block of rows
        (in parallel: numba's threads take blocks); see the module docstring."""
        comp = self.comp
        outs = comp.root.operands if comp.root.opcode == "tuple" else [comp.root]
        pad = "        "
        lines = [f"{pad}base = m * {self.k}"]
        lines += [f"{pad}x{p.parameter_number} = p{p.parameter_number}[base:base + {self.k}]"
                  for p in comp.parameters if self.levels.get(id(p)) == FULL]
        lines += [f"{pad}q{t} = o{t}[base:base + {self.k}]" for t, o in enumerate(outs)
                  if self.levels[id(o)] == FULL]
        for ins in self.order:
            if self.levels.get(id(ins)) != ROW or id(ins) in self.fused:
                continue
            if ins.opcode == "reduce":
                self.row_names[id(ins)] = self._reduce(ins, lines, pad)
            else:
                self._line(ins, self.row_names, False, lines, pad)
        full = [o for o in outs if self.levels[id(o)] == FULL]
        if full:
            body, names = self._full_body(full, pad + "    ")
            lines += [f"{pad}for k in range({self.k}):", *body]
            lines += [f"{pad}    q{t}[k] = {_store(o, names[id(o)])}"
                      for t, o in enumerate(outs) if self.levels[id(o)] == FULL]
        lines += [f"{pad}o{t}[m] = {_store(o, self.row_names[id(o)])}"
                  for t, o in enumerate(outs) if self.levels[id(o)] == ROW]
        lines[1:1] = [f"{pad}{read}" for _, read in self.row_reads.values()]
        args = ", ".join([f"o{t}" for t in range(len(outs))] +
                         [f"p{t}" for t in range(len(comp.parameters))])
        loop = "prange" if parallel else "range"
        block = self.block or max(1, min(32, self.m // 32))
        call = [f"        RB_rows(b * {block}, min((b + 1) * {block}, {self.m}), {args})\n"]
        if self.hardware:  # each block of rows under the MXCSR's FTZ and DAZ
            call = hardware_flush.wrap(call, "        ")
        return (f"def RB_rows(m0, m1, {args}):\n" + "".join(f"    {a}\n" for a in self.allocs)
                + "    for m in range(m0, m1):\n" + "\n".join(lines) + "\n"
                "RB_rows = register_jitable(RB_rows)\n\n"
                f"def rowloop({args}):\n"
                f"    for b in {loop}({-(-self.m // block)}):\n" + "".join(call))


def _store(o: Instruction, v: str) -> str:
    """Value v as output o's loop storage: a bf16 output's bits (jit_drivers.loop_storage)."""
    return f"_xbf16_store({v})" if is_bf16(o.shape.dtype) else v


def _column_broadcast(b: Instruction, k: int) -> bool:
    """Does broadcast `b` read its operand at k of element m*K + k (the operand's dims
    are b's trailing ones, in order, K elements)?"""
    src = b.operands[0]
    r, rb = src.shape.rank, b.shape.rank
    dims = [int(d) for d in b.attrs.get("dimensions", ())]
    return (src.shape.num_elements() == k and dims == list(range(rb - r, rb))
            and [int(d) for d in src.shape.dims] == [int(d) for d in b.shape.dims[rb - r:]])


def compile_row_loop(comp: Computation, m: int, k: int, levels: dict, parallel: bool,
                     identity_params: frozenset = frozenset()):
    """The compiled `rowloop` of a row fusion (cached on disk like fused loops)."""
    gen = RowLoopGen(comp, m, k, levels, identity_params)
    src = gen.source(parallel)
    fn = cached_function("\n".join(gen.pieces) + "\n" + src, gen.consts, "rowloop",
                         nogil=True, parallel=parallel, error_model="numpy")
    # the iterations of its (p)range, for team_size.Spread
    fn.iterations = -(-m // (gen.block or max(1, min(32, m // 32))))
    return fn

