"""Numba source for a loop computation (a while condition or body) over flat arrays.

compiled_while.py compiles a `while` whose condition and body this module can express.
Every value is a flat numba array of its element type's compute dtype, in row-major order;
shapes are static, so each instruction becomes a loop nest with constant bounds and strides:

    for j0 in range(3):                    # v7 = f32[3,4] transpose(v3), dimensions={1,0}
        for j1 in range(4):
            v7[j0 * 4 + j1] = v3[j1 * 3 + j0]

Nothing is allocated per iteration: a value is written into a buffer the function takes as an
argument after the state leaves (`buffers`: name -> (size, dtype); compiled_while.py
allocates them once per loop run) -- or, an element loop's value that nothing reads after
its loop, into none: it stays in a register; a slice or broadcast only elementwise ops read,
into none either: they read its operand in place (loop_views.py).  An element loop calling
a transcendental runs in a function of its own, where it vectorizes
(loop_emitters.outline); other emitted code goes before the pending element loop unless it
reads that loop's values.  The body returns
nothing: `returned` names each leaf's new value (a buffer, a leaf, a constant), which
compiled_while.py moves into the state.  A dynamic-update-slice of a state leaf that nothing
else reads and that the body returns in the same place writes into that leaf (`owned`), as
XLA updates a loop's buffer in place -- the scan's output rows (loop_emitters.py).  A matrix
the body never changes times a vector is vector code over the matrix transposed once per
run (loop_matvec.py: `invariant` leaves, `hoisted` lines of `run`); another dot of rows
contracted along their contiguous dimension sums each row in vector lanes; a small f32 dot
is a tiled loop where that gives BLAS's bits (tile_dot.py);
another of at least BLAS_MIN_MACS multiply-adds on f32/f64 calls BLAS (loop_sums.py).

Expressed: the state (an array or a flat tuple of arrays, read by get-tuple-element),
constants, fusions and calls (their computations inlined), elementwise ops (the SCALAR_OPS
templates, so the per-op kernels' semantics), broadcast, reshape/copy, slice, transpose,
concatenate, iota, dynamic-slice and dynamic-update-slice (signed indices, clamped as XLA
clamps), reduce with a scalar reducer (folded in row-major order of the reduced dimensions,
as the HloEvaluator does), and dot on f32/f64 (accumulated in the result type: in vector
lanes, by BLAS as the interpreter's dot kernel, or in contraction order; XLA:CPU's own dots
sum in the order of their tiles).  Anything else raises Unsupported and the loop stays
interpreted.
"""
from __future__ import annotations

import numpy as np

from ...hlo.ir import Computation, Instruction
from .jit_drivers import numba_array, numba_dtype
from ..common.fusion_contents import LOOP_OPS
from ..common.scalar_codegen import ScalarCompileError, ScalarGen
from . import loop_daz, loop_emitters, loop_matvec, loop_sums, loop_views
from .loop_elements import ElementLoops
from .loop_index import Unsupported, _dims, _lin


class ArrayCodegen(ElementLoops):
    """Source of one computation taking the state leaves p0..pk (see the module docstring).
    Constants go into `consts` and reducers' source into `pieces`, under names starting with
    `prefix` (jit_cache.py assembles the module)."""

    def __init__(self, consts: dict, prefix: str):
        self.consts, self.prefix = consts, prefix
        self.pieces: list[str] = []
        self.g = ScalarGen()
        self.g.elementwise, self.g.fma = True, False
        self.lines: list[str] = []
        self.names: dict[int, str] = {}
        self.buffers: dict[str, tuple[int, str]] = {}   # argument name -> (size, dtype)
        self.returned: list[str] = []                   # the body's results, by leaf
        self.owned: set[int] = set()                    # leaves updated in place
        self._in_place: dict[int, int] = {}             # id(dynamic-update-slice) -> leaf
        self.clean: set[str] = set()                    # values with no subnormal (loop_daz)
        self.invariant: set[int] = set()                # leaves the body passes on unchanged
        self.hoisted: list[str] = []                    # `run`'s lines before the loop
        self._init_loops()

    # ---- the function ---------------------------------------------------------------------

    def function(self, comp: Computation, fname: str, leaves: int, returns_leaves: bool) -> str:
        if len(comp.parameters) != 1:
            raise Unsupported("a loop computation takes one parameter")
        param = comp.parameters[0]
        if param.shape.is_array:
            self.names[id(param)] = "p0"
        if returns_leaves:
            self._find_in_place(comp)
            self.invariant = loop_matvec.passed_through(comp)
        self._view_ids = loop_views.find_views(comp)
        for k, ins in enumerate(comp.instructions):
            if ins.opcode == "parameter":
                continue
            if ins.opcode == "tuple":
                if ins is not comp.root:
                    raise Unsupported("a tuple that is not the root")
                continue
            if ins.opcode == "get-tuple-element":
                if ins.operands[0] is not param or not ins.shape.is_array:
                    raise Unsupported("get-tuple-element of something but the state")
                self.names[id(ins)] = f"p{int(ins.attrs['index'])}"
                continue
            if not ins.shape.is_array:
                raise Unsupported(f"'{ins.opcode}' with a tuple result")
            self.names[id(ins)] = self.emit(ins, f"v{k}")
        return self._finish(comp, fname, leaves, returns_leaves)

    def _find_in_place(self, comp: Computation) -> None:
        """Dynamic-update-slices of a state leaf i that only they read, returned as leaf i."""
        root = comp.root
        if root.opcode != "tuple":
            return
        readers: dict[int, list] = {}
        for ins in comp.instructions:
            for o in ins.operands:
                if o.opcode == "get-tuple-element" and o.operands[0] is comp.parameters[0]:
                    readers.setdefault(int(o.attrs["index"]), []).append(ins)
        for i, out in enumerate(root.operands):
            x = out.operands[0] if out.opcode == "dynamic-update-slice" else None
            if x is not None and x.opcode == "get-tuple-element" \
                    and x.operands[0] is comp.parameters[0] and int(x.attrs["index"]) == i \
                    and [r is out for r in readers.get(i, [])] == [True] \
                    and sum(o is x for o in out.operands) == 1 \
                    and sum(o is out for o in root.operands) == 1:
                self._in_place[id(out)] = i

    def _finish(self, comp, fname, leaves, returns_leaves) -> str:
        self._flush()
        root = comp.root
        if returns_leaves:
            outs = root.operands if root.opcode == "tuple" else [root]
            if len(outs) != leaves or any(id(o) not in self.names for o in outs):
                raise Unsupported("the body does not return the state's leaves")
            # The results stay where the body wrote them (a buffer, a leaf, a constant):
            # compiled_while.py moves them into the state after the call.
            self.returned = [self.names[id(o)] for o in outs]
            self.lines.append("return")
        else:
            if root.shape.element_type != "pred" or id(root) not in self.names:
                raise Unsupported("the condition is not a computed pred")
            self.lines.append(f"return {self.names[id(root)]}[0]")
        self._drop_dead_stores(set(self.returned))
        self.lines = loop_emitters.outline(self.lines, self.pieces, self.prefix)
        args = ", ".join([f"p{j}" for j in range(leaves)] + list(self.buffers))
        return f"def {fname}({args}):\n" + "".join(f"    {ln}\n" for ln in self.lines)

    # ---- instructions ---------------------------------------------------------------------

    def emit(self, ins: Instruction, name: str) -> str:
        op = ins.opcode
        if op == "constant":
            return self._constant(ins)
        if op in ("fusion", "call"):
            callee = ins.attrs.get("calls") or ins.attrs.get("to_apply")
            callee = callee[0] if isinstance(callee, list) else callee
            return self._inline(callee, [self.names[id(o)] for o in ins.operands], name,
                                fusion=op == "fusion")
        if id(ins) in self._view_ids:
            return self._view(ins, name)
        if op in ("reshape", "copy") and ins.operands[0].shape.num_elements() == \
                ins.shape.num_elements():
            return self.names[id(ins.operands[0])]  # row-major order is unchanged
        if op == "broadcast" and ins.operands[0].shape.num_elements() == 1:
            n = ins.shape.num_elements()
            self._open(n)
            self._element(ins, name, self._ref(ins.operands[0], n))
            return name
        emitter = _EMITTERS.get(op)
        if emitter is not None:
            # Its code goes before the pending element loop, unless it reads that loop's
            # values or writes a state leaf in place (the loop may read it).
            if id(ins) in self._in_place or \
                    any(self.names.get(id(o)) in self._loop_vars for o in ins.operands):
                self._flush()
            out = emitter(self, ins, name) or name
            if op in loop_daz.MOVES and loop_daz.operands_clean(self, ins):
                self.clean.add(out)
            return out
        if op in LOOP_OPS:
            self._elementwise(ins, name)
            return name
        raise Unsupported(f"'{op}' (instruction '{ins.name}')")

    def _inline(self, comp: Computation, args: list[str], tag: str, fusion: bool = False) -> str:
        """A fusion's or call's computation, emitted in place (XLA wraps a loop condition's
        compare in a fusion); returns the name of its root's value.  In a fusion's body the
        multiply-adds XLA contracts are FMAs, as the fusion kernel computes them
        (cpu/fused_loop.py) -- the iterations run before the loop compiles included."""
        if any(not p.shape.is_array for p in comp.parameters) or not comp.root.shape.is_array:
            raise Unsupported(f"computation '{comp.name}' takes or returns a tuple")
        for p in comp.parameters:
            self.names[id(p)] = args[p.parameter_number]
        contract, fused = {}, set()
        if fusion:
            users: dict[int, int] = {}
            for ins in comp.instructions:
                for o in ins.operands:
                    users[id(o)] = users.get(id(o), 0) + 1
            contract = ScalarGen._contractions(comp.instructions, users, comp, True)
            fused = {id(x) for m, _, via in contract.values() for x in (m, *via)}
        for k, ins in enumerate(comp.instructions):
            if ins.opcode == "parameter" or id(ins) in fused:
                continue  # (a contracted multiply, and reshapes after it: its add has them)
            if id(ins) in contract:
                self._fma(ins, *contract[id(ins)][:2], f"{tag}_{k}")
                self.names[id(ins)] = f"{tag}_{k}"
            else:
                self.names[id(ins)] = self.emit(ins, f"{tag}_{k}")
        return self.names[id(comp.root)]

    def _fma(self, ins: Instruction, m: Instruction, k: int, name: str) -> None:
        """add/subtract `ins` with its multiply operand `m` (operand k) contracted."""
        n = ins.shape.num_elements()
        self._open(n)
        refs = {id(o): self._ref(o, n) for o in (*m.operands, ins.operands[1 - k])}
        self._element(ins, name, ScalarGen._fma_expr(ins, m, k, refs))

    def _alloc(self, ins: Instruction, name: str) -> None:
        """`name` is a buffer argument of the function (see the module docstring)."""
        self.buffers[name] = (ins.shape.num_elements(), "np." + numba_dtype(ins.shape.dtype).name)

    def _nest(self, dims, body: list[str], var: str = "j") -> None:
        """Loops over `dims` (index variables var0..) around `body` lines."""
        for d, n in enumerate(dims):
            self.lines.append("    " * d + f"for {var}{d} in range({n}):")
        pad = "    " * len(dims)
        self.lines.extend(pad + ln for ln in body)

    def _constant(self, ins: Instruction) -> str:
        if ins.literal_elided or ins.literal is None:
            raise Unsupported(f"constant '{ins.name}' has no literal")
        name = f"{self.prefix}K{len(self.consts)}"
        self.consts[name] = np.ascontiguousarray(numba_array(ins.literal)).reshape(-1)
        if loop_daz.constant_clean(self.consts[name]):
            self.clean.add(name)
        return name

    def _elementwise(self, ins: Instruction, name: str) -> None:
        n = ins.shape.num_elements()
        self._open(n)
        refs = {id(o): self._ref(o, n) for o in ins.operands}
        try:
            expr = self.g.expr(ins, refs)
        except ScalarCompileError as e:
            raise Unsupported(str(e)) from None
        self._element(ins, name, expr)

    def _mapped(self, ins: Instruction, name: str, source: str) -> None:
        """out[j...] = `source` (an expression over the index variables j0..)."""
        dims = _dims(ins)
        self._alloc(ins, name)
        idx = [f"j{d}" for d in range(len(dims))]
        self._nest(dims, [f"{name}[{_lin(idx, dims)}] = {source}"])

    def _operand(self, ins: Instruction, k: int, idx: list[str]) -> str:
        o = ins.operands[k]
        return f"{self.names[id(o)]}[{_lin(idx, o.shape.dims)}]"

    def _start_indices(self, ins: Instruction, first: int, limits) -> list[str]:
        """Clamped start indices (XLA: into [0, dim - size]), from rank-0 index operands."""
        ops = ins.operands[first:]
        if len(ops) != len(limits) or any(o.shape.rank != 0 for o in ops):
            raise Unsupported(f"'{ins.opcode}' with a vector of start indices")
        if any(o.shape.element_type in ("u64",) for o in ops):
            raise Unsupported(f"'{ins.opcode}' with u64 start indices")
        out = []
        for d, (o, hi) in enumerate(zip(ops, limits)):
            v = f"st{d}_{len(self.lines)}"
            self.lines.append(f"{v} = min(max(np.int64({self.names[id(o)]}[0]), 0), {hi})")
            out.append(v)
        return out


_EMITTERS = {**loop_emitters.EMITTERS, **loop_sums.EMITTERS}

__all__ = ["ArrayCodegen", "Unsupported"]
