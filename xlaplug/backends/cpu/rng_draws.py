"""rng (distribution=rng_uniform / rng_normal), which has no bit-reproducible definition in
XLA, and rng-get-and-update-state, which XLA:CPU's optimized HLO uses in its place.

rng here is a counter-based stream that the CUDA kernel (cuda/rng.py) computes identically:
element j of an rng instruction's c-th execution in a run context takes the
Philox-4x32-10 block at counter (low = j, high = c) under a 64-bit key hashing the run
option `seed` (default 0) with the instruction's name -- two words w0, w1 (the block's
32-bit outputs joined low first).  No sequential state: a loop draws fresh values each
iteration, a later run of the same executable continues the stream (as XLA's rng does
across executions: rng_streams.RngState), and the bits never depend on the bounds.  In
float64 (narrow floats rounded once, by `_xround`, as on CUDA; f8e8m0fnu, which has no
rounding rule there, by ml_dtypes' cast -- CUDA refuses it):
  * uniform float: u = (w0 >> 11) * 2^-53; lo + (hi - lo) * u cast to the output type; a
    value that rounds to >= hi becomes lo when hi > lo (otherwise the formula stands: hi
    == lo gives lo, hi < lo values in (hi, lo]);
  * normal: Box-Muller, mu + sigma * sqrt(-2 log(1 - u0)) * cos(2 pi u1) with u0, u1
    from w0, w1 (1 - u0 > 0: no log(0));
  * integers and pred: lo + w0 mod (hi - lo), the range taken in uint64 (no overflow for
    any s64/u64 bounds); hi <= lo gives lo.
XLA:CPU's optimized HLO replaces rng with arithmetic on rng-get-and-update-state, which is
reproduced exactly (the k-th run matches a freshly compiled XLA executable's k-th run).
"""
from __future__ import annotations

import functools

import numpy as np

from ...hlo import dtypes as D
from ..registry import kernel
from ..common.scalar_base import NARROW_FORMATS
from ..common.errors import ExecutionError
from ..common.rng_streams import initial_state, rng_stream, state_delta
from .rng import join64, philox4x32, split64

_U32 = np.uint32
_U64 = np.uint64
_U53 = 2.0 ** -53
_TWO_PI = 6.283185307179586


def rng_words(key: int, call: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Two uint64 words per element: element j's Philox-4x32-10 block at the 128-bit
    counter (low = j, high = call) under `key`, as (o0 | o1 << 32, o2 | o3 << 32).
    One block per element keeps every element independent of the others and of the
    bounds (the CUDA kernel computes the same block in element j's thread)."""
    a, b = split64(np.arange(n, dtype=_U64))
    c = np.full(n, call & 0xFFFFFFFF, dtype=_U32)
    d = np.full(n, call >> 32, dtype=_U32)
    o = philox4x32([a, b, c, d], key & 0xFFFFFFFF, key >> 32)
    return join64(o[0], o[1]), join64(o[2], o[3])


def unit_uniform(w: np.ndarray) -> np.ndarray:
    """[0, 1) doubles from uint64 words: the top 53 bits times 2^-53 (exact)."""
    return (w >> _U64(11)).astype(np.float64) * _U53


@functools.cache
def _round_loop():
    import numba

    from ..common.scalar_float_round import _xround

    @numba.njit(cache=False)
    def loop(x, out, mbits, emin, maxv, kind):
        for i in range(x.size):
            out[i] = _xround(x[i], mbits, emin, maxv, kind)
    return loop


def round_narrow(x: np.ndarray, t: str) -> np.ndarray:
    """float64 values -> the nearest values of narrow float type t (ties to even), as
    float32: the `_xround` the CUDA kernel calls, so both backends round alike (a cast
    through ml_dtypes may round twice, via float32)."""
    flat = np.ascontiguousarray(x, dtype=np.float64).reshape(-1)
    out = np.empty(flat.size, np.float32)
    m, e, mx, k = NARROW_FORMATS[t]
    _round_loop()(flat, out, m, e, mx, k)
    return out.reshape(np.shape(x))


def _to_type(v: np.ndarray, t: str, dt) -> np.ndarray:
    """float64 values cast to element type t (narrow floats rounded once, as on CUDA)."""
    if t in NARROW_FORMATS:
        return round_narrow(v, t).astype(dt)
    return v.astype(dt)


def _scalar(x):
    return np.asarray(x).reshape(-1)[0]


@kernel("rng")
def _rng(ins, args, ctx):
    """rng_uniform / rng_normal from rng_words (see the module docstring)."""
    dist = str(ins.attrs.get("distribution", "rng_uniform")).lower()
    if not (dist.endswith("uniform") or dist.endswith("normal")):
        raise ExecutionError(f"rng '{ins.name}': unknown distribution '{dist}'")
    t = ins.shape.element_type
    dims = tuple(ins.shape.dims)
    dt = ins.shape.dtype
    if t in D.COMPLEX_TYPES or (dist.endswith("normal") and t not in D.FLOAT_TYPES):
        raise ExecutionError(f"rng '{ins.name}': {dist} of {t} is not supported")
    a, b = _scalar(args[0]), _scalar(args[1])
    key, call = rng_stream(ins, ctx)
    n = int(np.prod(dims, dtype=np.int64))
    w0, w1 = rng_words(key, call, n)
    if t not in D.FLOAT_TYPES:  # integers and pred: lo + w mod (hi - lo), in uint64
        lo, hi = int(a), int(b)
        if hi <= lo:
            return np.full(dims, lo).astype(dt)
        v = _U64(lo % 2 ** 64) + w0 % _U64(hi - lo)  # wraps to the right bits: no overflow
        if t in D.SIGNED_TYPES:
            v = v.view(np.int64)
        return np.ascontiguousarray(v.reshape(dims).astype(dt))
    lo, hi = np.float64(a), np.float64(b)
    with np.errstate(all="ignore"):  # inf/nan bounds give nan, as on a GPU
        if dist.endswith("normal"):
            z = (np.sqrt(-2.0 * np.log(1.0 - unit_uniform(w0)))
                 * np.cos(_TWO_PI * unit_uniform(w1)))
            return np.ascontiguousarray(_to_type(lo + hi * z, t, dt).reshape(dims))
        out = _to_type(lo + (hi - lo) * unit_uniform(w0), t, dt)
        # Rounding to the output type can reach the excluded upper bound: use the lower one.
        if hi > lo:
            out[out.astype(np.float64) >= hi] = np.asarray(a).astype(dt)
    return np.ascontiguousarray(out.reshape(dims))


@kernel("rng-get-and-update-state")
def _rng_get_and_update_state(ins, args, ctx):
    """The u64[2] (low, high) state of this instruction, then state += delta.

    As in XLA:CPU, each instruction keeps its own state, starting at 0x7012395 (plus the
    run option `seed`); it persists for the executable (`ctx.rng`), so loops and later
    runs see it advance."""
    states = ctx.rng.states
    cur = states.get(id(ins), initial_state(ctx))
    states[id(ins)] = (cur + state_delta(ins)) % 2 ** 128
    out = np.array([cur % 2 ** 64, cur >> 64], dtype=np.uint64)
    return out.reshape(ins.shape.dims).astype(ins.shape.dtype)
