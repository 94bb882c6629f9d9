"""A fusion's way to run, found on a call and kept in the run context for the calls after
it (fused_loop._fusion): a loop fusion's compiled loop, or -- for a fusion that is one
product of its parameters, as XLA:CPU wraps each dot (`__ynn_fusion`) -- the product's own
kernel.

Why: the fusion kernel worked the same things out on every call -- region or output
fusion, the size threshold, the plan tables, the hot-call count -- and a fusion of one dot
first failed the loop and row attempts, then ran its computation through the executor:
~5-10 us of Python a call, 32 calls a step of the data-parallel MLP on 4 devices.  Devices
on several threads pay that under one GIL.

A route holds nothing a run may change: a loop's route is for the context's devices running
at once or alone (loop_choice picks serial or parallel loops by that), so it is kept with
that flag and found again only under it; a product's route calls the kernel the computation's
thunk holds, unless the run is profiled (then the computation runs as before, its product
timed as a thunk of its own).  What a route gives is what the slow path gives: the same
loop, or the same kernel on the same operands.
"""
from __future__ import annotations

import numpy as np
from numba.core.errors import TypingError

from .bf16_convert import is_bf16
from .blas_threads import devices_at_once
from .jit_drivers import loop_array, loop_storage, numba_dtype, numba_scalar
from .team_size import computation_cost, loop_spread

ROUTES = "_fusion_routes"  # the kernel cache table: fusion instruction -> its route


class LoopRoute:
    """A loop fusion whose compiled loop is known (fused_loop.loop_choice's plan).  An array
    operand already flat-able in the type the loop reads (`direct`: a C-contiguous array
    of a type numba computes in as it is) goes in as a flat view, as loop_array would make
    it; any other operand, and a loop numba cannot type, take `call` (fused_loop.call_loop)."""

    __slots__ = ("comp", "shape", "plan", "threads", "at_once", "call", "direct", "n",
                 "storage", "dims", "cost")

    def __init__(self, comp, shape, plan, threads: bool, at_once: bool, call):
        self.comp, self.shape, self.plan = comp, shape, plan
        self.threads, self.at_once, self.call = threads, at_once, call
        self.direct = tuple(None if r == "scalar" else _direct_type(p.shape)
                            for p, r in zip(comp.parameters, plan[1]))
        self.n = shape.num_elements()
        self.storage = loop_storage(shape.dtype)
        # the result as the loop writes it (else from_loop converts it: call_loop)
        self.dims = shape.dims if self.storage == shape.dtype else None
        # its flops, transcendentals and bytes, for the team it takes (team_size.py)
        self.cost = computation_cost(comp) if threads else None

    def fits(self, ctx) -> bool:
        return devices_at_once(ctx) == self.at_once

    def __call__(self, args, ctx):
        fn, roles = self.plan
        vals = []
        for a, r, dt in zip(args, roles, self.direct):
            if dt is not None and type(a) is np.ndarray and a.dtype == dt and \
                    a.flags.c_contiguous:
                vals.append(a.reshape(-1))
            elif r == "scalar":
                vals.append(numba_scalar(a))
            else:
                vals.append(loop_array(a, self.threads))
        if self.dims is None:
            return self.call(self.comp, self.shape, args, ctx, self.plan, self.threads, None)
        out = np.empty(self.n, self.storage)
        try:
            if self.cost is not None:
                with loop_spread(ctx, -(-self.n // fn.elements_per_iteration), self.cost):
                    fn(out, *vals)
            else:
                fn(out, *vals)
        except TypingError:  # (call_loop then interprets it, and forgets the plans)
            return self.call(self.comp, self.shape, args, ctx, self.plan, self.threads, None)
        return out.reshape(self.dims)


def _direct_type(shape):
    """The dtype an array parameter of `shape` is read in as it is, or None."""
    dt = shape.dtype if shape.is_array else None
    if dt is None or is_bf16(dt) or dt.kind not in "fiub":
        return None
    try:
        return dt if numba_dtype(dt) == dt and loop_storage(dt) == dt else None
    except TypeError:  # a type no compiled loop reads (the loop itself then says so)
        return None


class ProductRoute:
    """A fusion that is one dot of its parameters: that dot's kernel, on the operands the
    computation would hand it."""

    __slots__ = ("comp", "root", "kernel", "picks")

    def __init__(self, comp, root, kernel, picks: list[int]):
        self.comp, self.root, self.kernel, self.picks = comp, root, kernel, picks

    def fits(self, ctx) -> bool:
        return True

    def __call__(self, args, ctx):
        if ctx.profiler is not None:
            return ctx.run(self.comp, args)
        return self.kernel(self.root, [args[k] for k in self.picks], ctx)


def kept(ctx, ins):
    """The route kept for fusion `ins` in this context that fits this run, or None."""
    route = ctx.kernel_cache.table(ROUTES).get(ins)
    return route if route is not None and route.fits(ctx) else None


def keep(ctx, ins, route) -> None:
    ctx.kernel_cache.table(ROUTES)[ins] = route


def one_product(comp) -> bool:
    """Whether `comp` is a dot of its parameters and nothing else."""
    root = comp.root
    return root.opcode == "dot" and \
        all(i is root or i.opcode == "parameter" for i in comp.instructions) and \
        all(o.opcode == "parameter" for o in root.operands)


def product_route(ctx, comp) -> ProductRoute | None:
    """The route of a fusion whose computation is `one_product`, from its thunk sequence in
    this context; None where the dot has no kernel (the executor then reports it)."""
    seq = ctx.sequence(comp)
    thunk = seq.thunks[seq.root]
    if thunk.kernel is None:
        return None
    params = list(seq.params)
    return ProductRoute(comp, thunk.ins, thunk.kernel, [params.index(i) for i in thunk.inputs])
