"""Flush-to-zero and denormals-are-zero in the kernels where XLA:CPU flushes.

XLA:CPU's reductions, dots, convolutions and windowed reductions flush: a sum of 64 values
of 1e-39 is 0 there, a dot of subnormal rows 0, a window sum over subnormals 0, the max of
subnormals 0 (jax 0.10.2; tests/test_denormals.py).  Ours ran on numpy's reductions and
OpenBLAS's products in IEEE arithmetic and gave the subnormals back.  Those kernels now run
with the x86 MXCSR's FTZ and DAZ bits set on the executing thread, and its own MXCSR back
after each call (`flushing`): a library user's numpy calls keep gradual underflow.  So do
unfused f32/f64 add, subtract, multiply and divide (`flushed_arith`: one ufunc under the
bits, as XLA's own instruction runs), which flushed operands and result in software before.

The software flush (|x| < smallest normal -> signed 0, after rounding) is what the generated
loops and fused kernels still do (backends/common/scalar_ops.py); x86's FTZ flushes a result
whose value rounded to the type's precision with an unbounded exponent is under the
smallest normal, so the two differ on a product, quotient or FMA whose exact value is just
under it: 0.99999994 * 2^-126 is 0 in XLA and unfused here, 2^-126 in a fused loop.

Only those kernels: XLA does not flush everywhere.  Its sin, tan and pow of a subnormal, its
conversions of one (bf16 -> pred is True, f8e8m0fnu's smallest value -> f64 is 2^-127),
keep it -- its elementwise code applies flushes of its own, which elementwise.py and the
generated loops reproduce op by op (tests/test_elementwise.py); setting the bits around
them would break that.  Threads a kernel starts keep their own MXCSR: OpenBLAS's workers
(measured: a 256^3 sgemm of 1e-20s on 2 threads gives 0 in the calling thread's half, 2.6e-38
in the worker's) -- so a product on OpenBLAS's team is flushed throughout only where the
run's BLAS count is 1 (every module whose largest product is under 2 *
blas_threads.FLOPS_PER_THREAD) or where OpenBLAS keeps it on the calling thread (M*N*K <=
2^18).  With RunOptions.blas_pool a one-device run's large products run on numba's threads
instead, each gemm under the bits (pool_gemm.py): flushed throughout.

Only on x86-64 Linux (the bits are SSE's, the layout is its fenv_t's); elsewhere `available()`
is False, the CPU backend makes no Env (backend.CpuBackend.own_kernels) and these kernels
keep IEEE subnormals.
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
        # PyDLL: the calls keep the GIL.  Through CDLL each ~20 ns fegetenv / fesetenv
        # gave the GIL up and took it back -- three handoffs a flushed kernel call, where
        # devices on several threads contend for it.
        lib = ctypes.PyDLL(ctypes.util.find_library("m") or "libm.so.6")
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
    loading it with FTZ and DAZ set (made once; a flushed kernel call then pays three libm
    calls, ~2 us)."""

    def __init__(self, lib=None):
        lib = lib or _libm()
        self._get, self._set = lib.fegetenv, lib.fesetenv
        self._old = ctypes.create_string_buffer(_ENV_BYTES)
        self._new = ctypes.create_string_buffer(_ENV_BYTES)
        self._new_mxcsr = ctypes.c_uint32.from_buffer(self._new, _MXCSR_AT)

    def flush(self) -> bool:
        """Sets FTZ and DAZ; whether there is anything to restore (not when they were set
        already: a nested call leaves the outer one's saved environment alone)."""
        self._get(self._new)
        mx = self._new_mxcsr.value
        if mx & (FTZ | DAZ) == FTZ | DAZ:
            return False
        # The saved copy read by fegetenv again (libm through PyDLL: the GIL kept), not
        # copied with ctypes.memmove: that is a CFUNCTYPE function, which gives the GIL up
        # and takes it back.  Where device threads contend for it, taking it back waited
        # for the other thread to let go: a flushed kernel call took 32 us against 1.9 on
        # one thread (the data-parallel MLP step on 4 devices, 2 threads).
        self._get(self._old)
        self._new_mxcsr.value = mx | FTZ | DAZ
        self._set(self._new)
        return True

    def restore(self, changed: bool) -> None:
        if changed:
            self._set(self._old)


# The opcodes whose CPU kernels run flushed (see the module docstring).
FLUSHED_OPCODES = frozenset({"reduce", "dot", "convolution", "reduce-window"})

# f32 / f64 add, subtract, multiply and divide: XLA:CPU runs them as single instructions
# under its FTZ and DAZ bits, and so do these (numpy's ufunc inside `flushed_arith`).  The
# same bits as flushing each operand and the result in software -- except where that gives
# the wrong ones: a product or quotient whose exact value is under the smallest normal but
# rounds up to it (0.99999994 * 2^-126) is 0 under FTZ, as XLA gives, and 2^-126 flushed
# after rounding.  And 5x cheaper: a 1024-element f32 add took 25 us with three software
# flushes (|x| < tiny, any, select), 5 us with the MXCSR's bits (load 9, 2 cores).
FLUSHED_ARITH = {"add": "add", "subtract": "subtract", "multiply": "multiply",
                 "divide": "divide"}
_HARDWARE_TYPES = frozenset({"f32", "f64"})


def flushed_arith(fn, env: Env, opcode: str):
    """The elementwise kernel `fn` of `opcode` (FLUSHED_ARITH), on f32 / f64 operands one
    numpy ufunc run with FTZ and DAZ set; other element types as `fn` runs them."""
    import numpy as np
    ufunc = getattr(np, FLUSHED_ARITH[opcode])

    from .elementwise import result

    def kernel(ins, args, ctx):
        shape = ins.shape
        if shape.element_type not in _HARDWARE_TYPES:
            return fn(ins, args, ctx)
        changed = env.flush()
        try:
            r = ufunc(args[0], args[1])
        finally:
            env.restore(changed)
        if type(r) is not np.ndarray or r.dtype != shape.dtype:  # 0-d: a numpy scalar;
            r = result(ins, r)  # operands of another width: the result's, as fn gives it
        return r
    return functools.update_wrapper(kernel, fn)


def flushing(fn, env: Env):
    """The kernel `fn` run with FTZ and DAZ set, the thread's MXCSR restored after it."""
    def kernel(ins, args, ctx):
        changed = env.flush()
        try:
            return fn(ins, args, ctx)
        finally:
            env.restore(changed)
    return functools.update_wrapper(kernel, fn)
