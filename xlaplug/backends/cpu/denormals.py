"""Flush-to-zero and denormals-are-zero while a CPU module runs, as XLA:CPU runs.

XLA:CPU computes with the x86 MXCSR's FTZ and DAZ bits set (its runtime's scoped
flush-denormal guard): a subnormal operand reads as zero and a subnormal result is written
as zero, in every kernel -- reductions, dots, convolutions, windows, scans -- not only in
elementwise code.  Our elementwise and fused-loop code flushes explicitly (elementwise.py
`flush`, the generated loops), but numpy's reductions and OpenBLAS's products ran with the
bits clear: summing 64 copies of 1e-39 gave 6.4e-38 where XLA gives 0, a dot of subnormal
rows 8e-39 where XLA gives 0 (tests/test_denormals.py, jax as the oracle).

So the executing thread gets both bits for the length of a run (`ExecContext.run`), and its
own MXCSR back afterwards: a library user's numpy calls outside a run keep IEEE gradual
underflow.  The register is per thread (device threads each set their own; greenlet
switches save and restore it with the rest of a fiber's state).  Threads a kernel starts
itself -- numba's parallel loops, OpenBLAS's threads for products past
blas_threads.SERIAL_BELOW_FLOPS -- keep theirs: the generated loops flush explicitly, and a
product that large is where a subnormal partial sum cannot move an f32 result.

Only on x86-64 Linux (the bits are SSE's, the layout is its fenv_t's); elsewhere `env_for`
gives None and the explicit flushes are what there is.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import platform
import sys

FTZ, DAZ = 0x8000, 0x0040
# fenv_t on x86-64 Linux (glibc and musl alike): the x87 environment (28 bytes), then the
# MXCSR; fesetenv loads both.  Read and written through libm's fegetenv / fesetenv: no
# compiler needed (numba would cost ~0.7 s of start-up to a run that compiles nothing).
_ENV_BYTES, _MXCSR_AT = 32, 28


def available() -> bool:
    return sys.platform.startswith("linux") and \
        platform.machine().lower() in ("x86_64", "amd64") and _libm() is not None


@functools.lru_cache(maxsize=None)
def _libm():
    """libm, once it is known that fesetenv carries the MXCSR's FTZ and DAZ bits (checked
    on a probe thread's own register), else None."""
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        env = Env(lib)
        old = env.flush()
        try:
            got = ctypes.create_string_buffer(_ENV_BYTES)
            lib.fegetenv(got)
            ok = int.from_bytes(got.raw[_MXCSR_AT:], "little") & (FTZ | DAZ) == FTZ | DAZ
        finally:
            env.restore(old)
        return lib if ok else None
    except (OSError, AttributeError):
        return None


class Env:
    """One context's buffers for saving this thread's floating-point environment and
    loading it with FTZ and DAZ set (made once: a run pays four libm calls, ~2 us)."""

    def __init__(self, lib=None):
        lib = lib or _libm()
        self._get, self._set, self._copy = lib.fegetenv, lib.fesetenv, ctypes.memmove
        self._old = ctypes.create_string_buffer(_ENV_BYTES)
        self._new = ctypes.create_string_buffer(_ENV_BYTES)
        self._old_mxcsr = ctypes.c_uint32.from_buffer(self._old, _MXCSR_AT)
        self._new_mxcsr = ctypes.c_uint32.from_buffer(self._new, _MXCSR_AT)

    def flush(self) -> bool:
        """Sets FTZ and DAZ; whether there is anything to restore."""
        self._get(self._old)
        mx = self._old_mxcsr.value
        if mx & (FTZ | DAZ) == FTZ | DAZ:
            return False
        self._copy(self._new, self._old, _ENV_BYTES)
        self._new_mxcsr.value = mx | FTZ | DAZ
        self._set(self._new)
        return True

    def restore(self, changed: bool) -> None:
        if changed:
            self._set(self._old)


def env_for(device: str) -> Env | None:
    """A context's Env on the CPU where the bits exist, else None."""
    return Env() if device == "cpu" and available() else None
