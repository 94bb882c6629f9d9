"""`while` on the CPU: the whole loop as one compiled call when its code can say it.

The interpreter pays a Python dispatch per instruction per iteration, which dominates loops
over small arrays (a 2,000-step fori_loop on f32[16] is thousands of times slower than
XLA).  When the condition and body are *straight-line array code* (loop_codegen.py), both
are generated as numba functions and the loop runs in one compiled call:

    def run(limit, p0, p1, p2):               # the loop state's leaves, flat arrays
        p0 = p0.copy()                        # the leaves the body changes: own copies
        b_v4 = np.empty(16, np.float32)       # the body's buffers, allocated once
        ...
        n = 0
        while cond(p0, p1, p2, c_v3):
            if n == limit: return False, n, p0, p1, p2
            body(p0, p1, p2, b_v4, ...)       # results into buffers (or leaves in place)
            p0[:] = b_v4                      # the new state (_write_back)
            n += 1
        return True, n, p0, p1, p2

The body returns nothing and no array variable is rebound per iteration except to swap a
big leaf with its buffer: a body returning a tuple of arrays, its results alternating
between two buffers, cost ~60 ns an iteration in numba's reference counting and tuple
handling -- more than the work of a small loop (a 2,000-step fori_loop on f32[16]: 0.23 ms
-> 0.15 ms, CPU time, 2026-12-06).

When it starts compiled (a compile costs numba seconds, once: the code is then cached on
disk, jit_cache.py):
- from iteration 0 when the code is compiled in this process (a short loop too: a compiled
  iteration costs nanoseconds, an interpreted one ~0.1 ms);
- from iteration 0 when it is in numba's disk cache from an earlier process (a load:
  milliseconds), unless the loop is known to be short;
- from iteration 0 when the loop is known to run more than INTERPRETED_ITERATIONS times
  (loop_trip_count.py: XLA's known_trip_count, or jax's counted fori_loop / scan), its
  iterations in the run context's earlier runs counted in: an executable called again and
  again (a model's step whose scan runs 32 steps) compiles its short loops on the call that
  takes them past INTERPRETED_ITERATIONS;
- else after INTERPRETED_ITERATIONS interpreted iterations (earlier runs' counted in), if
  it is still running: a loop that ends early (most data-dependent loops run a few times)
  costs no compile.
Measured (2026-12-02, load 8 on 2 cores): an interpreted iteration of the benchmarks'
loops costs 0.16 ms (fori_loop, 13 instructions) and 0.32 ms (scan RNN, 19); compiling
them costs 1.5-2.5 s of CPU once per machine (then a load of milliseconds), after which
an iteration costs 0.4-0.7 us.  So a loop still running after 32 iterations (5-10 ms
interpreted) is worth compiling, and a counted loop that long skips those 32: it would
reach the compile anyway.

What the loop code expresses is loop_codegen.py's; elementwise ops use the SCALAR_OPS
templates, so their results are the per-op kernels' (no FMA contraction across ops, as the
interpreter).  Anything else (nested loops, gathers, sorts, ...) keeps the interpreter.
--max-while-iterations holds across both phases.  What was worked out per loop (its code,
or that it has none) is kept in the run context's kernel cache (ctx.kernel_cache), not in
this module: devices in one process run their own contexts.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba.core.errors import NumbaError

from ...hlo.ir import Instruction
from ..device import flatten
from ..registry import kernel
from .jit_cache import GeneratedRun
from .jit_drivers import from_numba, numba_array, numba_dtype
from .loop_codegen import ArrayCodegen, Unsupported
from .loop_reduce import LoopCodegen
from .loop_trip_count import trip_count
from ..common.errors import ExecutionError

INTERPRETED_ITERATIONS = 32
_TABLE = "compiled_while"
_SEEN = "compiled_while_interpreted"   # id(loop) -> (loop, iterations run interpreted)


@dataclass(eq=False)
class LoopCode(GeneratedRun):
    """A loop's generated module (jit_cache.GeneratedRun: `failed` keeps the loop
    interpreted).  `leaves`: each state leaf's (dtype, the dtype numba gets it in, dims)."""
    leaves: list = None


def _state_leaves(shape) -> list | None:
    if shape.is_array:
        return [shape]
    if shape.is_tuple and all(s.is_array for s in shape.tuple_shapes):
        return list(shape.tuple_shapes)
    return None


# A leaf of at least this many bytes takes its new value by swapping arrays with the
# buffer the body wrote it into; a smaller one by a copy.  A swap rebinds two array
# variables (numba's reference counts: ~12 ns a leaf an iteration, measured 2026-12-06),
# a copy costs ~1 ns per 64 bytes, so a copy is cheaper up to ~1 KiB.
SWAP_BYTES = 2048


def _write_back(leaves: list, cg_body: ArrayCodegen) -> tuple[list[str], list[str]]:
    """(allocations, the lines after each body call) that move the body's results into the
    state leaves p0..: a leaf's own value stays; a result that is another leaf goes through
    a temporary (that leaf may itself be about to change); a buffer returned for this leaf
    alone and big enough is swapped in; anything else (a buffer returned twice, a constant)
    is copied."""
    rets = cg_body.returned
    pre, first, then, last = [], [], [], []
    for i, r in enumerate(rets):
        if r == f"p{i}":
            continue
        if r in cg_body.buffers:
            size, dt = cg_body.buffers[r]
            if rets.count(r) == 1 and size * np.dtype(dt[3:]).itemsize >= SWAP_BYTES:
                then.append(f"        p{i}, b_{r} = b_{r}, p{i}")
            else:
                then.append(_copy(f"p{i}", f"b_{r}", size))
        elif r.startswith("p"):  # another leaf, passed on
            n, dt = leaves[i]
            pre.append(f"    t{i} = np.empty({n}, {dt})")
            first.append(_copy(f"t{i}", r, n))
            last.append(_copy(f"p{i}", f"t{i}", n))
        else:  # a constant (a read-only global)
            then.append(_copy(f"p{i}", r, leaves[i][0]))
    return pre, first + then + last


def _copy(dst: str, src: str, n: int) -> str:
    """`dst[:] = src` for two flat arrays of n elements, as an element loop: numba's slice
    assignment checks the shapes and formats its error message in compiled code, ~0.9 s of
    CPU (its string helpers) in every process that compiles a loop with such a copy -- 2.0 s
    for the first one in a process (numba's str, repr and concatenation compiled with it),
    seen for a constant written back to a leaf (tests/test_compiled_while.py)."""
    return f"        for k in range({n}): {dst}[k] = {src}[k]"


def _run_source(leaves: list, cg_cond: ArrayCodegen, cg_body: ArrayCodegen) -> str:
    """`run` (module docstring): the leaves the body changes copied (the caller's arrays
    are not written), buffers allocated once, the loop."""
    ps = ", ".join(f"p{j}" for j in range(len(leaves)))
    written = sorted(set(cg_body.owned) | {i for i, r in enumerate(cg_body.returned)
                                           if r != f"p{i}"})
    pre = [f"    p{i} = p{i}.copy()" for i in written]
    for prefix, cg in (("c", cg_cond), ("b", cg_body)):
        pre += [f"    {prefix}_{name} = np.empty({n}, {dt})"
                for name, (n, dt) in cg.buffers.items()]
    pre += ["    " + ln for ln in cg_body.hoisted]  # (a loop-invariant transpose)
    temps, back = _write_back(leaves, cg_body)
    cargs = "".join(f", c_{b}" for b in cg_cond.buffers)
    bargs = "".join(f", b_{b}" for b in cg_body.buffers)
    return "\n".join([f"def run(limit, {ps}):", *pre, *temps, "    n = 0",
                      f"    while cond({ps}{cargs}):",
                      "        if n == limit:", f"            return False, n, {ps}",
                      f"        body({ps}{bargs})", *back, "        n += 1",
                      f"    return True, n, {ps}", ""])


def generate(ins: Instruction) -> LoopCode | None:
    """The loop's module, or None when its condition or body is not straight-line code."""
    leaves = _state_leaves(ins.shape)
    if leaves is None:
        return None
    consts: dict = {}
    try:
        cg_cond, cg_body = LoopCodegen(consts, "c"), LoopCodegen(consts, "b")
        cond = cg_cond.function(ins.attrs["condition"], "cond", len(leaves), False)
        body = cg_body.function(ins.attrs["body"], "body", len(leaves), True)
    except Unsupported:
        return None
    src = "\n".join(cg_cond.pieces + cg_body.pieces + [
        cond, "cond = register_jitable(cond)\n", body, "body = register_jitable(body)\n",
        _run_source([(s.num_elements(), "np." + numba_dtype(s.dtype).name) for s in leaves],
                    cg_cond, cg_body)])
    return LoopCode(src, consts, [(s.dtype, numba_dtype(s.dtype), tuple(s.dims))
                                  for s in leaves])


def loop_code(ctx, ins: Instruction) -> LoopCode | None:
    """generate(ins), once per run context (its kernel cache)."""
    table = ctx.kernel_cache.table(_TABLE)
    hit = table.get(id(ins))
    if hit is None or hit[0] is not ins:
        hit = table[id(ins)] = (ins, generate(ins))
    code = hit[1]
    return None if code is None or code.failed else code


def _flat_arg(v, dt, nt) -> np.ndarray:
    """A state leaf as `run` takes it: flat, contiguous, numba's dtype for it (and the
    leaf's own type first: a run's inputs may arrive wider than its parameters)."""
    if type(v) is np.ndarray and v.dtype == nt == dt and v.flags.c_contiguous:
        return v.reshape(-1)
    return np.ascontiguousarray(numba_array(np.asarray(v).astype(dt, copy=False))).reshape(-1)


def _run_compiled(ins, code: LoopCode, state, limit_left: int):
    """(finished, iterations, new state); numba typing failures -> None."""
    vals = [_flat_arg(v, dt, nt) for v, (dt, nt, _) in zip(flatten(state), code.leaves)]
    try:
        done, n, *out = code.function()(limit_left, *vals)
    except NumbaError:
        code.failed = True  # stay interpreted
        return None
    arrays = [(a if a.dtype == dt else from_numba(a, dt)).reshape(dims)
              for a, (dt, _, dims) in zip(out, code.leaves)]
    return done, n, (arrays[0] if ins.shape.is_array else tuple(arrays))


def _switch_at(ctx, ins: Instruction, state) -> int:
    """The iteration at which the loop goes compiled (module docstring); -1: never."""
    if ctx.options.get("interpret_loops"):
        return -1
    hit = ctx.kernel_cache.table(_TABLE).get(id(ins))
    if hit is not None and hit[0] is ins and hit[1] is not None and hit[1].fn is not None \
            and not hit[1].failed:
        return 0  # compiled in this process: from iteration 0, whatever the trip count
    if _state_leaves(ins.shape) is None:
        return -1
    trips = trip_count(ins, state)
    if trips is not None and trips + _interpreted_before(ctx, ins) <= INTERPRETED_ITERATIONS:
        return -1  # short (with this context's earlier runs of it): interpreted, no code
    code = loop_code(ctx, ins)
    if code is None:
        return -1
    if trips is not None or code.ready():
        return 0
    return max(0, INTERPRETED_ITERATIONS - _interpreted_before(ctx, ins))


def _interpreted_before(ctx, ins: Instruction) -> int:
    """Iterations of this loop the context ran interpreted in its earlier runs."""
    hit = ctx.kernel_cache.table(_SEEN).get(id(ins))
    return hit[1] if hit is not None and hit[0] is ins else 0


def _count_interpreted(ctx, ins: Instruction, n: int) -> None:
    if n:
        ctx.kernel_cache.table(_SEEN)[id(ins)] = (ins, _interpreted_before(ctx, ins) + n)


@kernel("while")
def _while(ins, args, ctx):
    cond, body = ins.attrs["condition"], ins.attrs["body"]
    limit = ctx.options.get("max_while_iterations")
    state, n = args[0], 0
    switch_at = _switch_at(ctx, ins, state)
    while True:
        if n == switch_at:
            code = loop_code(ctx, ins)
            if code is not None:
                res = _run_compiled(ins, code, state, -1 if limit is None else limit - n)
                if res is not None:
                    done, _, state = res
                    if not done:
                        raise ExecutionError(f"while loop '{ins.name}' exceeded "
                                             f"--max-while-iterations={limit}")
                    return state
        if not bool(ctx.memory.scalar(ctx.run(cond, [state]))):
            _count_interpreted(ctx, ins, n)
            return state
        if limit is not None and n >= limit:
            raise ExecutionError(f"while loop '{ins.name}' exceeded --max-while-iterations={limit}")
        state = ctx.run(body, [state])
        n += 1
