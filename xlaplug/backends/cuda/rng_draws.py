"""CUDA `rng` (rng_uniform / rng_normal) and rng-get-and-update-state, on the device.

rng is cpu/rng_draws.py's counter-based stream (see its docstring),
so CUDA and CPU runs with the same seed draw the same values: element j's thread computes
the Philox-4x32-10 block at counter (j, call) under the instruction's key and applies the
same float64 transform.  The key and call counter are host-side bookkeeping shared with
common/rng_streams.rng_stream and travel as scalar kernel arguments; the rank-0 bounds
are read inside the kernels.  Nothing is copied between host and device.  Uniform floats
and integers are bit-exact with the CPU (the multiply of lo + (hi - lo) * u is dmul_rn,
which NVVM never contracts into an FMA); normal draws go through libdevice's log, cos and
sqrt, which may differ from numpy's in the last bit.  Narrow floats (f16, bf16, f8/f4) are
rounded by scalar_cuda's `_xround` before the `>= hi` check, as on the CPU; f8e8m0fnu (no
rounding rule here) is refused.  pred results are written as 0/1 bytes.
rng-get-and-update-state keeps each instruction's 128-bit state in a u64[2] device array
on the run context (created by a one-thread kernel from the initial value, advanced by a
one-thread kernel each call) and returns a fresh device copy of the old state.
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda, float64, int64, uint64

from ...hlo import dtypes as D
from ..common.scalar_base import NARROW_FORMATS
from ..common import rng_streams
from ..common.errors import ExecutionError
from ..registry import kernel
from .launch import cached_kernel, device_empty, flat, launch_stride_loop, simulating
from .rng import _M32, _S32, _philox_d

# ---- rng: cpu/rng_draws.py's counter-based stream, computed on the device -----------------------

_TOP = np.uint64(1 << 63)
_ONE = np.uint64(1)
_SHIFT53 = np.uint64(11)
_U53 = 2.0 ** -53
_TWO_PI = 6.283185307179586


# NVVM contracts a multiply feeding an add into one FMA (one rounding, where numpy rounds
# twice); dmul_rn is a multiply it never fuses, so lo + (hi - lo) * u is the CPU's value.
if simulating():
    def _mul_rn_host(a, b):
        return a * b
    _mul_rn = cuda.jit(device=True)(_mul_rn_host)
else:
    from numba.cuda import libdevice

    @cuda.jit(device=True)
    def _mul_rn(a, b):
        return libdevice.dmul_rn(a, b)


@cuda.jit(device=True)
def _words(j, k0, k1, c2, c3):
    """cpu/rng_draws.rng_words for element j: its Philox block at counter (low=j, high=(c2,c3))."""
    ju = uint64(j)
    o0, o1, o2, o3 = _philox_d(ju & _M32, ju >> _S32, c2, c3, k0, k1)
    return o0 | (o1 << _S32), o2 | (o3 << _S32)


@cuda.jit(device=True)
def _unit(w):
    """[0, 1) from a word's top 53 bits (exact, as cpu/rng_draws.unit_uniform)."""
    return float64(w >> _SHIFT53) * _U53


@cuda.jit(device=True)
def _bias(x):
    """An int64 as uint64 with its order kept (x + 2^63), computed without overflow."""
    if x >= 0:
        return uint64(x) + _TOP
    return _TOP - uint64(-(x + 1)) - _ONE


@cuda.jit(device=True)
def _unbias(v):
    """_bias's inverse, without overflow."""
    if v >= _TOP:
        return int64(v - _TOP)
    return -int64(_TOP - v - _ONE) - 1


@cuda.jit
def _uniform_sint_kernel(out, lo, hi, n, k0, k1, c2, c3):
    """Signed integers: lo + w0 mod (hi - lo), the range and sum taken on biased uint64
    values (order-preserving, so neither can overflow)."""
    for j in range(cuda.grid(1), n, cuda.gridsize(1)):
        a = int64(lo[0])
        b = int64(hi[0])
        if b <= a:
            out[j] = a
        else:
            w0, w1 = _words(j, k0, k1, c2, c3)
            ba = _bias(a)
            out[j] = _unbias(ba + w0 % (_bias(b) - ba))


@cuda.jit
def _uniform_uint_kernel(out, lo, hi, n, k0, k1, c2, c3):
    """Unsigned integers (and pred, written as uint8 0/1): lo + w0 mod (hi - lo)."""
    for j in range(cuda.grid(1), n, cuda.gridsize(1)):
        a = uint64(lo[0])
        b = uint64(hi[0])
        if b <= a:
            out[j] = a
        else:
            w0, w1 = _words(j, k0, k1, c2, c3)
            out[j] = a + w0 % (b - a)


def _float_kernels():
    """(uniform, normal) float kernels, built on first use: they call the `_xround` device
    function of scalar_cuda's namespace (narrow floats rounded as the CPU kernel does)."""
    return cached_kernel("rng_floats", _compile_floats)


def _compile_floats():
    from .scalar_cuda import cuda_namespace
    xround = cuda_namespace()["_xround"]

    @cuda.jit
    def uniform(out, lo, hi, n, k0, k1, c2, c3, narrow, mbits, emin, maxv, kind):
        for j in range(cuda.grid(1), n, cuda.gridsize(1)):
            w0, w1 = _words(j, k0, k1, c2, c3)
            a = float64(lo[0])
            b = float64(hi[0])
            v = a + _mul_rn(b - a, _unit(w0))
            if narrow:
                v = float64(xround(v, mbits, emin, maxv, kind))
            out[j] = v  # the cast to the output type (exact for narrow values)
            # Rounding can reach the excluded upper bound: use the lower one.
            if b > a and float64(out[j]) >= b:
                out[j] = lo[0]

    @cuda.jit
    def normal(out, mu, sigma, n, k0, k1, c2, c3, narrow, mbits, emin, maxv, kind):
        for j in range(cuda.grid(1), n, cuda.gridsize(1)):
            w0, w1 = _words(j, k0, k1, c2, c3)
            z = math.sqrt(-2.0 * math.log(1.0 - _unit(w0))) * math.cos(_TWO_PI * _unit(w1))
            v = float64(mu[0]) + _mul_rn(float64(sigma[0]), z)
            if narrow:
                v = float64(xround(v, mbits, emin, maxv, kind))
            out[j] = v
    return uniform, normal


def _u64(x: int) -> np.uint64:
    """A kernel scalar typed uint64 (a Python int would be int64, and int64/uint64
    arithmetic in a kernel promotes to float64)."""
    return np.uint64(x % 2 ** 64)


@kernel("rng", device="cuda")
def _rng(ins, args, ctx):
    """cpu/rng_draws.py's draw on the device: the rank-0 bounds are read inside the kernels, the
    key and call counter come from the host-side bookkeeping shared with the CPU kernel and
    travel as scalar kernel arguments; nothing is copied either way."""
    dist = str(ins.attrs.get("distribution", "rng_uniform")).lower()
    if not (dist.endswith("uniform") or dist.endswith("normal")):
        raise ExecutionError(f"rng '{ins.name}': unknown distribution '{dist}'")
    t = ins.shape.element_type
    if t in D.COMPLEX_TYPES or (dist.endswith("normal") and t not in D.FLOAT_TYPES):
        raise ExecutionError(f"rng '{ins.name}': {dist} of {t} is not supported")
    if t in D.FLOAT_TYPES and t not in ("f32", "f64") and t not in NARROW_FORMATS:
        raise ExecutionError(f"rng '{ins.name}': {t} results are not supported on cuda (no "
                             "rounding rule for the format)")
    key, call = rng_streams.rng_stream(ins, ctx)
    dims = tuple(int(d) for d in ins.shape.dims)
    n = int(np.prod(dims, dtype=np.int64)) if dims else 1
    stream = (n, _u64(key & 0xFFFFFFFF), _u64(key >> 32), _u64(call & 0xFFFFFFFF),
              _u64(call >> 32))
    lo, hi = flat(args[0]), flat(args[1])
    if t == "pred":  # 0/1 bytes are the bools
        out = cuda.device_array(dims, np.uint8)
        launch_stride_loop(_uniform_uint_kernel, n, flat(out), lo, hi, *stream)
        return out.view(np.bool_)
    out = device_empty(ins.shape)
    if t in D.SIGNED_TYPES:
        launch_stride_loop(_uniform_sint_kernel, n, flat(out), lo, hi, *stream)
    elif t in D.UNSIGNED_TYPES:
        launch_stride_loop(_uniform_uint_kernel, n, flat(out), lo, hi, *stream)
    else:
        narrow = t in NARROW_FORMATS
        m, e, mx, k = NARROW_FORMATS[t] if narrow else (0, 0, 0.0, 0)
        uniform, normal = _float_kernels()
        launch_stride_loop(normal if dist.endswith("normal") else uniform, n, flat(out), lo, hi,
                           *stream, narrow, int(m), int(e), float(mx), int(k))
    return out


# ---- rng-get-and-update-state: the per-instruction state lives on the device -------------

@cuda.jit
def _state_init_kernel(st, low, high):
    if cuda.grid(1) == 0:
        st[0] = low
        st[1] = high


@cuda.jit
def _state_step_kernel(old, st, dlow, dhigh):
    """old = st; st += (dlow, dhigh) as 128-bit numbers (in 32-bit words: no overflow)."""
    if cuda.grid(1) == 0:
        low = uint64(st[0])
        high = uint64(st[1])
        old[0] = low
        old[1] = high
        s = (low & _M32) + (dlow & _M32)
        w0 = s & _M32
        s = (low >> _S32) + (dlow >> _S32) + (s >> _S32)
        w1 = s & _M32
        s = (high & _M32) + (dhigh & _M32) + (s >> _S32)
        w2 = s & _M32
        s = (high >> _S32) + (dhigh >> _S32) + (s >> _S32)
        w3 = s & _M32
        st[0] = w0 | (w1 << _S32)
        st[1] = w2 | (w3 << _S32)


@kernel("rng-get-and-update-state", device="cuda")
def _rng_get_and_update_state(ins, args, ctx):
    """cpu/rng_draws.py's per-instruction 128-bit state, kept in a u64[2] device array on the run
    context: created once by a kernel from the initial value (scalars, no copy), advanced by
    `delta` on the device each call; the result is a fresh device copy of the old state."""
    sdt = np.dtype(ins.shape.dtype)
    if sdt.itemsize != 8 or sdt.kind not in "iu" or \
            int(np.prod(ins.shape.dims, dtype=np.int64)) != 2:
        raise ExecutionError(f"rng-get-and-update-state '{ins.name}': expected a u64[2] "
                             f"result, got {ins.shape}")
    states = ctx.rng.device_states
    st = states.get(id(ins))
    if st is None:
        init = rng_streams.initial_state(ctx)
        st = states[id(ins)] = cuda.device_array(2, np.uint64)
        _state_init_kernel[1, 1](st, _u64(init), _u64(init >> 64))
    delta = rng_streams.state_delta(ins)
    old = cuda.device_array(2, np.uint64)
    _state_step_kernel[1, 1](old, st, _u64(delta), _u64(delta >> 64))
    old = old.reshape(tuple(int(d) for d in ins.shape.dims))
    return old.view(sdt) if sdt != np.uint64 else old
