"""How many of numba's threads one parallel kernel takes: XLA:CPU's parallel task count
(xla/service/cpu/parallel_task_assignment.cc, its DefaultCostModel) from the kernel's
flops, transcendentals and bytes as XLA's HloCostAnalysis counts them.

  * I/O-bound (flops / bytes accessed <= 1): one thread per 256 KiB accessed, at most
    ceil(sqrt(cores)) -- XLA's fit of memory bandwidth's sub-linear scaling;
  * compute-bound: one thread per 100,000 cycles of flops + 2 x transcendentals +
    10 x bytes accessed, at most every core.

Why: every parallel loop ran on every thread of numba's team, whatever its size.  On the
13-core host (2026-12-07 02:12-02:29 UTC, load 0.00) the conv net training step took 26.8
ms on 13 threads, 9.3 ms with numba.set_num_threads(4) for the whole run and 17.8 with
this cost model applied through set_num_threads per kernel; the transformer training step
37 ms, 31.1 on 4 and 33 with the cost model.  Its convolutions ran 2.5-4.5x slower on 13
threads than on one: each shrank the team to its number of chunks (blas_threads.
one_blas_thread), and libgomp ends the threads a smaller team leaves out -- the next full
loop created them again (libgomp's team.c; here, 20 loops on teams of 8 and 2 in turn
went through 64 threads, on a team of 8 with chunk sizes in turn through 10).  Hence
`Spread` below, and convolutions that keep the team.  That the re-created threads are what
cost the 13-core host its time is likely, not measured: this form was not timed there
(the session's device time ran out).

A kernel's results do not depend on how many threads run it: the kernels sized here (loop
and row fusions) give each element or row one thread's arithmetic whatever the count.
`RunOptions(loop_teams="all")` gives every kernel the whole team, as before.
"""
from __future__ import annotations

import math

import numba

IO_BYTES_PER_THREAD = 256 << 10  # XLA: "256KB L2 Cache size"
CYCLES_PER_THREAD = 100_000      # XLA: "100us of work on a 2GHz core" (sic)

# HloCostAnalysis::HandleElementwiseOp's transcendentals; every other elementwise op is a flop.
TRANSCENDENTAL = frozenset({
    "erf", "exponential", "log", "logistic", "power", "sqrt", "cbrt", "rsqrt", "tanh",
    "sine", "cosine", "exponential-minus-one", "log-plus-one", "atan2", "tan"})
# No arithmetic: XLA's cost analysis counts no flops for these.
_NO_FLOPS = frozenset({
    "parameter", "constant", "broadcast", "reshape", "bitcast", "copy", "transpose", "slice",
    "concatenate", "pad", "reverse", "iota", "tuple", "get-tuple-element", "dynamic-slice"})


def team_for(flops: int, transcendentals: int, bytes_accessed: int, cores: int) -> int:
    """XLA's parallel task count for a kernel of this cost on `cores` threads, in [1, cores]."""
    bytes_accessed = max(1, bytes_accessed)
    if flops / bytes_accessed <= 1.0:
        most = min(cores, math.ceil(math.sqrt(cores)))
        want = bytes_accessed // IO_BYTES_PER_THREAD
    else:
        most = cores
        want = (flops + 2 * transcendentals + 10 * bytes_accessed) // CYCLES_PER_THREAD
    return max(1, min(most, want))


def computation_cost(comp) -> tuple[int, int, int]:
    """(flops, transcendentals, bytes accessed) of a fused computation run as one kernel:
    each elementwise op one flop (or one transcendental) per element of its result, a
    reduce its reducer's ops per element reduced, and the bytes of its parameters and
    result."""
    flops = trans = 0
    for ins in comp.instructions:
        op = ins.opcode
        if op in _NO_FLOPS or not ins.shape.is_array:
            continue
        if op == "reduce":
            body = ins.attrs.get("to_apply")
            ops = 1 if body is None else max(1, sum(
                1 for i in body.instructions if i.opcode not in _NO_FLOPS))
            inputs = ins.operands[:len(ins.operands) // 2]  # (the rest: init values)
            flops += ops * sum(o.shape.num_elements() for o in inputs if o.shape.is_array)
        elif op in TRANSCENDENTAL:
            trans += ins.shape.num_elements()
        else:
            flops += ins.shape.num_elements()
    moved = sum(p.shape.byte_size() for p in comp.parameters) + comp.root.shape.byte_size()
    return flops, trans, moved


def fusion_cost(ctx, comp) -> tuple[int, int, int]:
    """computation_cost of a fused computation, worked out once per context."""
    table = ctx.kernel_cache.table("_team_costs")
    cost = table.get(id(comp))  # (the module holds comp for as long as the context)
    if cost is None:
        cost = table[id(comp)] = computation_cost(comp)
    return cost


def loop_spread(ctx, items: int, cost: tuple[int, int, int]) -> "Spread":
    """The Spread of a parallel loop of `items` iterations and cost (flops, transcendentals,
    bytes) in a run with context `ctx`: its options' `loop_teams` "cost" (XLA's count) or
    "all" (the whole team), at most the calling thread's numba count."""
    cores = numba.get_num_threads()
    if ctx is not None and ctx.options.get("loop_teams", "cost") == "all":
        return Spread(0)
    return _spread(items, team_for(*cost, cores), cores)


def spread(items: int, k: int) -> "Spread":
    """The Spread of a parallel loop of `items` iterations on at most k threads."""
    return _spread(items, k, numba.get_num_threads())


def _spread(items: int, k: int, cores: int) -> "Spread":
    return Spread(-(-items // k) if 0 < k < cores else 0)


class Spread:
    """`with Spread(chunk):` a numba parallel loop started on this thread hands its
    iterations out in chunks of `chunk` (numba.set_parallel_chunksize: this thread's own
    setting, read where the loop starts; 0: numba's own split over the whole team) --
    `items` iterations in ceil(items / chunk) chunks, so at most that many threads work; the
    others of the team meet at the loop's end with nothing to do.

    Why chunks and not numba.set_num_threads(k): libgomp (numba's OpenMP layer) ends the
    threads a smaller team leaves out and creates them again for the next larger team
    (libgomp team.c: "The extra threads should be exiting") -- a pthread_create per thread
    each time kernels of different team sizes alternate.  The team keeps its size here."""

    __slots__ = ("chunk", "before")

    def __init__(self, chunk: int):
        self.chunk = chunk

    def __enter__(self):
        if self.chunk:
            self.before = numba.set_parallel_chunksize(self.chunk)
        return self

    def __exit__(self, *exc):
        if self.chunk:
            numba.set_parallel_chunksize(self.before)
        return False
