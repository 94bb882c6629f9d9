"""Random numbers: rng-bit-generator (bit-exact with XLA:CPU) and rng (not reproducible in XLA).

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

rng (distribution=rng_uniform / rng_normal) has no bit-reproducible definition in XLA.
Here it is a counter-based stream that the CUDA kernel (cuda/rng.py) computes identically:
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

import numpy as np

from ...hlo import dtypes as D
from ..registry import kernel
from ..common.scalar_base import NARROW_FORMATS
from ..common.errors import ExecutionError
from ..common.rng_streams import initial_state, rng_stream, state_delta

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


def _split64(v: np.ndarray):
    return (v & _MASK32).astype(_U32), (v >> _U64(32)).astype(_U32)


def _join64(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return lo.astype(_U64) | (hi.astype(_U64) << _U64(32))


def _counter(start: int, n: int) -> np.ndarray:
    with np.errstate(over="ignore"):
        return _U64(start) + np.arange(n, dtype=_U64)


def threefry_bits(key: int, counter: int, dims: tuple[int, ...], width: int):
    """(bits as uint32/uint64 array of `dims`, new counter)."""
    k0, k1 = key & 0xFFFFFFFF, key >> 32
    if width == 64:
        n = int(np.prod(dims, dtype=np.int64))
        x0, x1 = threefry2x32(k0, k1, *_split64(_counter(counter, n)))
        return _join64(x0, x1).reshape(dims), (counter + n) % 2 ** 64
    if not dims:
        x0, _ = threefry2x32(k0, k1, *_split64(_counter(counter, 1)))
        return x0.reshape(()), (counter + 1) % 2 ** 64
    even = [i for i, d in enumerate(dims) if d % 2 == 0]
    split = even[0] if even else max(range(len(dims)), key=lambda i: (dims[i], -i))
    half = (dims[split] + 1) // 2
    hdims = dims[:split] + (half,) + dims[split + 1:]
    n = int(np.prod(hdims, dtype=np.int64))
    x0, x1 = threefry2x32(k0, k1, *_split64(_counter(counter, n)))
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
    a, b = _split64(lo)
    c, d = _split64(hi)
    out = philox4x32([a, b, c, d], k0, k1)
    if width == 64:
        w = np.stack([_join64(out[0], out[1]), _join64(out[2], out[3])], axis=1).reshape(-1)
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


# ---- rng: a counter-based stream shared with the CUDA kernel (cuda/rng.py) ---------------

_U53 = 2.0 ** -53
_TWO_PI = 6.283185307179586


def rng_words(key: int, call: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Two uint64 words per element: element j's Philox-4x32-10 block at the 128-bit
    counter (low = j, high = call) under `key`, as (o0 | o1 << 32, o2 | o3 << 32).
    One block per element keeps every element independent of the others and of the
    bounds (the CUDA kernel computes the same block in element j's thread)."""
    a, b = _split64(np.arange(n, dtype=_U64))
    c = np.full(n, call & 0xFFFFFFFF, dtype=_U32)
    d = np.full(n, call >> 32, dtype=_U32)
    o = philox4x32([a, b, c, d], key & 0xFFFFFFFF, key >> 32)
    return _join64(o[0], o[1]), _join64(o[2], o[3])


def unit_uniform(w: np.ndarray) -> np.ndarray:
    """[0, 1) doubles from uint64 words: the top 53 bits times 2^-53 (exact)."""
    return (w >> _U64(11)).astype(np.float64) * _U53


_ROUND_LOOP = None


def round_narrow(x: np.ndarray, t: str) -> np.ndarray:
    """float64 values -> the nearest values of narrow float type t (ties to even), as
    float32: the `_xround` the CUDA kernel calls, so both backends round alike (a cast
    through ml_dtypes may round twice, via float32)."""
    global _ROUND_LOOP
    if _ROUND_LOOP is None:
        import numba

        from ..common.scalar_float_round import _xround

        @numba.njit(cache=False)
        def loop(x, out, mbits, emin, maxv, kind):
            for i in range(x.size):
                out[i] = _xround(x[i], mbits, emin, maxv, kind)
        _ROUND_LOOP = loop
    flat = np.ascontiguousarray(x, dtype=np.float64).reshape(-1)
    out = np.empty(flat.size, np.float32)
    m, e, mx, k = NARROW_FORMATS[t]
    _ROUND_LOOP(flat, out, m, e, mx, k)
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
