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
                                      element_index, index_step, loop_plan, loop_shape)
from ..registry import kernel
from .bf16_convert import is_bf16
from .blas_threads import devices_at_once
from .dot_epilogue import output_compiled, run_output_fusion
from .fusion_route import ROUTES, LoopRoute, keep, kept, one_product, product_route
from .jit_cache import HOT_CALLS, cached_function, hot_call, scalar_piece
from .jit_drivers import from_loop, loop_array, loop_storage, numba_scalar
from .region_code import is_region, run_region
from .row_fusion import compiled_rows, run_row_fusion
from .team_size import fusion_cost, loop_spread
from . import hardware_flush, trig_vector

# Below this many elements a small fusion's serial loop calls its body's functions instead of
# inlining them into the loop: numba types an inlined body anew in every loop, and that
# doubled the compile (the conformance suite's cases, cold cache: 0.62 s a case inlined,
# 0.30 s not), where a loop of a few thousand elements gains microseconds from vectorizing.
INLINE_FROM_ELEMENTS = 4096


def compiled_loop_fn(comp, roles: tuple[str, ...], parallel: bool = True,
                     inline: bool = True, inplace: bool = False, hardware: bool | None = None):
    """The fusion as one loop (parallel: over numba's threads) -- its body (scalar_jit's
    elementwise source) called with each array parameter at i and each scalar once -- in a
    module numba caches on disk (jit_cache.py), so later processes skip the compile.
    `inline`: the body's functions inlined into the loop, so that it vectorizes.  With
    broadcast operands, a loop over rows (row_split).  `inplace`: parameter 0 (an array) is
    `out` itself, and read from it (a product's epilogue in place on it: cpu/dot_epilogue.py)
    -- given as two pointers, LLVM's overlap check sends the loop to its scalar form (the
    bf16 GELU: 61 ms a run on one thread against 2.4 vectorized).  `hardware`: blocks of
    elements run with the MXCSR's FTZ and DAZ bits set, results not flushed in software
    (hardware_flush.py); None: where the body is eligible, in inlined (long) loops -- a loop
    of a few hundred elements would spend what it saves on the two MXCSR writes."""
    if hardware is None:
        hardware = inline and hardware_flush.eligible(comp)
    body, consts, fname = scalar_piece(comp, "F", elementwise=True, inline=inline)
    if hardware:
        body = hardware_flush.PRELUDE + body
    if inline:  # a long loop: f32 sines and cosines as vector code (trig_vector.py)
        body = trig_vector.long_loop(body)
    names = [f"p{k}" for k in range(len(roles))]
    head = f"def loop(out{''.join(', ' + x for x in names)}):\n"
    if inplace:
        names[0] = "out"
    rng = "prange" if parallel else "range"
    # bf16 arrays come as their bits (loop_storage) and are widened and rounded here.
    load = ["_xbf16_load" if r != "scalar" and is_bf16(p.shape.dtype) else ""
            for p, r in zip(comp.parameters, roles)]
    store = "_xbf16_store" if is_bf16(comp.root.shape.dtype) else ""
    split = row_split(comp, roles)
    if split is None and hardware:  # blocks of elements, each operand a slice of its own
        B = hardware_flush.BLOCK
        lines = ["        o = out[s:e]\n"]
        args = []
        for k, (x, r, w) in enumerate(zip(names, roles, load)):
            if r == "scalar":
                args.append(x)
            elif r == "array" and x == "out":
                args.append(f"{w}(o[j])")
            elif r == "array":
                lines.append(f"        a{k} = {x}[s:e]\n")
                args.append(f"{w}(a{k}[j])")
            else:
                at = re.sub(r"\bi\b", "(s + j)", element_index(r))
                args.append(f"{w}({x}[{at}])")
        inner = [*lines, "        for j in range(e - s):\n",
                 f"            o[j] = {store}({fname}({', '.join(args)}))\n"]
        per = B  # elements an iteration of the (p)range covers: what team_size.Spread divides
        loop = head + (f"    n = out.shape[0]\n    for b in {rng}((n + {B - 1}) // {B}):\n"
                       f"        s = b * {B}\n        e = min(s + {B}, n)\n"
                       + "".join(hardware_flush.wrap(inner, "        ")))
    elif split is None:
        call = ", ".join(x if r == "scalar" else f"{w}({x}[{element_index(r)}])"
                         for x, r, w in zip(names, roles, load))
        per = 1
        loop = head + (f"    for i in {rng}(out.shape[0]):\n"
                       f"        out[i] = {store}({fname}({call}))\n")
    else:
        # Each row's operands as slices of their own, read at j: indexing the whole arrays
        # at r * row + j, the prange body gathered and scattered (numba's parfor loses the
        # stride): the bf16 GELU's 1M elements took 4.2 ms on one thread against 2.5 ms.
        row, steps = split
        lines = [f"        o = out[r * {row}:r * {row} + {row}]\n"]
        args = []
        for k, (x, r) in enumerate(zip(names, roles)):
            if r == "scalar":
                args.append(x)
                continue
            if k not in steps:
                if x != "out":
                    lines.append(f"        a{k} = {x}[r * {row}:r * {row} + {row}]\n")
                args.append("o[j]" if x == "out" else f"a{k}[j]")
                continue
            base = re.sub(r"\bi\b", f"(r * {row})", element_index(r))
            lines.append(f"        b{k} = {base}\n")
            if steps[k] == 0:  # one value per row
                lines.append(f"        a{k} = {x}[b{k}]\n")
                args.append(f"a{k}")
            elif steps[k] == 1:
                lines.append(f"        a{k} = {x}[b{k}:b{k} + {row}]\n")
                args.append(f"a{k}[j]")
            else:
                args.append(f"{x}[b{k} + j * {steps[k]}]")
        args = [a if r == "scalar" else f"{w}({a})" for a, r, w in zip(args, roles, load)]
        rows = lines + [f"        for j in range({row}):\n",
                        f"            o[j] = {store}({fname}({', '.join(args)}))\n"]
        if hardware:  # blocks of rows (of at least one row)
            rb = max(1, hardware_flush.BLOCK // row)
            per = row * rb
            inner = [f"        for r in range(b * {rb}, min(b * {rb} + {rb}, nr)):\n",
                     *["    " + ln for ln in rows]]
            loop = head + (f"    nr = out.shape[0] // {row}\n"
                           f"    for b in {rng}((nr + {rb - 1}) // {rb}):\n"
                           + "".join(hardware_flush.wrap(inner, "        ")))
        else:
            per = row
            loop = head + f"    for r in {rng}(out.shape[0] // {row}):\n" + "".join(rows)
    fn = cached_function(body + "\n" + loop, consts, "loop", nogil=True, parallel=parallel,
                         error_model="numpy")
    fn.elements_per_iteration = per
    return fn


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
    steps = {k: index_step(expr, row) for k, expr in index.items()}
    if any(v is None for v in steps.values()):
        return None
    return row, steps


def _serial_loop_fn(comp, roles: tuple[str, ...]):
    return compiled_loop_fn(comp, roles, parallel=False)


def _inplace_loop_fn(comp, roles: tuple[str, ...]):
    return compiled_loop_fn(comp, roles, inplace=True)


def _serial_inplace_fn(comp, roles: tuple[str, ...]):
    return compiled_loop_fn(comp, roles, parallel=False, inplace=True)


def _tiny_loop_fn(comp, roles: tuple[str, ...]):
    return compiled_loop_fn(comp, roles, parallel=False, inline=False)


def _tiny_inplace_fn(comp, roles: tuple[str, ...]):
    return compiled_loop_fn(comp, roles, parallel=False, inline=False, inplace=True)


def _small_plan(ctx, comp, n: int):
    """(the serial compiled loop of a fusion of n elements, below the size threshold, and
    its in-place variant's (compile function, plan table)) when its body holds a contracted
    multiply-add (see the module docstring) or it is hot (HOT_CALLS); else (None, None)."""
    if ctx.options.get("interpret_loops"):
        return None, None
    holds = ctx.kernel_cache.table("_fused_contracts")
    if id(comp) not in holds:
        holds[id(comp)] = computation_contracts(comp)
    if not holds[id(comp)] and not hot_call(ctx, "_fused_small_calls", comp, HOT_CALLS):
        return None, None
    if n >= INLINE_FROM_ELEMENTS:
        return (loop_plan(ctx, comp, _serial_loop_fn, "_fused_small_plans"),
                (_serial_inplace_fn, "_fused_small_inplace_plans"))
    return (loop_plan(ctx, comp, _tiny_loop_fn, "_fused_tiny_plans"),
            (_tiny_inplace_fn, "_fused_tiny_inplace_plans"))


def _compiled_loop(ins) -> bool:
    """Will this fusion (at the default threshold) run as one loop, with no buffers inside?
    (The thunk builder's memory estimate asks.)"""
    if str(ins.attrs.get("kind", "")) == "kOutput":
        return output_compiled(ins)
    return (ins.shape.is_array and ins.shape.num_elements() >= DEFAULT_MIN_ELEMENTS
            and loop_shape(ins.attrs["calls"][0]) is not None) or compiled_rows(ins)


@kernel("fusion")
def _fusion(ins, args, ctx):
    route = kept(ctx, ins)  # what an earlier call found (fusion_route.py)
    if route is not None:
        return route(args, ctx)
    comp = ins.attrs["calls"][0]
    if is_region(ins):
        return run_region(ins, args, ctx)  # passes/small_regions.py: region_code.py
    if str(ins.attrs.get("kind", "")) == "kOutput":
        return run_output_fusion(ins, args, ctx, run_loop, loop_storage)  # a product and its epilogue
    plan, threads, inplace = loop_choice(comp, ins.shape, ctx)
    if plan is not None:
        keep(ctx, ins, LoopRoute(comp, ins.shape, plan, threads, devices_at_once(ctx),
                                 call_loop))
        return call_loop(comp, ins.shape, args, ctx, plan, threads, inplace)
    rows = run_row_fusion(ins, args, ctx)  # a reduction fusion: row_fusion.py
    if rows is not None:
        return rows
    if one_product(comp):
        route = product_route(ctx, comp)
        if route is not None:
            keep(ctx, ins, route)
    return ctx.run(comp, args)


def run_loop(comp, shape, args, ctx, into=None):
    """The loop fusion body `comp` (result `shape`) on `args`, compiled as the module
    docstring says; None when it runs no loop (not one, or below the size threshold and not
    worth compiling).  `into`: a flat array of the result's loop_storage dtype and size to write
    (it may be one of `args` read at the loop index: each element is read before it is
    written, by the same iteration); else a new one."""
    plan, threads, inplace = loop_choice(comp, shape, ctx)
    if plan is None:
        return None
    return call_loop(comp, shape, args, ctx, plan, threads, inplace, into)


def loop_choice(comp, shape, ctx):
    """(plan, threads, inplace) of a run of loop fusion `comp` in this context now: its
    compiled loop and parameter roles (None: it runs no loop), whether the loop runs on
    numba's threads, and the in-place variant's (compile function, plan table) or None."""
    n = shape.num_elements() if shape.is_array else 0
    threads = False  # the loop on numba's threads: its bf16 conversions too
    inplace = None  # the same loop reading parameter 0 from `out`, and its plan table
    if n < ctx.options.get("fusion_min_elements", DEFAULT_MIN_ELEMENTS):
        # A small product's epilogue in place too (dot_epilogue.py): the transformer
        # block's GELU (f32[4,32,256]) ran scalar through the two-pointer loop.
        plan, inplace = _small_plan(ctx, comp, n) if n > 0 else (None, None)
    elif devices_at_once(ctx) or n < DEFAULT_MIN_ELEMENTS:
        # Devices running at once already fill the cores: a numba parallel loop per device
        # would start a team of OpenMP threads per device thread (see the module docstring).
        # A fusion below the default threshold (compiled because a run lowered
        # fusion_min_elements) is too small for a team of threads to pay off, and numba takes
        # about twice as long to compile a parallel loop.
        plan = loop_plan(ctx, comp, _serial_loop_fn, "_fused_serial_plans")
        inplace = (_serial_inplace_fn, "_fused_serial_inplace_plans")
    else:
        plan, threads = loop_plan(ctx, comp, compiled_loop_fn), True
        inplace = (_inplace_loop_fn, "_fused_inplace_plans")
    return plan, threads, inplace


def call_loop(comp, shape, args, ctx, plan, threads: bool, inplace, into=None):
    """run_loop's call of the loop `plan` (loop_choice's three, then `into` as run_loop's)."""
    fn, roles = plan
    vals = [numba_scalar(a) if r == "scalar" else loop_array(a, threads)
            for a, r in zip(args, roles)]
    n = shape.num_elements() if shape.is_array else 0
    out = np.empty(n, loop_storage(shape.dtype)) if into is None else into
    if inplace is not None and into is not None and roles[0] == "array" and \
            vals[0].__array_interface__["data"][0] == into.__array_interface__["data"][0]:
        fn = loop_plan(ctx, comp, *inplace)[0]
    try:
        if threads:  # on as many threads as XLA's cost model gives it (team_size.py)
            with loop_spread(ctx, -(-n // fn.elements_per_iteration), fusion_cost(ctx, comp)):
                fn(out, *vals)
        else:
            fn(out, *vals)
    except TypingError:  # numba cannot type it after all: interpret, and remember
        for table in ("_fused_loop_plans", "_fused_small_plans", "_fused_tiny_plans",
                      "_fused_serial_plans", "_fused_inplace_plans",
                      "_fused_serial_inplace_plans", "_fused_small_inplace_plans",
                      "_fused_tiny_inplace_plans"):
            ctx.kernel_cache.table(table)[id(comp)] = None
        ctx.kernel_cache.table(ROUTES).clear()  # fusion_route.py's, which hold the plans
        return ctx.run(comp, args)
    return from_loop(out, shape.dtype, threads).reshape(shape.dims)


_fusion.compiled_loop = _compiled_loop
