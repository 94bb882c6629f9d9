"""Python source for an HLO computation over scalars, from a scalar op table.

`ScalarGen(table)` turns a reducer (`add(p0, p1)`), a comparator (returning pred), a
variadic reducer (returning a tuple), a scatter combiner, a select-and-scatter `select`, a
map body, or -- `elementwise` -- a loop fusion's body into Python functions of one scalar per
parameter.  Each instruction is its table entry's expression (scalar_ops.SCALAR_OPS, or a
device's extension of it by dict merge: `{**SCALAR_OPS, ...}`), so the code has exactly the
array kernels' semantics.  Devices compile the source: cpu/scalar_jit.py with numba.njit,
cuda/scalar_cuda.py as numba.cuda device functions.

Values travel in their element type's compute type (SCALAR_COMPUTE_DTYPES, the same as
jit_drivers.numba_dtype): f16/bf16/f8*/f4 as float32 holding an exactly representable value,
s4/u4 (and s1/s2/u1/u2) as int8/uint8, everything else as itself.  Arguments are converted to
those types on entry.

XLA:CPU contracts a floating-point multiply whose only user is an add or subtract into a
fused multiply-add (one rounding); the generated code does the same, so reducers such as
`acc + x*y` round as XLA's do.

An instruction the table cannot express raises ScalarCompileError (a ValueError naming the
opcode); callers then fall back to the interpreter.
"""
from __future__ import annotations

__all__ = ["ScalarGen", "ScalarCompileError", "generate_source", "result_types"]

import re
from typing import Callable

import numpy as np

from ...hlo.ir import Computation, Instruction
from .errors import ScalarCompileError
from .scalar_ops import SCALAR_COMPUTE_DTYPES, SCALAR_OPS, ScalarOpError, ScalarSig


# Shape-only ops that are the identity on scalars.
_IDENTITY = frozenset({"copy", "bitcast", "reshape", "broadcast", "transpose", "opt-barrier",
                       "slice", "reverse"})
_FMA_USERS = frozenset({"add", "subtract"})
# Of those, the ones that keep each element in place in a loop fusion (broadcast: of one
# element, which loop_fusion.loop_shape checks).
_ELEMENT_IDENTITY = frozenset({"copy", "reshape", "broadcast"})


def _ct_name(t: str) -> str:
    try:
        return "np." + SCALAR_COMPUTE_DTYPES[t].name
    except KeyError:
        raise ScalarCompileError(f"element type {t} has no scalar form") from None


class ScalarGen:
    """Generates one Python function per computation (nested calls get their own), each
    instruction from `table` (opcode -> emit(ScalarSig) -> expression template)."""

    def __init__(self, table: dict[str, Callable[[ScalarSig], str]] = SCALAR_OPS):
        self.table = table
        self.consts: list[np.generic] = []
        self.funcs: list[str] = []      # sources, callees first
        self.names: dict[int, str] = {}  # id(computation) -> function name
        self.fma = True
        self.elementwise = False  # array parameters stand for their element (loop fusions)

    def const(self, ins: Instruction) -> str:
        lit = ins.literal
        if ins.literal_elided or lit is None:
            raise ScalarCompileError(f"constant '{ins.name}' has no literal")
        if ins.shape.is_tuple or ins.shape.rank != 0:
            raise ScalarCompileError(f"constant '{ins.name}' is not a scalar")
        t = ins.shape.element_type
        v = np.asarray(lit).reshape(())
        ct = SCALAR_COMPUTE_DTYPES.get(t)
        if ct is None:
            raise ScalarCompileError(f"constant of type {t} has no scalar form")
        val = v.astype(ct)[()]
        for i, c in enumerate(self.consts):
            if type(c) is type(val) and c.tobytes() == val.tobytes():
                return f"_K{i}"
        self.consts.append(val)
        return f"_K{len(self.consts) - 1}"

    def function(self, comp: Computation) -> str:
        if id(comp) in self.names:
            return self.names[id(comp)]
        order = _schedule(comp)
        users: dict[int, int] = {}
        for ins in order:
            for o in ins.operands:
                users[id(o)] = users.get(id(o), 0) + 1
        contract = self._contractions(order, users, comp, self.elementwise) if self.fma else {}
        fused = {id(x) for m, _, via in contract.values() for x in (m, *via)}
        params = comp.parameters
        lines: list[str] = []
        names: dict[int, str] = {}
        flushed: dict[str, set[str]] = {"32": set(), "64": set()}  # see _flushes
        for k, p in enumerate(params):
            if not p.shape.is_array or (p.shape.rank != 0 and not self.elementwise):
                raise ScalarCompileError(f"parameter '{p.name}' of '{comp.name}' is not a "
                                         "scalar")
            names[id(p)] = f"v{k}"
            lines.append(f"    v{k} = {_ct_name(p.shape.element_type)}(p{k})")
        n = len(params)
        for ins in order:
            if ins.opcode == "parameter" or id(ins) in fused:
                continue
            name = f"v{n}"
            n += 1
            if id(ins) in contract:
                expr = self._fma_expr(ins, *contract[id(ins)][:2], names)
            else:
                expr = self.expr(ins, names)
            expr = _FLUSH_OF.sub(lambda m: m[2] if m[2] in flushed[m[1]] else m[0], expr)
            kind = _flushes(expr)
            if kind:
                flushed[kind].add(name)
            lines.append(f"    {name} = {expr}")
            names[id(ins)] = name
        lines.append(f"    return {names[id(comp.root)]}")
        fname = f"_c{len(self.funcs)}"
        args = ", ".join(f"p{k}" for k in range(len(params)))
        self.funcs.append(f"def {fname}({args}):\n" + "\n".join(lines) + "\n")
        self.names[id(comp)] = fname
        return fname

    @staticmethod
    def _contractions(order, users, comp, elementwise=False):
        """add/subtract (f32/f64) -> (multiply operand it absorbs, its position, the
        reshapes/copies between them), as LLVM's contraction picks it: a multiply with no
        other user, the first operand preferred.  In a loop body, reshapes and copies are
        index arithmetic, so LLVM sees through them (single-user ones)."""
        out = {}
        taken: set[int] = set()

        def through(m):  # the operand as LLVM sees it in a loop body, and what lies between
            via = []
            while elementwise and m.opcode in ("reshape", "copy") and \
                    users.get(id(m), 0) == 1 and m is not comp.root:
                via.append(m)
                m = m.operands[0]
            return m, via

        def exp_product(m) -> bool:
            # An f32 exp ends in its own product y * 2^m, which LLVM contracts into the add
            # that uses it: first for a commutative add (InstCombine orders it first), and
            # as a subtract's minuend -- the result is then the plain rounded sum, since
            # y * 2^m is exact (XLA's bits: x*y + exp(-x) is not fma(x, y, exp(-x))).
            return (m.opcode == "exponential" and m.shape.element_type == "f32" and
                    users.get(id(m), 0) == 1 and m is not comp.root)
        for ins in order:
            if ins.opcode not in _FMA_USERS or ins.shape.element_type not in ("f32", "f64"):
                continue
            if (ins.shape.rank != 0 and not elementwise) or len(ins.operands) != 2:
                continue
            seen = [through(o)[0] for o in ins.operands]
            if exp_product(seen[0]) or (ins.opcode == "add" and exp_product(seen[1])):
                continue
            for k, m in enumerate(ins.operands):
                m, via = through(m)
                if (m.opcode == "multiply" and users.get(id(m), 0) == 1 and m is not comp.root
                        and id(m) not in taken and m.shape.element_type == ins.shape.element_type
                        and ins.operands[0] is not ins.operands[1]):
                    out[id(ins)] = (m, k, tuple(via))
                    taken.add(id(m))
                    break
        return out

    @staticmethod
    def _fma_expr(ins, m, k, names) -> str:
        t = ins.shape.element_type
        # The operands' flush is a float-read one (an FMA reads them: see _dazfp), the
        # result's a result's (see _fres).
        daz, flush, fma = (("_xftzd64", "_xftzr64", "_xfma64") if t == "f64" else
                           ("_xftzd32", "_xftzr32", "_xfma32"))
        x, y = (f"{daz}({names[id(o)]})" for o in m.operands)
        other = f"{daz}({names[id(ins.operands[1 - k])]})"
        if ins.opcode == "add":
            e = f"{fma}({x}, {y}, {other})"
        elif k == 0:  # x*y - other
            e = f"{fma}({x}, {y}, -{other})"
        else:         # other - x*y
            e = f"{fma}(-{x}, {y}, {other})"
        return f"{flush}({e})"

    def expr(self, ins: Instruction, names) -> str:
        op = ins.opcode
        ops = [names[id(o)] for o in ins.operands]
        if op == "constant":
            return self.const(ins)
        if op == "tuple":
            return "(" + "".join(o + ", " for o in ops) + ")"
        if op == "get-tuple-element":
            return f"{ops[0]}[{int(ins.attrs['index'])}]"
        if op == "call":
            callee = ins.attrs.get("to_apply")
            if isinstance(callee, list):
                callee = callee[0]
            if not isinstance(callee, Computation):
                raise ScalarCompileError(f"call '{ins.name}' has no callee")
            return f"{self.function(callee)}({', '.join(ops)})"
        if self.elementwise:  # loop_fusion.loop_shape vetted the shapes: per element
            if op in _IDENTITY and op not in _ELEMENT_IDENTITY:
                raise ScalarCompileError(f"'{op}' instruction '{ins.name}' moves elements")
        elif not ins.shape.is_array or ins.shape.rank != 0 or any(
                not o.shape.is_array or o.shape.rank != 0 for o in ins.operands):
            raise ScalarCompileError(f"'{op}' instruction '{ins.name}' is not on scalars")
        if op in _IDENTITY and ins.operands and \
                ins.operands[0].shape.element_type == ins.shape.element_type:
            return ops[0]
        emit = self.table.get(op)
        if emit is None:
            raise ScalarCompileError(f"opcode '{op}' (instruction '{ins.name}') cannot be "
                                     "compiled to scalar code")
        sig = ScalarSig(ins.shape.element_type,
                        tuple(o.shape.element_type for o in ins.operands), dict(ins.attrs))
        try:
            return emit(sig).format(*ops)
        except ScalarOpError as e:
            raise ScalarCompileError(f"'{op}' (instruction '{ins.name}'): {e}") from None


# A flush (`_xftz32` / `_xftz64`, the operands' denormals-are-zero) of a value that an
# earlier flush produced is the identity: the generated code leaves it out, so a chain of
# ops flushes each result once instead of again as every user's operand (in a bf16 fused
# loop, 2 of every op's 3 flushes).  Values that end flushed: a whole expression
# `_xftz32(...)`, `_xftz64(...)`, or `_xrbf16(_xftz32(...))` (rounding a flushed f32 to bf16
# gives no subnormal: bf16's smallest normal is f32's), or the same with a result's flush
# (`_xftzr32`; under the MXCSR's FTZ the arithmetic inside has flushed it).
_FLUSH_OF = re.compile(r"_xftzd?(32|64)\((v\d+)\)")
_FLUSH_HEADS = (("_xrbf16(_xftz32(", "32"), ("_xftz32(", "32"), ("_xftz64(", "64"),
                ("_xrbf16(_xftzr32(", "32"), ("_xftzr32(", "32"), ("_xftzr64(", "64"))


def _flushes(expr: str) -> str | None:
    """"32"/"64" when `expr` is one call of a flush (see above), else None."""
    for head, kind in _FLUSH_HEADS:
        if not expr.startswith(head):
            continue
        depth = 0
        for k, c in enumerate(expr):
            depth += (c == "(") - (c == ")")
            if depth == 0 and c == ")":
                return kind if k == len(expr) - 1 else None
        return None
    return None


def _schedule(comp: Computation) -> list[Instruction]:
    order: list[Instruction] = []
    seen: set[int] = set()

    def visit(root):
        stack = [(root, False)]
        while stack:
            ins, done = stack.pop()
            if done:
                order.append(ins)
                continue
            if id(ins) in seen:
                continue
            seen.add(id(ins))
            stack.append((ins, True))
            for o in reversed(ins.operands):
                if id(o) not in seen:
                    stack.append((o, False))
    for p in comp.parameters:
        visit(p)
    visit(comp.root)
    return order


def result_types(comp: Computation) -> tuple[str, ...]:
    s = comp.root.shape
    if s.is_tuple:
        return tuple(x.element_type for x in s.tuple_shapes)
    return (s.element_type,)


def generate_source(comp: Computation, fma: bool = True, elementwise: bool = False,
                    table: dict[str, Callable[[ScalarSig], str]] = SCALAR_OPS
                    ) -> tuple[str, list, str]:
    """(module source, constants, entry function name) for a computation.  `elementwise`:
    the computation is a loop body whose array parameters stand for one element each."""
    g = ScalarGen(table)
    g.fma = fma
    g.elementwise = elementwise
    entry = g.function(comp)
    return "\n".join(g.funcs), g.consts, entry
