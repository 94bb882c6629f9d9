"""Where values live during a run: host numpy arrays (cpu) or numba.cuda device arrays.

The executor and the structural kernels (tuple, while, conditional, ...) are written once
against these few operations.  On CUDA, inputs and constants are copied in once, results
out once, and control flow reads back only the predicate or index it needs.
"""
from __future__ import annotations

import functools

import numpy as np


def _on_device(a) -> bool:
    """A numba.cuda device array, real or the simulator's (which has no is_cuda_array)."""
    return callable(getattr(a, "copy_to_host", None)) and hasattr(a, "shape")


def flatten(value) -> list:
    """The leaves of a (nested) tuple value, depth-first, as they are (host or device)."""
    if isinstance(value, tuple):
        return [x for v in value for x in flatten(v)]
    return [value]


def _map(fn, value):
    if isinstance(value, tuple):
        return tuple(_map(fn, v) for v in value)
    if isinstance(value, list):  # the argument list of a run
        return [_map(fn, v) for v in value]
    return fn(value)


class HostMemory:
    """Host numpy arrays (backend.CpuBackend's memory)."""
    on_host = True
    simulated = False
    # Kernels finish before they return: nothing to wait for when timing them (profiler.py).
    synchronize = None

    def to_device(self, value):
        return value

    def to_host(self, value, shape=None):
        return value

    def scalar(self, value):
        """The Python scalar of a rank-0 value (a while predicate, a branch index)."""
        return np.asarray(value).reshape(()).item()

    def zeros(self, dims, dtype):
        return np.zeros(dims, dtype)

    def empty(self, dims, dtype):
        return np.empty(dims, dtype)

    def adopt(self, value):
        """A value a plugin kernel returned, as this memory holds it."""
        return np.asarray(value)

    def fresh(self, value):
        """A value of its own holding `value`'s elements (a collective's result must not
        alias a peer's buffer, or its own operand's)."""
        return np.array(value, copy=True)

    def dtype_of(self, dtype) -> np.dtype:
        """The dtype an array of `dtype` values has in this memory."""
        return np.dtype(dtype)


class CudaMemory:
    """numba.cuda device arrays.  Element types numba has no dtype for (bf16, f8/f4,
    sub-byte ints: cuda/launch.NARROW_TYPES) travel as their values in float32 / int8 /
    uint8 (exact: every such value is one), so results need their HLO shape to come back
    in their own dtype.  (backend.CudaBackend's memory.)"""
    on_host = False

    def __init__(self):
        from numba import cuda
        from .cuda.launch import device_dtype
        self.cuda = cuda
        self._dtype = device_dtype

    def _in(self, a):
        if _on_device(a):
            return a
        a = np.asarray(a)
        if a.dtype.kind == "V" and not a.dtype.type.__module__.startswith("ml_dtypes"):
            from .common.errors import ExecutionError
            raise ExecutionError(f"a value of dtype {a.dtype} cannot go to the cuda device")
        wide = np.ascontiguousarray(a.astype(self._dtype(a.dtype), copy=False))
        return self.cuda.to_device(wide.reshape(a.shape))  # rank 0 stays rank 0

    def to_device(self, value):
        return _map(self._in, value)

    def synchronize(self) -> None:
        """Wait for the launched kernels (a profile times them, not their launches)."""
        self.cuda.synchronize()

    def to_host(self, value, shape=None):
        """Copy a result back; with its Shape, narrow element types return to their dtype."""
        def back(a, s):
            host = a.copy_to_host() if _on_device(a) else np.asarray(a)
            if s is not None and s.is_array and host.dtype != s.dtype \
                    and host.dtype == self._dtype(s.dtype):  # a narrow type's values
                host = host.astype(s.dtype)
            return host
        return _zip_shape(back, value, shape)

    def scalar(self, value):
        host = value.copy_to_host() if _on_device(value) else np.asarray(value)
        return np.asarray(host).reshape(()).item()

    def zeros(self, dims, dtype):
        return self.cuda.to_device(np.zeros(dims, self._dtype(dtype)))

    def empty(self, dims, dtype):
        return self.cuda.device_array(dims, self._dtype(dtype))

    def adopt(self, value):
        return self._in(value)

    def dtype_of(self, dtype) -> np.dtype:
        """The device dtype holding `dtype` values (float32 for bf16, int8 for s4 ...)."""
        return self._dtype(dtype)

    @property
    def simulated(self) -> bool:
        """numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1): kernels are Python threads."""
        from numba import config
        return bool(config.ENABLE_CUDASIM)

    def fresh(self, value):
        """A device array of its own holding `value`'s elements (a host array or a device
        array), in its dtype."""
        copy = self.cuda.device_array(value.shape, value.dtype)
        copy.copy_to_device(value)
        return copy


def _zip_shape(fn, value, shape):
    """fn(leaf, its array Shape or None) over a value and its (tuple) shape."""
    if isinstance(value, tuple):
        subs = shape.tuple_shapes if shape is not None and shape.is_tuple else [None] * len(value)
        return tuple(_zip_shape(fn, v, s) for v, s in zip(value, subs))
    if isinstance(value, list):  # the argument list of a run
        return [_zip_shape(fn, v, None) for v in value]
    return fn(value, shape)


@functools.cache
def keep_freed_buffers() -> None:
    """glibc's malloc keeps the blocks freed up to 32 MiB for reuse (its mmap threshold fixed
    at 32 MiB, its heap trimmed above 256 MiB), once per process, unless the environment
    sets malloc's tunables.  Every array a run makes comes from malloc, and under glibc's
    own thresholds a freed array over 128 KiB (its starting mmap threshold) goes back to the
    kernel: the next run's array of that size faults its pages in anew.  A conv net
    training step freed and faulted ~1 ms of such arrays a run (17.6 -> 11.7 ms with the
    fixed thresholds, one core, load 8); XLA:CPU's own result buffers, which it takes from
    malloc, fault the same way (a 16 MiB all-reduce result: 6,100 page faults a call over
    MPI, 0 with them).  Process-wide: a program embedding xlaplug that wants glibc's
    defaults sets MALLOC_MMAP_THRESHOLD_ (or GLIBC_TUNABLES), which this leaves alone.
    Outside glibc: nothing."""
    import ctypes
    import os
    if any(v in os.environ for v in ("GLIBC_TUNABLES", "MALLOC_MMAP_THRESHOLD_",
                                     "MALLOC_TRIM_THRESHOLD_")):
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    m_trim_threshold, m_mmap_threshold = -1, -3  # malloc.h
    mallopt(m_mmap_threshold, 32 << 20)  # (glibc's largest)
    mallopt(m_trim_threshold, 256 << 20)
