"""How many threads the BLAS library (numpy's OpenBLAS) runs one product on.

OpenBLAS splits every sgemm over all its threads, and its threads spin between calls.  On
cores that other work shares -- numba's loop threads, other device threads, other jobs --
a small product then waits a scheduler slice for its second thread, and spinning threads
take the cores the rest of the run needs.  Measured on the project's 2-core machine at load
3-10 (benchmarks/run.py, README "Where the speed goals stand"): a transformer block's
attention (32 products of 128x64x128 in one np.matmul) 1.2 s with OpenBLAS's threads, 6 ms
on one; the whole block 2.8x XLA:CPU on one thread against 15x; a conv net's training step
7x against 21x.  A very large product may still gain from every core (XLA's Eigen
contractions go parallel by cost), so each product gets one thread below
SERIAL_BELOW_FLOPS and all of them from there.

Only where one thread calls BLAS at a time: on device threads (several devices calling
BLAS at once) the multi-device runner divides the threads among them for the whole run
(spmd/runner.py), and this leaves the count alone.
"""
from __future__ import annotations

import contextlib
import functools

# 2*M*N*K of one product (one matrix of a batch): below it one thread.  Measured on the
# project's 2-core machine even at load 1.2-2 (benchmarks/run.py, alternating runs): the
# MLP's 512x1024x1024 dots 26-28 ms on one thread against 53-76 ms on OpenBLAS's two, the
# 3x3 conv's 64x576x3136 GEMMs 47-52 against 98-224 ms, a transformer block 50-63 against
# 121-132 ms; square matmuls up to 2048 were no slower on one thread (benchmarks/
# scaling.py).  So only products past that (2^35: 2048x2048 by 2048x2048 is 2^34) take
# every thread the library has.
SERIAL_BELOW_FLOPS = 1 << 35


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
    place = getattr(ctx, "spmd", None)
    return place is not None and getattr(place.transport, "parallel", False)


@contextlib.contextmanager
def for_product(ctx, m: int, n: int, k: int):
    """The thread count for the M x K by K x N products (per batch member) run inside, on
    `ctx`, then the library's count as it was (the process's other numpy calls keep
    theirs); left alone where the device shares the process with devices running at once."""
    if devices_at_once(ctx):
        yield
        return
    changed = set_threads(1 if 2 * m * n * k < SERIAL_BELOW_FLOPS else None)
    try:
        yield
    finally:
        restore(changed)
