"""Where values live during a run: host numpy arrays (cpu) or numba.cuda device arrays.

The executor and the structural kernels (tuple, while, conditional, ...) are written once
against these few operations.  On CUDA, inputs and constants are copied in once, results
out once, and control flow reads back only the predicate or index it needs.
"""
from __future__ import annotations

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
    name = "cpu"

    def to_device(self, value):
        return value

    def to_host(self, value):
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


class CudaMemory:
    name = "cuda"

    def __init__(self):
        from numba import cuda
        self.cuda = cuda

    def _in(self, a):
        if _on_device(a):
            return a
        a = np.asarray(a)
        if a.dtype.kind == "V" or a.dtype.type.__module__.startswith("ml_dtypes"):
            from .cpu.structural import ExecutionError
            raise ExecutionError(f"element type {a.dtype} (an input or constant) is not "
                                 "supported on cuda: numba.cuda has no such arrays (run on "
                                 "--device cpu)")
        return self.cuda.to_device(np.ascontiguousarray(a).reshape(a.shape))

    def to_device(self, value):
        return _map(self._in, value)

    def to_host(self, value):
        return _map(lambda a: a.copy_to_host() if _on_device(a) else np.asarray(a),
                    value)

    def scalar(self, value):
        host = value.copy_to_host() if _on_device(value) else np.asarray(value)
        return np.asarray(host).reshape(()).item()

    def zeros(self, dims, dtype):
        return self.cuda.to_device(np.zeros(dims, dtype))

    def empty(self, dims, dtype):
        return self.cuda.device_array(dims, dtype)

    def adopt(self, value):
        return self._in(value)


def memory_for(device: str):
    if device == "cuda":
        return CudaMemory()
    return HostMemory()
