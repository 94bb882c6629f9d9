"""How many threads the BLAS library (numpy's OpenBLAS) runs one product on.

OpenBLAS splits every sgemm over all its threads, and its threads spin between calls.  On
cores that other work shares -- numba's loop threads, other device threads, other jobs --
a small product then waits a scheduler slice for its second thread, and spinning threads
take the cores the rest of the run needs.  Measured on the project's 2-core machine at load
3-10 (benchmarks/run.py, README "Where the speed goals stand"): a transformer block's
attention (32 products of 128x64x128 in one np.matmul) 1.2 s with OpenBLAS's threads, 6 ms
on one; the whole block 2.8x XLA:CPU on one thread against 15x; a conv net's training step
7x against 21x.  A large product still gains from every core (XLA's Eigen contractions go
parallel by cost the same way), so each product gets one thread below SERIAL_BELOW_FLOPS
and all of them from there.

Only where one thread calls BLAS at a time: on device threads (several devices calling
BLAS at once) the multi-device runner divides the threads among them for the whole run
(spmd/runner.py), and this leaves the count alone.
"""
from __future__ import annotations

import functools

# 2*M*N*K of one product (one matrix of a batch): below it one thread.  2^27 is a 512x512
# by 512x256 product, about 2-10 ms of one core's sgemm.
SERIAL_BELOW_FLOPS = 1 << 27


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


def for_product(ctx, m: int, n: int, k: int) -> None:
    """Sets the thread count for one M x K by K x N product (per batch member) about to run
    on `ctx`, unless its device shares the process with concurrently running devices."""
    place = getattr(ctx, "spmd", None)
    if place is not None and getattr(place.transport, "parallel", False):
        return
    set_threads(1 if 2 * m * n * k < SERIAL_BELOW_FLOPS else None)
