"""Shared helpers of the CUDA kernels: numba.cuda access, element-type checks, device
buffers for HLO shapes, grid sizing and 1-d launches.

Stable API (other CUDA kernel modules import these):

  cuda_module()                 numba.cuda (imported lazily; the simulator's under
                                NUMBA_ENABLE_CUDASIM=1)
  simulating()                  True under numba's CUDA simulator
  is_device_array(x)            a numba.cuda device array (real or simulated)
  SUPPORTED_TYPES               element types the CUDA backend handles (all)
  NARROW_TYPES                  the ml_dtypes ones, held as values in a wider device dtype
  device_dtype(t)               the device dtype of an element type / host dtype
  device_empty(shape)           an uninitialised device array for an array Shape
  device_zeros(shape)           a zero-filled one
  flat(arr)                     a contiguous device array as a 1-d view (rank 0 -> 1 element)
  grid_1d(n, threads=256)       (blocks, threads_per_block) covering n elements
  launch_1d(kernel, n, *args)   kernel[grid_1d(n)](*args); nothing when n == 0
  stride_loop(n)                the header line of a grid-stride loop over range(n)
  launch_stride_loop(kernel, n, *args)
                                launch_1d for a kernel written as a stride_loop: under
                                the simulator a few threads loop over all n elements
  jit_source(src, name, ns)     cuda.jit of a function defined by generated source
  cached_kernel(key, make)      the kernel (or device function) compiled for `key`: make()
                                on the first call, the same object after
  src_kernel(key, src, name, ns)
                                cached_kernel of jit_source(src, name, ns)
  elementwise_launch(kernel, out, *operands)
                                launches a kernel(out_flat, *operand_flats) over out.size
                                elements (operands flattened; a 1-element operand stands
                                for a broadcast scalar -- the kernel indexes it at 0)

Kernels use `if i < n` guards, for which grid_1d gives enough blocks for one element per
thread, or grid-stride loops (stride_loop, launched by launch_stride_loop).
"""
from __future__ import annotations

import math
import os
import threading

import numpy as np

from ...hlo import dtypes as D
from ..common.scalar_base import numba_dtype
from ..common.errors import ExecutionError

# Every element type runs on CUDA.  numba.cuda arrays hold the numpy types natively; the
# ml_dtypes ones (bf16, the f8/f4 formats, the sub-byte integers) have no numba dtype, so a
# device array holds their *values* in a wider numba type -- narrow floats in float32 (every
# such value is exactly a float32), sub-byte integers in int8 / uint8 -- the same compute
# types the CPU scalar kernels use.  Kernels keep those values canonical (rounded to the
# format, wrapped to the width): elementwise and reducer code rounds after each op as on
# the CPU, and cuda/narrow.py rounds the results of every other computing kernel.
SUPPORTED_TYPES = frozenset(D.ELEMENT_DTYPES)
NARROW_TYPES = frozenset(t for t, dt in D.ELEMENT_DTYPES.items()
                         if dt.type.__module__.startswith("ml_dtypes"))


def device_dtype(etype_or_dtype) -> np.dtype:
    """The numba.cuda dtype holding an element type (an HLO name or a numpy/ml_dtypes
    dtype) on the device: the dtype CPU compiled loops carry it in (common/scalar_base.numba_dtype:
    float32 / int8 / uint8 for NARROW_TYPES), except f16, which numba.cuda arrays hold."""
    dt = np.dtype(D.to_dtype(etype_or_dtype) if isinstance(etype_or_dtype, str)
                  else etype_or_dtype)
    return dt if dt == np.float16 else numba_dtype(dt)


WARP = 32
MAX_THREADS = 1024

_cuda = None


def cuda_module():
    """numba.cuda, imported on first use (the simulator's when NUMBA_ENABLE_CUDASIM=1)."""
    global _cuda
    if _cuda is None:
        from numba import cuda
        _cuda = cuda
    return _cuda


def simulating() -> bool:
    """True when kernels run in numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1)."""
    try:
        from numba.core import config
        return bool(config.ENABLE_CUDASIM)
    except Exception:  # pragma: no cover - numba always has config
        return os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def is_device_array(x) -> bool:
    """A numba.cuda device array (DeviceNDArray, or the simulator's FakeCUDAArray, which
    numba.cuda.is_cuda_array does not exist for)."""
    return callable(getattr(x, "copy_to_host", None)) and hasattr(x, "shape")


# ---- buffers -----------------------------------------------------------------------------

def _dims(shape) -> tuple:
    return tuple(int(d) for d in shape.dims)


def device_empty(shape):
    """An uninitialised numba.cuda device array of an array Shape (dtype and dims)."""
    if not shape.is_array:
        raise ExecutionError(f"device_empty: {shape} is not an array shape")
    return cuda_module().device_array(_dims(shape), device_dtype(shape.element_type))


def device_zeros(shape):
    """A zero-filled numba.cuda device array of an array Shape."""
    out = device_empty(shape)
    n = int(np.prod(_dims(shape))) if shape.dims else 1
    if n:
        _fill_zero(flat(out))
    return out


def flat(arr):
    """A contiguous device array as a 1-d view of its elements (rank 0: one element)."""
    if len(arr.shape) == 1:
        return arr
    return arr.reshape(int(np.prod(arr.shape)) if arr.shape else 1)


# ---- launches ----------------------------------------------------------------------------

def grid_1d(n: int, threads: int = 256) -> tuple[int, int]:
    """(blocks, threads per block) giving at least one thread per element of n.

    On a GPU threads is a multiple of the warp size (at most 1024), shrunk for small n;
    under the simulator (which runs every thread as a Python thread) it is at most n."""
    n = max(int(n), 1)
    threads = max(1, min(int(threads), MAX_THREADS))
    if simulating():
        tpb = min(threads, n)
    else:
        tpb = min(threads, -(-n // WARP) * WARP)
    return max(1, math.ceil(n / tpb)), tpb


def launch_1d(kernel, n: int, *args, threads: int = 256) -> None:
    """kernel[grid_1d(n)](*args); a no-op for n == 0 (CUDA rejects empty grids)."""
    if n <= 0:
        return
    blocks, tpb = grid_1d(n, threads)
    kernel[blocks, tpb](*args)


def stride_loop(n: str, var: str = "i") -> str:
    """The first line of a grid-stride loop of `var` over range(n) (a kernel's source text):
    thread t of T takes elements t, t + T, ..."""
    return f"for {var} in range(cuda.grid(1), {n}, cuda.gridsize(1)):"


# The simulator starts a Python thread per CUDA thread (~170 us each: most of a simulated
# test's time, far more than the kernel bodies).  A grid-stride kernel there runs on two
# blocks of a few threads, so the loop still steps across blocks and threads.
SIM_STRIDE_BLOCKS, SIM_STRIDE_THREADS = 2, 4


def launch_stride_loop(kernel, n: int, *args, threads: int = 256) -> None:
    """Launch a kernel written as a stride_loop over n elements: on a GPU one element per
    thread (grid_1d), under the simulator SIM_STRIDE_BLOCKS x SIM_STRIDE_THREADS threads;
    a no-op for n == 0."""
    if n <= 0:
        return
    if simulating():
        tpb = min(SIM_STRIDE_THREADS, n)
        blocks = min(SIM_STRIDE_BLOCKS, -(-n // tpb))
    else:
        blocks, tpb = grid_1d(n, threads)
    kernel[blocks, tpb](*args)


def elementwise_launch(kernel, out, *operands, threads: int = 256):
    """Launch kernel(out_flat, *operand_flats), a stride_loop over out's elements; returns
    out.

    Operands are flattened (their size is out.size, or 1 for a broadcast scalar that the
    kernel reads at index 0)."""
    n = int(np.prod(out.shape)) if out.shape else 1
    if n:
        launch_stride_loop(kernel, n, flat(out), *(flat(a) for a in operands), threads=threads)
    return out


def jit_source(src: str, name: str, namespace: dict | None = None, device: bool = False,
               filename: str | None = None):
    """cuda.jit of function `name` defined by Python source `src`, executed with `cuda`
    (numba.cuda), `np` and `math` -- plus `namespace` -- as its globals.  (Kernels must find
    numba.cuda among their globals: the simulator swaps that module per thread.)"""
    import linecache
    cuda = cuda_module()
    ns = {"cuda": cuda, "np": np, "math": math}
    if namespace:
        ns.update(namespace)
    filename = filename or f"<xlaplug cuda {name} {len(linecache.cache)}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    exec(compile(src, filename, "exec"), ns)
    fn = ns[name]
    return cuda.jit(device=True)(fn) if device else cuda.jit(fn)


# ---- compiled kernels --------------------------------------------------------------------
# Every kernel and device function the CUDA kernels compile is kept in this one table, by a
# key naming what it is and what it was built for (("im2col", out dtype, in dtype), ...).
# It is a process-wide table on purpose, not state of a run: what it holds is code, a pure
# function of its key, and numba keeps a dispatcher's compiled code for the process and
# its CUDA context alike.  Kept per execution context instead (ctx.kernel_cache), every
# new executable would compile each kernel again on a GPU (numba compiles per dispatcher and
# signature); the CPU's compiled loops are kept per process likewise (cpu/jit_cache.py).  The
# lock: device threads (runtime/spmd) may ask for the same kernel at once; it is
# reentrant because a `make` may build the kernels it calls through this table too.
_COMPILED: dict = {}
_COMPILING = threading.RLock()


def cached_kernel(key, make):
    """The kernel compiled for `key`: `make()` builds it on the first call, later calls
    get the same object.  A key starts with a name of its own (a string, or a tuple whose
    first item is one), so that the modules sharing the table never meet."""
    with _COMPILING:
        k = _COMPILED.get(key)
        if k is None:
            k = _COMPILED[key] = make()
        return k


def src_kernel(key, src: str, name: str, namespace: dict | None = None):
    """cached_kernel of jit_source(src, name, namespace)."""
    return cached_kernel(key, lambda: jit_source(src, name, namespace))


_ZERO_SRC = """
def zero(out):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        out[i] = 0
"""


def _fill_zero(out_flat) -> None:
    launch_stride_loop(src_kernel("zero", _ZERO_SRC, "zero"), out_flat.shape[0], out_flat)


__all__ = ["NARROW_TYPES", "SUPPORTED_TYPES", "cached_kernel", "cuda_module", "device_dtype",
           "device_empty", "device_zeros", "elementwise_launch", "flat", "grid_1d",
           "is_device_array", "jit_source", "launch_1d", "launch_stride_loop", "simulating",
           "src_kernel", "stride_loop"]
