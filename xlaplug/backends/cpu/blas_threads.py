"""How many threads the BLAS library (numpy's OpenBLAS) runs one product on.

OpenBLAS splits every sgemm over all its threads, whatever its size, and its threads spin
between calls; a small product then pays for waking threads that have almost nothing to do.
XLA:CPU parallelizes a contraction by its cost.  So does this: a product gets one thread per
FLOPS_PER_THREAD of work, at most what the library has.  On a quiet 13-core machine
(2026-12-05, load 0.00, benchmarks/run.py) the earlier rule -- one thread below 2^35 flops,
tuned on a 2-core machine shared with other jobs at load 2-10 -- held the MLP's 1-GFLOP dots
to one core: 24.0 ms against XLA's 3.5.  Users run on quiet machines; on a loaded one,
`RunOptions(blas_threads=1)`, or `OPENBLAS_NUM_THREADS=1` for the CLI, is the way back.

Only where one thread calls BLAS at a time: on device threads (several devices calling
BLAS at once) the multi-device runner divides the threads among them for the whole run
(spmd/runner.py), and this leaves the count alone.
"""
from __future__ import annotations

import contextlib
import functools

# 2*M*N*K of one product (one matrix of a batch) per thread: 2^24 flops is ~0.3-1 ms of one
# core's sgemm, against the tens of microseconds waking a thread costs.  A transformer's
# attention products (128x64x128, 2^21) stay on one thread; the MLP's 512x1024x1024 (2^30)
# take every thread.
FLOPS_PER_THREAD = 1 << 24


@functools.lru_cache(maxsize=1)
def blas_libraries() -> tuple:
    """(controller, its thread count when first seen) of each loaded BLAS library, found
    once (looking them up takes ~0.7 ms; setting a count through one ~1 us).  The first
    count is what the library chose at load time, from OPENBLAS_NUM_THREADS and the like:
    the most this module gives a product."""
    from threadpoolctl import ThreadpoolController
    return tuple((lib, lib.num_threads)
                 for lib in ThreadpoolController().select(user_api="blas").lib_controllers)


def set_threads(n: int | None) -> list:
    """Every BLAS library on n threads (None: its own first count, at most); returns
    [(library, previous count)] of those changed."""
    changed = []
    for lib, most in blas_libraries():
        want = most if n is None else min(n, most)
        k = lib.num_threads
        if k != want:
            lib.set_num_threads(want)
            changed.append((lib, k))
    return changed


def restore(changed: list) -> None:
    for lib, k in changed:
        lib.set_num_threads(k)


def devices_at_once(ctx) -> bool:
    """Whether `ctx`'s device runs at the same time as other devices of its process (device
    threads, or fibers on several threads), which then share the cores among them."""
    place = ctx.spmd
    return place is not None and getattr(place.transport, "parallel", False)


def threads_for(flops: int, ctx) -> int:
    """Threads for one product of `flops`: the run's own count where it set one
    (RunOptions.blas_threads), else one per FLOPS_PER_THREAD (set_threads caps either at
    what the library has)."""
    fixed = ctx.blas_threads
    return fixed if fixed is not None else max(1, flops // FLOPS_PER_THREAD)


@contextlib.contextmanager
def for_product(ctx, m: int, n: int, k: int):
    """The thread count for the M x K by K x N products (per batch member) run inside, on
    `ctx`, then the library's count as it was (the process's other numpy calls keep
    theirs); left alone where the device shares the process with devices running at once."""
    if devices_at_once(ctx):
        yield
        return
    changed = set_threads(threads_for(2 * m * n * k, ctx))
    try:
        yield
    finally:
        restore(changed)
