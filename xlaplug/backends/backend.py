"""One Backend object per device: what the shared layer may ask of a device, so that it
never compares device names (issue 21, item 3).

The executor, the thunk builder, the structural kernels and collectives, check-plugins and
the sessions ask `backend_for(name)`:

  name             the device name plugins register kernels under (`device="cuda"`);
  status/require   whether it can run here (CUDA: a GPU with numba.cuda, or the simulator);
  on_host          its values are host numpy arrays (constants need no copy in; XLA:CPU's
                   FFI can call its kernels; the MPI transport may reduce in place);
  memory()         a fresh memory for one execution context (device.py);
  kernel(op)       its own kernel for an opcode (registry.py; its kernel package and the
                   device-neutral ones, common/ and spmd/, loaded on first use);
  own_kernels()    per execution context: opcode -> its own kernel as that context runs it
                   (the CPU runs reductions and products flushed, as XLA:CPU does);
  adapt_kernel     any kernel, a plugin's included, as this device runs it (CUDA rounds the
                   narrow results its kernels compute wide);
  scalar_function  a reducer / comparator computation compiled for the device.

Backends hold no state of their own: a new object per call costs nothing, and what a run
needs (memory, FP environment) is made per execution context.
"""
from __future__ import annotations

from typing import Callable, Protocol, runtime_checkable

from ..hlo.errors import HloError
from .device import CudaMemory, HostMemory, keep_freed_buffers


@runtime_checkable
class Backend(Protocol):
    name: str
    kernel_package: str
    on_host: bool
    # Runs a product and its elementwise epilogue as one kOutput fusion (passes/dot_epilogue).
    output_fusions: bool
    # Runs runs of small-array instructions as one compiled function (passes/small_regions).
    small_regions: bool

    def status(self) -> tuple[bool, str]: ...
    def require(self) -> None: ...
    def memory(self): ...
    def kernel(self, opcode: str) -> Callable | None: ...
    def own_kernels(self) -> Callable[[str], Callable | None]: ...
    def adapt_kernel(self, ins, fn: Callable) -> Callable: ...
    def scalar_function(self, comp) -> Callable: ...


class CpuBackend:
    """Host numpy arrays; kernels in backends/cpu (numba-compiled loops, numpy, BLAS)."""
    name = "cpu"
    kernel_package = "xlaplug.backends.cpu"
    on_host = HostMemory.on_host
    output_fusions = True  # cpu/dot_epilogue.py
    small_regions = True  # cpu/region_code.py

    def status(self) -> tuple[bool, str]:
        return True, "the host CPU"

    def require(self) -> None:
        """Always there."""

    def memory(self) -> HostMemory:
        keep_freed_buffers()
        return HostMemory()

    def kernel(self, opcode: str) -> Callable | None:
        from .registry import lookup
        return lookup(opcode, self.name)

    def own_kernels(self) -> Callable[[str], Callable | None]:
        """Reductions, products, windowed reductions and f32/f64 add, subtract, multiply
        and divide run with FTZ and DAZ set, where XLA:CPU flushes (cpu/denormals.py); the
        Env's buffers are this context's own."""
        from .cpu.denormals import (FLUSHED_ARITH, FLUSHED_OPCODES, Env, available,
                                    flushed_arith, flushing)
        env = Env() if available() else None

        def own(opcode: str) -> Callable | None:
            fn = self.kernel(opcode)
            if fn is not None and env is not None:
                if opcode in FLUSHED_OPCODES:
                    fn = flushing(fn, env)
                elif opcode in FLUSHED_ARITH:
                    fn = flushed_arith(fn, env, opcode)
            return fn
        return own

    def adapt_kernel(self, ins, fn: Callable) -> Callable:
        """Host arrays hold every element type: a kernel runs as written."""
        return fn

    def scalar_function(self, comp) -> Callable:
        """A numba function (cpu/scalar_jit.py)."""
        from .cpu.scalar_jit import compile_scalar_computation
        return compile_scalar_computation(comp)


class CudaBackend:
    """numba.cuda device arrays; kernels in backends/cuda."""
    name = "cuda"
    kernel_package = "xlaplug.backends.cuda"
    on_host = CudaMemory.on_host
    output_fusions = False  # no kOutput fusion kernel yet
    small_regions = False  # no region kernel

    def status(self) -> tuple[bool, str]:
        from .cuda_support import cuda_status
        return cuda_status()

    def require(self) -> None:
        from .cuda_support import require_cuda
        require_cuda()

    def memory(self) -> CudaMemory:
        return CudaMemory()

    def kernel(self, opcode: str) -> Callable | None:
        from .registry import lookup
        return lookup(opcode, self.name)

    def own_kernels(self) -> Callable[[str], Callable | None]:
        """The kernels as registered: the CPU's FTZ/DAZ bits are the host thread's and mean
        nothing to a kernel running on the GPU."""
        return self.kernel

    def adapt_kernel(self, ins, fn: Callable) -> Callable:
        """fn, plus rounding of narrow results kernels compute wide (cuda/narrow.py)."""
        from .cuda.narrow import canonicalizing
        return canonicalizing(ins, fn)

    def scalar_function(self, comp) -> Callable:
        """A numba.cuda device function (cuda/scalar_cuda.py)."""
        from .cuda.scalar_cuda import compile_scalar_device_function
        return compile_scalar_device_function(comp)


# The one place a device name becomes a backend (a table of classes, no state).
BACKENDS: dict[str, type] = {"cpu": CpuBackend, "cuda": CudaBackend}


def backend_for(name: str) -> Backend:
    """The backend of a device name; a one-line error naming the known ones otherwise."""
    cls = BACKENDS.get(name)
    if cls is None:
        raise HloError(f"device must be {' or '.join(repr(n) for n in BACKENDS)}, got {name!r}")
    return cls()


def is_backend(name) -> bool:
    return name in BACKENDS


__all__ = ["BACKENDS", "Backend", "CpuBackend", "CudaBackend", "backend_for", "is_backend"]
