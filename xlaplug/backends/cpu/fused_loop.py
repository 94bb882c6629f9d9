"""`fusion` on the CPU: a loop fusion (passes/loop_fusion.py, or XLA's kLoop) as one loop.

A fused computation that `loop_shape` accepts -- elementwise ops, broadcasts of one-element
values, reshapes -- is compiled by scalar_jit into a numba function of one scalar per
parameter (the same SCALAR_OPS templates, FMA contraction and flushing as every other
compiled reducer or map body), and a loop calls it per element:

    def loop(out, p0, p1, p2):     # p0 an array, p1 a scalar, p2 a broadcast operand
        for i in numba.prange(out.shape[0]):
            out[i] = F_c0(p0[i], p1, p2[(i // 1024) % 4096])

so the chain makes one pass over memory instead of one per instruction, on the cores numba
has.  The module is cached on disk (jit_cache.py): later processes load the machine code.  Any other fusion (kInput reductions, transposes, several outputs, ...) and fusions of
fewer than the run option `fusion_min_elements` elements (default the pass's threshold:
compiling costs more than a small loop saves) run their computation through the
interpreter, as before -- unless the body holds a multiply-add XLA contracts into an FMA
(fusion_contents.contracts): the per-op kernels would round twice, so such a fusion runs
compiled at any size, as a serial loop (no threads to wake for a few elements; compiled
once, then loaded from the disk cache).  Interpreting runs (`interpret_loops`) compile
nothing.  A computation scalar_jit cannot compile falls back the same way.  An output fusion
(kOutput: a product and its epilogue, passes/dot_epilogue.py) runs the product's kernel,
then this loop in place on its result (cpu/dot_epilogue.py).
"""
from __future__ import annotations

import re

import numpy as np
from numba.core.errors import TypingError

from ..common.fusion_contents import (DEFAULT_MIN_ELEMENTS, computation_contracts,
                                      element_index, loop_plan, loop_shape)
from ..registry import kernel
from .blas_threads import devices_at_once
from .dot_epilogue import output_compiled, run_output_fusion
from .jit_cache import HOT_CALLS, cached_function, hot_call, scalar_piece
from .jit_drivers import from_numba, numba_array, numba_dtype, numba_scalar
from .region_code import is_region, run_region
from .row_fusion import compiled_rows, run_row_fusion

# Below this many elements a small fusion's serial loop calls its body's functions instead of
# inlining them into the loop: numba types an inlined body anew in every loop, and that
# doubled the compile (the conformance suite's cases, cold cache: 0.62 s a case inlined,
# 0.30 s not), where a loop of a few thousand elements gains microseconds from vectorizing.
INLINE_FROM_ELEMENTS = 4096


def compiled_loop_fn(comp, roles: tuple[str, ...], parallel: bool = True,
                     inline: bool = True):
    """The fusion as one loop (parallel: over numba's threads) -- its body (scalar_jit's
    elementwise source) called with each array parameter at i and each scalar once -- in a
    module numba caches on disk (jit_cache.py), so later processes skip the compile.
    `inline`: the body's functions inlined into the loop, so that it vectorizes.  With
    broadcast operands, a loop over rows (row_split)."""
    body, consts, fname = scalar_piece(comp, "F", elementwise=True, inline=inline)
    names = [f"p{k}" for k in range(len(roles))]
    head = f"def loop(out{''.join(', ' + x for x in names)}):\n"
    rng = "prange" if parallel else "range"
    split = row_split(comp, roles)
    if split is None:
        call = ", ".join(x if r == "scalar" else f"{x}[{element_index(r)}]"
                         for x, r in zip(names, roles))
        loop = head + (f"    for i in {rng}(out.shape[0]):\n"
                       f"        out[i] = {fname}({call})\n")
    else:
        row, steps = split
        at_row = f"(r * {row})"
        bases = ["        b%d = %s\n" % (k, re.sub(r"\bi\b", at_row, element_index(r)))
                 for k, r in enumerate(roles) if k in steps]
        args = []
        for k, (x, r) in enumerate(zip(names, roles)):
            if r == "scalar":
                args.append(x)
            elif k not in steps:
                args.append(f"{x}[r * {row} + j]")
            else:
                args.append(f"{x}[b{k}{'' if not steps[k] else f' + j * {steps[k]}'}]")
        loop = head + (f"    for r in {rng}(out.shape[0] // {row}):\n" + "".join(bases)
                       + f"        for j in range({row}):\n"
                       f"            out[r * {row} + j] = {fname}({', '.join(args)})\n")
    return cached_function(body + "\n" + loop, consts, "loop", nogil=True, parallel=parallel,
                           error_model="numpy")


_TERM = re.compile(r"^\(*i(?: // (\d+)\))?(?: % (\d+)\))?(?: \* (\d+))?$")


def _term_step(term: str, row: int) -> int | None:
    """One term of param_index_map's sum, `((i // s) % d) * k` with any part absent, over
    the loop index i = r * row + j: its step in j when it is r's alone (0) or affine in j
    within every row (k), else None."""
    m = _TERM.match(term.strip())
    if m is None:
        return None
    s, d, k = (int(g) if g else None for g in m.groups())
    s, k = s or 1, k or 1
    if s % row == 0:
        return 0
    if s == 1 and (d is None or d % row == 0):
        return k
    return None


def row_split(comp, roles) -> tuple[int, dict[int, int]] | None:
    """For a loop whose broadcast operands ("index" roles) a flat loop would read at
    `(i // s) % d`-style indices -- which keep LLVM from vectorizing it: the GELU of a bf16
    transformer block, 1M elements with a bias, ran 18x slower than with the bias read at
    i -- rows of the output's last dimension L: each such operand is read at a row base
    plus j * step (step 0: one value per row; 1: contiguous).  (L, {parameter: step}), else
    None (no broadcast operand, or one not affine within rows)."""
    index = {k: r[1] for k, r in enumerate(roles) if isinstance(r, tuple)}
    dims = comp.root.shape.dims
    if not index or not dims or int(dims[-1]) < 2:
        return None
    row = int(dims[-1])
    steps = {}
    for k, expr in index.items():
        parts = [_term_step(t, row) for t in expr.split(" + ")] if expr != "0" else [0]
        if any(p is None for p in parts):
            return None
        steps[k] = sum(parts)
    return row, steps


def _serial_loop_fn(comp, roles: tuple[str, ...]):
    return compiled_loop_fn(comp, roles, parallel=False)


def _tiny_loop_fn(comp, roles: tuple[str, ...]):
    return compiled_loop_fn(comp, roles, parallel=False, inline=False)


def _small_plan(ctx, comp, n: int):
    """The serial compiled loop of a fusion of n elements, below the size threshold, when
    its body holds a contracted multiply-add (see the module docstring) or it is hot
    (HOT_CALLS); else None."""
    if ctx.options.get("interpret_loops"):
        return None
    holds = ctx.kernel_cache.table("_fused_contracts")
    if id(comp) not in holds:
        holds[id(comp)] = computation_contracts(comp)
    if not holds[id(comp)] and not hot_call(ctx, "_fused_small_calls", comp, HOT_CALLS):
        return None
    if n >= INLINE_FROM_ELEMENTS:
        return loop_plan(ctx, comp, _serial_loop_fn, "_fused_small_plans")
    return loop_plan(ctx, comp, _tiny_loop_fn, "_fused_tiny_plans")


def _compiled_loop(ins) -> bool:
    """Will this fusion (at the default threshold) run as one loop, with no buffers inside?
    (The thunk builder's memory estimate asks.)"""
    if str(ins.attrs.get("kind", "")) == "kOutput":
        return output_compiled(ins)
    return (ins.shape.is_array and ins.shape.num_elements() >= DEFAULT_MIN_ELEMENTS
            and loop_shape(ins.attrs["calls"][0]) is not None) or compiled_rows(ins)


@kernel("fusion")
def _fusion(ins, args, ctx):
    comp = ins.attrs["calls"][0]
    if is_region(ins):
        return run_region(ins, args, ctx)  # passes/small_regions.py: region_code.py
    if str(ins.attrs.get("kind", "")) == "kOutput":
        return run_output_fusion(ins, args, ctx, run_loop)  # a product and its epilogue
    y = run_loop(comp, ins.shape, args, ctx)
    if y is None:
        rows = run_row_fusion(ins, args, ctx)  # a reduction fusion: row_fusion.py
        return ctx.run(comp, args) if rows is None else rows
    return y


def run_loop(comp, shape, args, ctx, into=None):
    """The loop fusion body `comp` (result `shape`) on `args`, compiled as the module
    docstring says; None when it runs no loop (not one, or below the size threshold and not
    worth compiling).  `into`: a flat array of the result's numba dtype and size to write
    (it may be one of `args` read at the loop index: each element is read before it is
    written, by the same iteration); else a new one."""
    n = shape.num_elements() if shape.is_array else 0
    threads = False  # the loop on numba's threads: its bf16 conversions too
    if n < ctx.options.get("fusion_min_elements", DEFAULT_MIN_ELEMENTS):
        plan = _small_plan(ctx, comp, n) if n > 0 else None
    elif devices_at_once(ctx) or n < DEFAULT_MIN_ELEMENTS:
        # Devices running at once already fill the cores: a numba parallel loop per device
        # would start a team of OpenMP threads per device thread (see the module docstring).
        # A fusion below the default threshold (compiled because a run lowered
        # fusion_min_elements) is too small for a team of threads to pay off, and numba takes
        # about twice as long to compile a parallel loop.
        plan = loop_plan(ctx, comp, _serial_loop_fn, "_fused_serial_plans")
    else:
        plan, threads = loop_plan(ctx, comp, compiled_loop_fn), True
    if plan is None:
        return None
    fn, roles = plan
    vals = [numba_scalar(a) if r == "scalar" else
            np.ascontiguousarray(numba_array(a, threads)).reshape(-1)
            for a, r in zip(args, roles)]
    out = np.empty(n, numba_dtype(shape.dtype)) if into is None else into
    try:
        fn(out, *vals)
    except TypingError:  # numba cannot type it after all: interpret, and remember
        for table in ("_fused_loop_plans", "_fused_small_plans", "_fused_tiny_plans",
                      "_fused_serial_plans"):
            ctx.kernel_cache.table(table)[id(comp)] = None
        return ctx.run(comp, args)
    return from_numba(out, shape.dtype, threads).reshape(shape.dims)


_fusion.compiled_loop = _compiled_loop
