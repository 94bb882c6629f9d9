"""Random numbers: rng-bit-generator, bit-exact with XLA:CPU.

rng-bit-generator follows XLA's RngBitGeneratorExpander and the bit generators of
xla/hlo/builder/lib/prng.cc:
  * state[0] is the key;
  * rng_three_fry: state[1] is a 64-bit counter.  32-bit (and narrower) outputs split the
    shape in halves along the first even dimension (else the largest one) and interleave the
    two ThreeFry-2x32 output words along it; 64-bit outputs join the two words (lo | hi<<32);
  * rng_philox: a 128-bit counter taken from state[1:3] (or, for a u64[2] state, from
    (low=state[1], high=state[0])); Philox-4x32-10 blocks are laid out round-robin;
  * rng_default is rng_philox on CPU (cpu_compiler.cc adds
    RngBitGeneratorExpander(RNG_PHILOX));
  * narrower outputs (8/16 bits) keep the low bits of the 32-bit generator's output.
The result is (new_state, bits).

rng (distribution=rng_uniform / rng_normal) and rng-get-and-update-state: rng_draws.py.
"""
from __future__ import annotations

import numpy as np

from ...hlo import dtypes as D
from ..registry import kernel
from ..common.errors import ExecutionError

_U32 = np.uint32
_U64 = np.uint64
_MASK32 = _U64(0xFFFFFFFF)
_ROT = (13, 15, 26, 6, 17, 29, 16, 24)


def _rotl(v: np.ndarray, r: int) -> np.ndarray:
    return (v << _U32(r)) | (v >> _U32(32 - r))


def threefry2x32(k0: int, k1: int, x0: np.ndarray, x1: np.ndarray):
    """Threefry-2x32 with 20 rounds on uint32 arrays (a fresh pair is returned)."""
    ks = (k0, k1, 0x1BD11BDA ^ k0 ^ k1)
    x0 = x0 + _U32(k0)
    x1 = x1 + _U32(k1)
    for block in range(5):
        rots = _ROT[:4] if block % 2 == 0 else _ROT[4:]
        for r in rots:
            x0 += x1
            x1 = _rotl(x1, r)
            x1 ^= x0
        x0 += _U32(ks[(block + 1) % 3])
        x1 += _U32((ks[(block + 2) % 3] + block + 1) & 0xFFFFFFFF)
    return x0, x1


def philox4x32(x: list[np.ndarray], k0: int, k1: int) -> list[np.ndarray]:
    """Philox-4x32 with 10 rounds on uint32 arrays."""
    ma, mb = _U64(0xD2511F53), _U64(0xCD9E8D57)
    x0, x1, x2, x3 = x
    for _ in range(10):
        p0 = x0.astype(_U64) * ma
        p1 = x2.astype(_U64) * mb
        x0, x1, x2, x3 = (((p1 >> _U64(32)).astype(_U32) ^ x1 ^ _U32(k0)), p1.astype(_U32),
                          ((p0 >> _U64(32)).astype(_U32) ^ x3 ^ _U32(k1)), p0.astype(_U32))
        k0 = (k0 + 0x9E3779B9) & 0xFFFFFFFF
        k1 = (k1 + 0xBB67AE85) & 0xFFFFFFFF
    return [x0, x1, x2, x3]


def split64(v: np.ndarray):
    return (v & _MASK32).astype(_U32), (v >> _U64(32)).astype(_U32)


def join64(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return lo.astype(_U64) | (hi.astype(_U64) << _U64(32))


def _counter(start: int, n: int) -> np.ndarray:
    with np.errstate(over="ignore"):
        return _U64(start) + np.arange(n, dtype=_U64)


def threefry_bits(key: int, counter: int, dims: tuple[int, ...], width: int):
    """(bits as uint32/uint64 array of `dims`, new counter)."""
    k0, k1 = key & 0xFFFFFFFF, key >> 32
    if width == 64:
        n = int(np.prod(dims, dtype=np.int64))
        x0, x1 = threefry2x32(k0, k1, *split64(_counter(counter, n)))
        return join64(x0, x1).reshape(dims), (counter + n) % 2 ** 64
    if not dims:
        x0, _ = threefry2x32(k0, k1, *split64(_counter(counter, 1)))
        return x0.reshape(()), (counter + 1) % 2 ** 64
    even = [i for i, d in enumerate(dims) if d % 2 == 0]
    split = even[0] if even else max(range(len(dims)), key=lambda i: (dims[i], -i))
    half = (dims[split] + 1) // 2
    hdims = dims[:split] + (half,) + dims[split + 1:]
    n = int(np.prod(hdims, dtype=np.int64))
    x0, x1 = threefry2x32(k0, k1, *split64(_counter(counter, n)))
    # Interleave along the split dimension: element 2i from x0[i], 2i+1 from x1[i].
    shp = dims[:split] + (half, 1) + dims[split + 1:]
    both = np.concatenate([x0.reshape(shp), x1.reshape(shp)], axis=split + 1)
    both = both.reshape(dims[:split] + (2 * half,) + dims[split + 1:])
    idx = [slice(None)] * len(dims)
    idx[split] = slice(0, dims[split])
    return np.asarray(both[tuple(idx)], order="C"), (counter + n) % 2 ** 64


def philox_bits(key: int, low: int, high: int, dims: tuple[int, ...], width: int):
    """(bits, new_low, new_high) for a 128-bit counter (low, high)."""
    k0, k1 = key & 0xFFFFFFFF, key >> 32
    n = int(np.prod(dims, dtype=np.int64))
    words = n * 2 if width == 64 else n
    nv = (words + 3) // 4
    lo = _counter(low, nv)
    hi = np.full(nv, high, dtype=_U64)
    hi[lo < _U64(low)] = _U64((high + 1) % 2 ** 64)  # carry out of the low word
    a, b = split64(lo)
    c, d = split64(hi)
    out = philox4x32([a, b, c, d], k0, k1)
    if width == 64:
        w = np.stack([join64(out[0], out[1]), join64(out[2], out[3])], axis=1).reshape(-1)
    else:
        w = np.stack(out, axis=1).reshape(-1)
    total = low + (high << 64) + nv
    new_low, new_high = total % 2 ** 64, (total >> 64) % 2 ** 64
    return np.asarray(w[:n].reshape(dims), order="C"), new_low, new_high


def _as_output(bits: np.ndarray, shape) -> np.ndarray:
    dt = shape.dtype
    width = D.bit_width(shape.element_type)
    if width < 32:
        bits = bits & _U32((1 << width) - 1)
        udt = {8: np.uint8, 16: np.uint16}.get(width)
        if udt is not None:
            bits = bits.astype(udt)
        else:  # sub-byte types
            return bits.astype(dt)
    if bits.dtype.itemsize == dt.itemsize and bits.dtype != dt:
        return bits.view(dt)
    return bits.astype(dt, copy=False)


@kernel("rng-bit-generator")
def _rng_bit_generator(ins, args, ctx):
    state = np.asarray(args[0]).astype(np.uint64).reshape(-1)
    if not ins.shape.is_tuple or len(ins.shape.tuple_shapes) != 2:
        raise ExecutionError(f"rng-bit-generator '{ins.name}': expected a (state, bits) "
                             f"tuple shape, got {ins.shape}")
    state_shape, out_shape = ins.shape.tuple_shapes
    alg = str(ins.attrs.get("algorithm", "rng_default")).lower()
    dims = tuple(out_shape.dims)
    width = D.bit_width(out_shape.element_type)
    if width > 64:
        raise ExecutionError(f"rng-bit-generator '{ins.name}': {out_shape.element_type} "
                             "is not supported")
    gen_width = 64 if width == 64 else 32
    vals = [int(v) for v in state]
    if len(vals) < 2:
        raise ExecutionError(f"rng-bit-generator '{ins.name}': the state needs at least two "
                             "u64 words")
    key = vals[0]
    new_state = list(vals)
    if alg in ("rng_three_fry", "three_fry", "threefry"):
        bits, ctr = threefry_bits(key, vals[1], dims, gen_width)
        new_state[1] = ctr
    elif alg in ("rng_philox", "philox", "rng_default", "default"):
        if len(vals) >= 3:
            low, high = vals[1], vals[2]
        else:
            low, high = vals[1], vals[0]
        bits, new_low, new_high = philox_bits(key, low, high, dims, gen_width)
        new_state[1] = new_low
        if len(vals) >= 3:
            new_state[2] = new_high
    else:
        raise ExecutionError(f"rng-bit-generator '{ins.name}': unknown algorithm '{alg}'")
    st = np.array(new_state, dtype=np.uint64).reshape(state_shape.dims).astype(
        state_shape.dtype)
    return st, _as_output(bits, out_shape)
