"""`while` on the CPU: interpreted first, then -- if it keeps going -- compiled whole.

The interpreter pays a Python dispatch per instruction per iteration, which dominates loops
over small arrays (a 2,000-step fori_loop on f32[16] is thousands of times slower than
XLA).  So a loop runs its first INTERPRETED_ITERATIONS iterations through the interpreter,
as any loop that ends early should (no compile cost); if it is still running then and its
condition and body are *straight-line element code*, both are generated as numba functions
and the rest of the loop runs in one compiled call:

    def run(limit, p0, p1, p2):               # the loop state's leaves, flat arrays
        n = 0
        while cond(p0, p1, p2):
            if n == limit: return False, n, p0, p1, p2
            p0, p1, p2 = body(p0, p1, p2)
            n += 1
        return True, n, p0, p1, p2

Straight-line element code is: the state (an array or a flat tuple of arrays) read through
get-tuple-element, constants, elementwise ops whose operands have the result's element
count or one element, broadcasts of one element, reshapes/copies, and a tuple root.  Each
instruction becomes one loop over its elements whose body is its SCALAR_OPS template --
the same code and semantics as the per-op kernels (no FMA contraction across ops, as the
interpreter).  Anything else (calls, nested loops, dots, reductions, slices, ...) keeps the
interpreter.  --max-while-iterations holds across both phases.
"""
from __future__ import annotations

import linecache
import threading

import numpy as np
from numba import njit
from numba.core.errors import NumbaError

from ...hlo.ir import Computation, Instruction
from ..device import flatten
from ..registry import kernel
from .elementwise_scalar import SCALAR_NAMESPACE
from .jit_drivers import from_numba, numba_array, numba_dtype
from .scalar_jit import ScalarCompileError, _Gen
from .structural import ExecutionError

INTERPRETED_ITERATIONS = 32
_LOOP_OPS = None
_LOCK = threading.Lock()
_NO_PLAN = object()
_COMPILED: dict[str, object] = {}


def _loop_ops():
    global _LOOP_OPS
    if _LOOP_OPS is None:
        from ...passes.loop_fusion import LOOP_OPS
        _LOOP_OPS = LOOP_OPS
    return _LOOP_OPS


def _n(ins: Instruction) -> int:
    return ins.shape.num_elements()


class _Unsupported(Exception):
    pass


class _Codegen:
    """Source of one computation over the state leaves p0..pk (flat numba arrays)."""

    def __init__(self, ns: dict, prefix: str):
        self.ns, self.prefix = ns, prefix
        self.g = _Gen()
        self.g.elementwise, self.g.fma = True, False

    def const(self, ins: Instruction) -> str:
        if ins.literal_elided or ins.literal is None or not ins.shape.is_array:
            raise _Unsupported(f"constant '{ins.name}'")
        name = f"{self.prefix}K{len(self.ns)}"
        self.ns[name] = np.ascontiguousarray(numba_array(ins.literal)).reshape(-1)
        return name

    def function(self, comp: Computation, fname: str, leaves: int, returns_leaves: bool) -> str:
        names: dict[int, str] = {}
        lines: list[str] = []
        param = comp.parameters[0] if comp.parameters else None
        if len(comp.parameters) != 1:
            raise _Unsupported("a loop computation takes one parameter")
        if param.shape.is_array:
            names[id(param)] = "p0"
        for k, ins in enumerate(comp.instructions):
            op = ins.opcode
            if op == "parameter":
                continue
            if op == "get-tuple-element":
                if ins.operands[0] is not param or not ins.shape.is_array:
                    raise _Unsupported("get-tuple-element of something but the state")
                names[id(ins)] = f"p{int(ins.attrs['index'])}"
            elif op == "constant":
                names[id(ins)] = self.const(ins)
            elif op == "tuple":
                if ins is not comp.root:
                    raise _Unsupported("a tuple that is not the root")
            elif op in ("reshape", "copy") and _n(ins.operands[0]) == _n(ins):
                names[id(ins)] = names[id(ins.operands[0])]
            elif op == "broadcast" and _n(ins.operands[0]) in (1, _n(ins)) and \
                    (_n(ins.operands[0]) == 1 or ins.operands[0].shape.dims == ins.shape.dims):
                lines += self._loop(ins, f"v{k}", f"{names[id(ins.operands[0])]}"
                                    f"[{'0' if _n(ins.operands[0]) == 1 else 'i'}]")
                names[id(ins)] = f"v{k}"
            elif op in _loop_ops() and ins.shape.is_array and \
                    all(o.shape.is_array and _n(o) in (1, _n(ins)) for o in ins.operands):
                refs = {id(o): f"{names[id(o)]}[{'i' if _n(o) == _n(ins) else '0'}]"
                        for o in ins.operands}
                try:
                    expr = self.g.expr(ins, refs)
                except ScalarCompileError as e:
                    raise _Unsupported(str(e)) from None
                lines += self._loop(ins, f"v{k}", expr)
                names[id(ins)] = f"v{k}"
            else:
                raise _Unsupported(f"'{op}' (instruction '{ins.name}')")
        root = comp.root
        if returns_leaves:
            outs = root.operands if root.opcode == "tuple" else [root]
            if len(outs) != leaves or any(id(o) not in names for o in outs):
                raise _Unsupported("the body does not return the state's leaves")
            # Constants are read-only globals: a state leaf must be a fresh array.
            rets = [f"{names[id(o)]}.copy()" if o.opcode == "constant" else names[id(o)]
                    for o in outs]
            lines.append(f"return ({''.join(r + ', ' for r in rets)})")
        else:
            if root.shape.element_type != "pred" or id(root) not in names:
                raise _Unsupported("the condition is not a computed pred")
            lines.append(f"return {names[id(root)]}[0]")
        args = ", ".join(f"p{j}" for j in range(leaves))
        return f"def {fname}({args}):\n" + "".join(f"    {ln}\n" for ln in lines)

    @staticmethod
    def _loop(ins: Instruction, name: str, expr: str) -> list[str]:
        dt = "np." + numba_dtype(ins.shape.dtype).name
        return [f"{name} = np.empty({_n(ins)}, {dt})", f"for i in range({_n(ins)}):",
                f"    {name}[i] = {expr}"]


def _state_leaves(shape) -> list | None:
    if shape.is_array:
        return [shape]
    if shape.is_tuple and all(s.is_array for s in shape.tuple_shapes):
        return list(shape.tuple_shapes)
    return None


def _compile(ins: Instruction):
    """The compiled `run` of this while loop, or None when it is not straight-line."""
    leaves = _state_leaves(ins.shape)
    if leaves is None:
        return None
    ns = dict(SCALAR_NAMESPACE)
    try:
        cond = _Codegen(ns, "c").function(ins.attrs["condition"], "cond", len(leaves), False)
        body = _Codegen(ns, "b").function(ins.attrs["body"], "body", len(leaves), True)
    except _Unsupported:
        return None
    ps = ", ".join(f"p{j}" for j in range(len(leaves)))
    run = (f"def run(limit, {ps}):\n    n = 0\n    while cond({ps}):\n"
           f"        if n == limit:\n            return False, n, {ps}\n"
           f"        {ps}, = body({ps})\n        n += 1\n    return True, n, {ps}\n")
    src = cond + body + run
    # Compiled once per process per loop text (constants included): every run of a module
    # gets a fresh context, and numba compiles lazily, on the first call.
    key = src + "#" + "|".join(f"{k}:{v.dtype}:{v.tobytes().hex()}" for k, v in ns.items()
                               if k[:2] in ("cK", "bK"))
    with _LOCK:
        cached = _COMPILED.get(key)
        if cached is not None:
            return cached
    filename = f"<xlaplug compiled while {ins.name} {len(_COMPILED)}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    exec(compile(src, filename, "exec"), ns)
    ns["cond"] = njit(nogil=True, error_model="numpy")(ns["cond"])
    ns["body"] = njit(nogil=True, error_model="numpy")(ns["body"])
    run_fn = njit(nogil=True, error_model="numpy")(ns["run"])
    with _LOCK:
        return _COMPILED.setdefault(key, run_fn)


# id(instruction) -> (instruction, compiled run or None): a loop compiled (or found not
# compilable) once is not interpreted or analysed again in later runs of its module.
_PLANS: dict[int, tuple] = {}


def _known_plan(ins):
    hit = _PLANS.get(id(ins))
    return hit[1] if hit is not None and hit[0] is ins else _NO_PLAN


def _plan(ins):
    plan = _known_plan(ins)
    if plan is _NO_PLAN:
        plan = _compile(ins)
        with _LOCK:
            _PLANS[id(ins)] = (ins, plan)
    return plan


def _run_compiled(ins, run, state, limit_left: int):
    """(finished, iterations, new state); numba typing failures -> None."""
    leaves = _state_leaves(ins.shape)
    vals = [np.ascontiguousarray(numba_array(v)).reshape(-1) for v in flatten(state)]
    try:
        done, n, *out = run(limit_left, *vals)
    except NumbaError:
        return None
    arrays = [from_numba(a, s.dtype).reshape(s.dims) for a, s in zip(out, leaves)]
    return done, n, (arrays[0] if ins.shape.is_array else tuple(arrays))


@kernel("while")
def _while(ins, args, ctx):
    cond, body = ins.attrs["condition"], ins.attrs["body"]
    limit = ctx.options.get("max_while_iterations")
    state, n = args[0], 0
    known = _known_plan(ins)
    switch_at = 0 if known not in (_NO_PLAN, None) else \
        INTERPRETED_ITERATIONS if known is _NO_PLAN else -1
    while True:
        if n == switch_at:
            run = _plan(ins)
            if run is not None:
                res = _run_compiled(ins, run, state, -1 if limit is None else limit - n)
                if res is not None:
                    done, _, state = res
                    if not done:
                        raise ExecutionError(f"while loop '{ins.name}' exceeded "
                                             f"--max-while-iterations={limit}")
                    return state
                with _LOCK:  # numba could not type it after all: stay interpreted
                    _PLANS[id(ins)] = (ins, None)
        if not bool(ctx.memory.scalar(ctx.run(cond, [state]))):
            return state
        if limit is not None and n >= limit:
            raise ExecutionError(f"while loop '{ins.name}' exceeded --max-while-iterations={limit}")
        state = ctx.run(body, [state])
        n += 1
