"""How many threads the BLAS libraries run a module's products on: one count per run, set
when the run starts and restored when it ends (issue 21, item 8), never flipped per product.

Two OpenBLAS builds run products here: numpy's (`libscipy_openblas64_`, the dot and
convolution kernels' matmuls) and scipy's (`libscipy_openblas`, the np.dot that numba
compiles into generated while loops: loop_sums.py); each has its own thread pool, and both
get the run's count.  A count set through threadpoolctl is process-wide.

The count (`run_threads`): RunOptions.blas_threads when given; else one thread per
FLOPS_PER_THREAD of the module's largest product (2*M*N*K of one matrix of a batch, found
once per executable: `largest_product`; not of the convolutions that run their gemms on
numba's threads, one BLAS thread each: conv_phases.threads_itself), at most the cores this
process may use divided among the devices that call BLAS at once, and at most what the
library chose at load time (OPENBLAS_NUM_THREADS and the like).  A module with no product
leaves the libraries alone.  With RunOptions.blas_pool a one-device run takes that count
for its large products on numba's threads instead, numpy's OpenBLAS on one thread for the
run (`set_pooled`, pool_gemm.py): OpenBLAS's team, which spins after each product, then
never wakes.

With RunOptions.blas_yield, a derived count (`Derived`, not RunOptions' blas_threads)
yields to other processes when each run starts: it is cut to the cores not taken by other
processes' runnable threads at that moment (`busy_elsewhere`, from /proc).  OpenBLAS splits a
gemm into one fixed share per thread and the caller waits for every share, so one share on a
core another process holds waits for the scheduler: a transformer training step took 100-650
ms on two BLAS threads and 31-66 ms on one, with two other processes busy on this 2-core
machine (XLA:CPU, whose thread pool hands out work as threads come free, 42-93 ms).  It is
not the default: OpenBLAS's bits depend on its thread count (sgemm 512x128x128 on 1 and on
2 threads: 7% of the results differ in their last bits), so a count that follows the load
would make two runs of one program on one machine round differently.

Small products under a large count: OpenBLAS itself runs a gemm with M*N*K <= 2^18 on the
calling thread, and larger ones on at most M*N*K / 2^18 threads (interface/gemm.c), so a
64x64x64 product costs the same with 1 or many threads (measured, benchmarks/blas_threads.py);
products between 2^18 and 2^24 multiply-adds in a module that also holds a large one now run
on several threads, where the per-product rule kept them on one.

Subnormals: OpenBLAS's worker threads keep their own MXCSR (the build has no
CONSISTENT_FPCSR), so only the part of a product computed on the calling thread runs with
the FTZ and DAZ bits cpu/denormals.py sets; with a count of 1 (every module whose largest
product is under 2 * FLOPS_PER_THREAD) all of it does.
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys

# 2*M*N*K of one product (one matrix of a batch) per thread: 2^24 flops is ~0.3-1 ms of one
# core's sgemm, against the tens of microseconds waking a thread costs.  A transformer's
# attention products (128x64x128, 2^21) keep a module on one thread; the MLP's 512x1024x1024
# (2^30) take every core.
FLOPS_PER_THREAD = 1 << 24

# numba's np.dot calls scipy's BLAS through this module (imported when numba first needs it:
# importing scipy.linalg costs ~0.1-0.2 s, not paid by a run that compiles no np.dot).
_SCIPY_BLAS = "scipy.linalg.cython_blas"


def blas_libraries() -> tuple:
    """(controller, its thread count when first seen) of each loaded BLAS library.  Looking
    them up takes ~0.7 ms, so it is done once, and once more after scipy's BLAS is loaded."""
    return _libraries(_SCIPY_BLAS in sys.modules)


@functools.lru_cache(maxsize=2)
def _libraries(scipy_loaded: bool) -> tuple:
    from threadpoolctl import ThreadpoolController
    firsts = {lib.filepath: most for lib, most in _libraries(False)} if scipy_loaded else {}
    return tuple((lib, firsts.get(lib.filepath, lib.num_threads))
                 for lib in ThreadpoolController().select(user_api="blas").lib_controllers)


class Derived(int):
    """A count run_threads derived from the module, for `sharing` devices calling BLAS at
    once; `now()` is what a run starting now takes."""

    def __new__(cls, n: int, sharing: int):
        self = super().__new__(cls, n)
        self.sharing = sharing
        return self

    def now(self) -> int:
        if self <= 1:
            return int(self)
        return max(1, min(int(self), (cores() - busy_elsewhere()) // self.sharing))


def busy_elsewhere(loadavg: str = "/proc/loadavg", tasks: str = "/proc/self/task") -> int:
    """Runnable threads of other processes now: the kernel's count of runnable threads
    (loadavg's fourth field) less this process's own (its OpenBLAS and numba workers spin
    between calls, so they are often among them).  0 where /proc cannot tell (not Linux)."""
    try:
        with open(loadavg) as f:
            running = int(f.read().split()[3].split("/")[0])
        # One runnable thread is the caller itself; gVisor reports 0 (and each /proc read
        # there is a slow system call: reading 30 threads' states cost ~8 ms a run)
        if running <= 1:
            return 0
        names = os.listdir(tasks)
    except (OSError, ValueError, IndexError):
        return 0
    mine = 0
    for name in names:
        try:
            with open(f"{tasks}/{name}/stat") as f:
                stat = f.read()
        except OSError:  # the thread ended meanwhile
            continue
        end = stat.rfind(")")  # the state follows "pid (comm) "; comm may hold ")"
        mine += stat[end + 2:end + 3] == "R"
    return max(0, running - mine)


def set_threads(n: int | None, pooled: bool = False) -> list:
    """Every BLAS library on n threads (None: its own first count, at most; a Derived count:
    what it takes now), numpy's on one where `pooled`; returns [(library, previous count)] of
    those changed."""
    if isinstance(n, Derived):
        n = n.now()
    numpy_blas = _numpy_blas() if pooled else None
    one = numpy_blas.filepath if numpy_blas is not None else None  # (controllers are remade
    changed = []                                                   # once scipy's BLAS loads)
    for lib, most in blas_libraries():
        want = 1 if lib.filepath == one else most if n is None else min(n, most)
        k = lib.num_threads
        if k != want:
            lib.set_num_threads(want)
            changed.append((lib, k))
    return changed


def set_pooled(n: int | None) -> tuple[list, int]:
    """A run on one device whose large products pool on numba's threads (pool_gemm.py):
    numpy's OpenBLAS on one thread -- its team, which spins between products, never wakes --
    and the other libraries on `n` as set_threads sets them.  Returns (what set_threads
    returns, the products' threads: n as a Derived count takes it now; 1 for None)."""
    if isinstance(n, Derived):
        n = n.now()
    if n is None:
        return [], 1
    return set_threads(n, pooled=n > 1), n


def restore(changed: list) -> None:
    for lib, k in changed:
        lib.set_num_threads(k)


@functools.lru_cache(maxsize=1)
def cores() -> int:
    """The cores this process may run on, found once (os.cpu_count took ~65 us a call)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def product_flops(ins) -> tuple[int, int]:
    """(2 * multiply-adds of the whole instruction, of its largest single gemm) of a dot or
    convolution; (0, 0) for anything else."""
    if ins.opcode == "dot" and ins.shape.is_array:
        lhs = ins.operands[0].shape
        k = 1
        for dim in ins.attrs.get("lhs_contracting_dims", ()):
            k *= int(lhs.dims[int(dim)])
        batch = 1
        for dim in ins.attrs.get("lhs_batch_dims", ()):
            batch *= int(lhs.dims[int(dim)])
        total = 2 * ins.shape.num_elements() * k
        return total, total // max(batch, 1)
    if ins.opcode == "convolution" and ins.shape.is_array:
        rhs = ins.operands[1].shape
        labels = ins.attrs["dim_labels"]
        out_features = int(rhs.dims[labels.kernel_output_feature])
        groups = max(int(ins.attrs.get("feature_group_count", 1)),
                     int(ins.attrs.get("batch_group_count", 1)))
        total = 2 * ins.shape.num_elements() * (rhs.num_elements() // max(out_features, 1))
        return total, total // groups
    return 0, 0


def largest_product(module) -> int:
    """2*M*N*K of the module's largest single gemm (any computation: loop bodies, fusions),
    but for the convolutions that run their gemms on numba's threads, one BLAS thread each
    (conv_phases.threads_itself): the BLAS count is not theirs, and OpenBLAS's team woken
    for nothing but them spins between products against numba's threads.  A module whose
    only products are those counts 1 (one BLAS thread: where devices run at once, such a
    convolution falls back to numpy's product, one thread per device), not 0 (the
    libraries left as they are)."""
    from .conv_phases import threads_itself
    largest, own = 0, False
    for comp in module.computations:
        for ins in comp.instructions:
            if ins.opcode == "convolution" and threads_itself(ins):
                own = True
            else:
                largest = max(largest, product_flops(ins)[1])
    return largest or int(own)


def run_threads(largest: int, fixed: int | None, sharing: int = 1,
                yielding: bool = False) -> int | None:
    """The BLAS threads of a run: `fixed` (RunOptions.blas_threads) when given; else one per
    FLOPS_PER_THREAD of `largest` (the module's largest product), at most the cores shared
    by `sharing` devices calling BLAS at once; None (leave the libraries as they are) for a
    module with no product.  set_threads caps it at what each library has, and, `yielding`
    (RunOptions.blas_yield), a derived count at the cores other processes leave free when
    the run starts (Derived.now)."""
    if fixed is not None:
        return fixed
    if largest <= 0:
        return None
    sharing = max(sharing, 1)
    n = max(1, min(largest // FLOPS_PER_THREAD, cores() // sharing))
    return Derived(n, sharing) if yielding else n


@contextlib.contextmanager
def for_run(n: int | None):
    """Every BLAS library on `n` threads inside (None: left alone), as it was after."""
    if n is None:
        yield
        return
    changed = set_threads(n)
    try:
        yield
    finally:
        restore(changed)


def devices_at_once(ctx) -> bool:
    """Whether `ctx`'s device runs at the same time as other devices of its process (device
    threads, or fibers on several threads), which then share the cores among them."""
    place = ctx.spmd
    return place is not None and getattr(place.transport, "parallel", False)


@contextlib.contextmanager
def one_blas_thread():
    """numpy's OpenBLAS on one thread inside, as it was after: a gemm called from a numba
    thread would otherwise start OpenBLAS's own team (process-wide, from every numba thread
    at once).  numba's team is left as it is: a loop over fewer work items than the team
    leaves the others idle, where a smaller team makes libgomp end threads that the next
    full loop creates again (team_size.Spread)."""
    blas = _numpy_blas()
    before_blas = blas.num_threads if blas is not None else 1
    if before_blas != 1:
        blas.set_num_threads(1)
    try:
        yield
    finally:
        if before_blas != 1:
            blas.set_num_threads(before_blas)


@functools.lru_cache(maxsize=1)
def _numpy_blas():
    """threadpoolctl's controller of numpy's OpenBLAS (the library gang_gemm calls)."""
    for lib, _ in blas_libraries():
        if "numpy" in os.path.basename(os.path.dirname(lib.filepath)):
            return lib
    return None
