"""One LLVM code-generation setting for the loops xlaplug generates, by the instruction set
numba compiles for.

Our hardware-flushed loops (fused_loop.py, row_loop.py) run blocks of 16,384 elements, the
MXCSR set around each: the vector loop is an inner loop.  Before register allocation LLVM's
MachineLICM hoists only out of the outermost loop, and with its `avoid-speculation` (on by
default) it leaves in place a cheap instruction whose block the outer loop may skip -- as
it may skip the inner vector loop (its trip-count and overlap checks).  So each splat
constant of exp's and tanh's polynomials is loaded again in every iteration.  With AVX-512
that costs nothing: a constant is an embedded broadcast, an operand of the FMA itself.
AVX2 has no embedded broadcasts: each is a `movabs` of its address (numba's JIT code model)
and a `vbroadcastss`, about 20 of the 48 instructions per 8 elements of a tanh loop, where
XLA keeps them in registers.  On the Zen 3 host (AVX2, one core, f32[2048,2048], three
rounds, 2026-12-06): tanh 1.28-1.37x XLA -> 1.00-1.13x, exp(-x) 1.33-1.35x -> 1.03-1.06x,
the eight-op chain 1.43-1.47x -> 1.33-1.41x.  With AVX-512 code the hoisted constants are
spilled to the stack as 64-byte slots the stack does not align, and a chain's loop ran 2.0
or 3.9 ms by the process (2.1 without): there the setting stays LLVM's.

The setting is LLVM's, for the whole process (numba sets its own, SVML's, the same way),
and changes only which loop-invariant instructions are hoisted, never a value.
"""
from __future__ import annotations

import functools

import llvmlite.binding as llvm

_HOIST = "-avoid-speculation=false"


def _numba_features() -> str:
    """The CPU features numba compiles for: NUMBA_CPU_FEATURES, else the host's."""
    from numba.core import config
    if config.CPU_FEATURES is not None:
        return config.CPU_FEATURES
    return llvm.get_host_cpu_features().flatten()


def hoists_constants(features: str) -> bool:
    """Whether loops compiled for `features` (LLVM's +a,-b list) get the setting: x86
    vector code without AVX-512's embedded broadcasts."""
    have = set(features.split(","))
    return "+avx2" in have and "+avx512f" not in have


@functools.cache
def apply() -> str:
    """Sets the option where it pays, once per process (LLVM counts an option's
    occurrences); returns it, or "" -- part of the JIT cache's key, so code compiled with
    one setting is not loaded by a process with the other."""
    if not hoists_constants(_numba_features()):
        return ""
    llvm.set_option("xlaplug", _HOIST)
    return _HOIST
