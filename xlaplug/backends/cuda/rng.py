"""CUDA random numbers: rng-bit-generator bit-exact with the CPU kernel (cpu/rng.py).

rng-bit-generator runs entirely on the device: the kernels read the key and counter from
the state operand (a device array), each thread computes one ThreeFry-2x32 counter (both
output words, for the two interleaved 32-bit outputs or one 64-bit output) or one
Philox-4x32-10 block (four 32-bit or two 64-bit outputs), and a one-thread kernel writes
the advanced state.  The layouts are the CPU kernel's (XLA's RngBitGeneratorExpander):
32-bit outputs split the shape along the first even dimension (else the largest) and
interleave the two ThreeFry words along it; Philox blocks are laid out round-robin; 8 and
16-bit outputs keep the low bits.  All 32-bit arithmetic is done in uint64 and masked (no
overflow, so the simulator computes exactly what a GPU does), and the 64/128-bit counter
additions carry between 32-bit words.

The `rng` op and rng-get-and-update-state are in cuda/rng_draws.py.
"""
from __future__ import annotations

import numpy as np
from numba import cuda, uint64

from ...hlo import dtypes as D
from ..common.errors import ExecutionError
from ..registry import kernel
from .launch import flat, launch_stride_loop

_M32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
_KS_PARITY = np.uint64(0x1BD11BDA)
_ROTS = tuple(np.uint64(r) for r in (13, 15, 26, 6, 17, 29, 16, 24))
_PH_MA = np.uint64(0xD2511F53)
_PH_MB = np.uint64(0xCD9E8D57)
_PH_W0 = np.uint64(0x9E3779B9)
_PH_W1 = np.uint64(0xBB67AE85)


# The generators are plain functions of uint64 values that hold 32 bits each (so that no
# arithmetic overflows, on a GPU or in the simulator); the kernels call their device
# versions, and the tests also compile them with numba.njit to check the typing (no
# promotion to float) bit for bit against the CPU kernel.

def threefry2x32(k0, k1, x0, x1):
    """ThreeFry-2x32 with 20 rounds: (x0, x1) encrypted with the key (k0, k1)."""
    k2 = _KS_PARITY ^ k0 ^ k1
    x0 = (x0 + k0) & _M32
    x1 = (x1 + k1) & _M32
    for block in range(5):
        for r in range(4):
            rot = _ROTS[(block % 2) * 4 + r]
            x0 = (x0 + x1) & _M32
            x1 = (((x1 << rot) | (x1 >> (_S32 - rot))) & _M32) ^ x0
        i1 = (block + 1) % 3
        i2 = (block + 2) % 3
        ka = k0 if i1 == 0 else (k1 if i1 == 1 else k2)
        kb = k0 if i2 == 0 else (k1 if i2 == 1 else k2)
        x0 = (x0 + ka) & _M32
        x1 = (x1 + kb + uint64(block + 1)) & _M32
    return x0, x1


def philox4x32(c0, c1, c2, c3, k0, k1):
    """Philox-4x32 with 10 rounds."""
    for _ in range(10):
        p0 = c0 * _PH_MA  # < 2^64: exact
        p1 = c2 * _PH_MB
        n0 = (p1 >> _S32) ^ c1 ^ k0
        n1 = p1 & _M32
        n2 = (p0 >> _S32) ^ c3 ^ k1
        n3 = p0 & _M32
        c0 = n0
        c1 = n1
        c2 = n2
        c3 = n3
        k0 = (k0 + _PH_W0) & _M32
        k1 = (k1 + _PH_W1) & _M32
    return c0, c1, c2, c3


def add_to_words(w0, w1, w2, w3, j):
    """The 128-bit counter of 32-bit words w0..w3 (low first) plus j (a uint64)."""
    s = w0 + (j & _M32)
    w0 = s & _M32
    s = w1 + (j >> _S32) + (s >> _S32)
    w1 = s & _M32
    s = w2 + (s >> _S32)
    w2 = s & _M32
    s = w3 + (s >> _S32)
    w3 = s & _M32
    return w0, w1, w2, w3


_threefry_d = cuda.jit(device=True)(threefry2x32)
_philox_d = cuda.jit(device=True)(philox4x32)
_add_d = cuda.jit(device=True)(add_to_words)


@cuda.jit
def _threefry_kernel(out, state, pre_n, dsplit, post, half, wide, mask):
    """Counter j (a grid-stride loop).  wide: out[j] = x0 | x1 << 32.  Otherwise j =
    (a, h, b) in [pre, half, post] writes x0 at (a, 2h, b) and x1 at (a, 2h+1, b) when that
    exists."""
    n = pre_n * half * post
    for j in range(cuda.grid(1), n, cuda.gridsize(1)):
        key = uint64(state[0])
        ctr = uint64(state[1])
        w0, w1, w2, w3 = _add_d(ctr & _M32, ctr >> _S32, uint64(0), uint64(0), uint64(j))
        x0, x1 = _threefry_d(key & _M32, key >> _S32, w0, w1)
        if wide:
            out[j] = x0 | (x1 << _S32)
        else:
            b = j % post
            h = (j // post) % half
            a = j // (post * half)
            pos = (a * dsplit + 2 * h) * post + b
            out[pos] = x0 & mask
            if 2 * h + 1 < dsplit:
                out[pos + post] = x1 & mask


@cuda.jit
def _philox_kernel(out, state, n, nv, wide, mask, low_i, high_i):
    """Philox block j, a grid-stride loop (counter (low, high) + j): four 32-bit outputs at
    4j..4j+3, or two 64-bit ones at 2j, 2j+1 (words joined low first)."""
    for j in range(cuda.grid(1), nv, cuda.gridsize(1)):
        key = uint64(state[0])
        low = uint64(state[low_i])
        high = uint64(state[high_i])
        c0, c1, c2, c3 = _add_d(low & _M32, low >> _S32, high & _M32, high >> _S32,
                                uint64(j))
        o0, o1, o2, o3 = _philox_d(c0, c1, c2, c3, key & _M32, key >> _S32)
        if wide:
            e = 2 * j
            out[e] = o0 | (o1 << _S32)
            if e + 1 < n:
                out[e + 1] = o2 | (o3 << _S32)
        else:
            e = 4 * j
            out[e] = o0 & mask
            if e + 1 < n:
                out[e + 1] = o1 & mask
            if e + 2 < n:
                out[e + 2] = o2 & mask
            if e + 3 < n:
                out[e + 3] = o3 & mask


@cuda.jit
def _new_state_kernel(new, state, philox, used, low_i, high_i, write_high):
    """new = state with its counter advanced by `used` (64-bit, or 128-bit for philox)."""
    if cuda.grid(1) == 0:
        for i in range(new.size):
            new[i] = uint64(state[i])
        u = uint64(used)
        if philox:
            low = uint64(state[low_i])
            high = uint64(state[high_i])
            w0, w1, w2, w3 = _add_d(low & _M32, low >> _S32, high & _M32, high >> _S32, u)
            new[low_i] = w0 | (w1 << _S32)
            if write_high:
                new[high_i] = w2 | (w3 << _S32)
        else:
            ctr = uint64(state[1])
            w0, w1, w2, w3 = _add_d(ctr & _M32, ctr >> _S32, uint64(0), uint64(0), u)
            new[1] = w0 | (w1 << _S32)


_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


@kernel("rng-bit-generator", device="cuda")
def _rng_bit_generator(ins, args, ctx):
    state = args[0]
    if not ins.shape.is_tuple or len(ins.shape.tuple_shapes) != 2:
        raise ExecutionError(f"rng-bit-generator '{ins.name}': expected a (state, bits) "
                             f"tuple shape, got {ins.shape}")
    state_shape, out_shape = ins.shape.tuple_shapes
    alg = str(ins.attrs.get("algorithm", "rng_default")).lower()
    dims = tuple(int(d) for d in out_shape.dims)
    width = D.bit_width(out_shape.element_type)
    if width > 64:
        raise ExecutionError(f"rng-bit-generator '{ins.name}': {out_shape.element_type} "
                             "is not supported")
    sdt = np.dtype(state.dtype)
    if sdt.itemsize != 8 or sdt.kind not in "iu" or np.dtype(state_shape.dtype) != sdt:
        raise ExecutionError(f"rng-bit-generator '{ins.name}': the state must be a u64 (or "
                             f"s64) array on cuda, got {state_shape}")
    nstate = int(np.prod(tuple(state.shape), dtype=np.int64)) if len(state.shape) else 1
    if nstate < 2:
        raise ExecutionError(f"rng-bit-generator '{ins.name}': the state needs at least two "
                             "u64 words")
    st = flat(state)
    out_dt = np.dtype(out_shape.dtype)
    udt = np.dtype(_UNSIGNED[out_dt.itemsize])
    bits = cuda.device_array(dims, udt)
    bflat = flat(bits)
    n = int(np.prod(dims, dtype=np.int64)) if dims else 1
    wide = width == 64
    mask = np.uint64((1 << min(width, 32)) - 1) if not wide else np.uint64(2 ** 64 - 1)
    new_state = cuda.device_array(tuple(state.shape), sdt)
    nflat = flat(new_state).view(np.uint64) if sdt != np.uint64 else flat(new_state)
    if alg in ("rng_three_fry", "three_fry", "threefry"):
        if wide or not dims:
            pre, dsplit, post, half = 1, 1, n, 1
            if not dims:
                post = 1
        else:
            even = [i for i, d in enumerate(dims) if d % 2 == 0]
            split = even[0] if even else max(range(len(dims)), key=lambda i: (dims[i], -i))
            pre = int(np.prod(dims[:split], dtype=np.int64))
            post = int(np.prod(dims[split + 1:], dtype=np.int64))
            dsplit = dims[split]
            half = (dsplit + 1) // 2
        used = pre * half * post
        if n:
            launch_stride_loop(_threefry_kernel, used, bflat, st, pre, dsplit, post, half, wide,
                               mask)
        _new_state_kernel[1, 1](nflat, st, False, used, 1, 1, False)
    elif alg in ("rng_philox", "philox", "rng_default", "default"):
        low_i, high_i = (1, 2) if nstate >= 3 else (1, 0)
        words = 2 * n if wide else n
        nv = (words + 3) // 4
        if n:
            launch_stride_loop(_philox_kernel, nv, bflat, st, n, nv, wide, mask, low_i, high_i)
        _new_state_kernel[1, 1](nflat, st, True, nv, low_i, high_i, nstate >= 3)
    else:
        raise ExecutionError(f"rng-bit-generator '{ins.name}': unknown algorithm '{alg}'")
    if out_dt != udt:
        bits = bits.view(out_dt)
    return new_state, bits
