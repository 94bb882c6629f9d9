"""convert, bitcast-convert, reduce-precision, stochastic-convert, real, imag, complex (XLA:CPU
semantics; see elementwise.py; `copy` is data_movement.py's).  `convert_array(x, from_type,
to_type)` and `reduce_precision_array` are usable by other kernels."""
from __future__ import annotations

import numpy as np

from ...hlo import dtypes as D
from ..registry import kernel
from .bf16_convert import to_bf16, to_f32
from .elementwise import (F32, F64, NARROW_FLOATS, bits, et, fin, flush, fout, iin, iout,
                          is_complex, is_float, is_int, is_signed, result, to_narrow_float)
from .elementwise_logic import _pattern


def float_to_int(x: np.ndarray, t: str) -> np.ndarray:
    """Saturating float -> integer: NaN -> 0, out-of-range -> the type's min/max."""
    w = bits(t)
    lo, hi = (-(1 << (w - 1)), (1 << (w - 1)) - 1) if is_signed(t) else (0, (1 << w) - 1)
    ft = x.dtype.type
    nan = np.isnan(x)
    below = (x <= ft(lo)) | (nan if not is_signed(t) else False)
    above = x >= ft(hi)
    safe = np.where(below | above | nan, ft(0), x)
    v = np.trunc(safe).astype(np.int64 if is_signed(t) else np.uint64)
    wide = np.int64 if is_signed(t) else np.uint64
    r = np.where(above, wide(hi), v)
    r = np.where(below, wide(lo), r)
    r = np.where(nan, wide(0), r)
    return iout(r, t)


def int_to_f64_odd(v: np.ndarray) -> np.ndarray:
    """Integer array (int64 or uint64) -> float64 holding each value exactly, or, past 2^53,
    rounded to odd at bit 11 (the low bits kept as a sticky bit), so that rounding the result
    once more to any format of at most 40 significand bits gives the integer's correctly
    rounded value. XLA emits `sitofp`/`uitofp` straight to the narrow type; how LLVM lowers that
    depends on the host (through f32 -- rounding twice -- where the CPU converts f32 to bf16
    natively), so we follow the single, correct rounding."""
    v = np.asarray(v)
    neg = v < 0 if v.dtype.kind == "i" else np.zeros(v.shape, bool)
    mag = np.where(neg, -(v + 1), v).astype(np.uint64) + neg.astype(np.uint64)
    q = (mag >> np.uint64(11)) | ((mag & np.uint64(2047)) != 0).astype(np.uint64)
    r = np.where(mag >= np.uint64(1 << 53), q.astype(F64) * 2048.0, mag.astype(F64))
    return np.where(neg, -r, r)


def _float_to_float(x: np.ndarray, f: str, t: str) -> np.ndarray:
    """x holds values of float type f (as its own dtype); returns an array of type t."""
    if f == t:
        return np.array(x)
    if t == "f64":  # f32 (and bf16, via f32) -> f64 reads subnormals as zero
        return (flush(x.astype(F32)) if f in ("f32", "bf16") else x).astype(F64)
    if t == "f32":  # f64 -> f32 flushes subnormal results
        return flush(x.astype(F32)) if f == "f64" else to_f32(x)
    if f in NARROW_FLOATS:
        x = to_f32(x)  # exact
    if t == "bf16":
        if f == "f64":  # XLA emits fptrunc f64 -> f32 (flushing), then its f32 -> bf16 rounding
            x = flush(x.astype(F32))
        return to_bf16(x)  # f32: ml_dtypes' bits, without its per-element call
    if t == "f8e8m0fnu" and f == "f64":  # below 2^-127 there is no e8m0 value: NaN
        x = np.where((x > 0) & (x < 2.0 ** -127), np.nan, x)
    return to_narrow_float(x, t)


def convert_array(x, f: str, t: str) -> np.ndarray:
    """Converts an array of element type f to element type t exactly as XLA:CPU does."""
    x = np.asarray(x)
    if f == t:
        return np.array(x)
    with np.errstate(all="ignore"):
        if is_complex(f):
            comp_f = D.complex_component(f)
            if is_complex(t):
                comp_t = D.complex_component(t)
                re = _float_to_float(x.real, comp_f, comp_t)
                im = _float_to_float(x.imag, comp_f, comp_t)
                out = np.empty(x.shape, D.to_dtype(t))
                out.real, out.imag = re, im
                return out
            return convert_array(np.ascontiguousarray(x.real), comp_f, t)
        if f == "pred":
            if t == "pred":
                return np.array(x)
            v = x.astype(np.uint8)
            return convert_array(v, "u8", t)
        if is_int(f):
            v = iin(x, f)
            if t == "pred":
                return v != 0
            if is_int(t):
                return iout(v.astype(np.int64 if is_signed(f) else np.uint64), t)
            if is_complex(t):
                return v.astype(D.to_dtype(D.complex_component(t))).astype(D.to_dtype(t))
            if t in ("f32", "f64", "f16"):
                return v.astype(D.to_dtype(t))
            if t in NARROW_FLOATS:
                return to_narrow_float(int_to_f64_odd(v), t)
        if is_float(f):
            if t == "pred":
                return fin(x, f, daz=f != "bf16") != 0
            if is_int(t):
                v = fin(x, f, daz=False)
                if f == "f4e2m1fn":  # XLA reads +-6 (the all-ones pattern) as +-inf here
                    v = np.where(np.abs(v) == 6, v * np.float32(np.inf), v)
                return float_to_int(v, t)
            if is_complex(t):
                comp_t = D.complex_component(t)
                re = _float_to_float(x, f, comp_t)
                out = np.zeros(x.shape, D.to_dtype(t))
                out.real = re
                return out
            return _float_to_float(x, f, t)
    raise ValueError(f"convert from {f} to {t} is not supported")


@kernel("convert")
def _convert(ins, args, ctx):
    return result(ins, convert_array(args[0], et(ins, 0), et(ins)))


def _from_pattern(p: np.ndarray, t: str) -> np.ndarray:
    """uint64 bit patterns -> an array of element type t holding them."""
    dt = D.to_dtype(t)
    w = bits(t)
    if dt.itemsize * 8 == w:
        return p.astype(f"u{dt.itemsize}").view(dt)
    return (p & np.uint64((1 << w) - 1)).astype(np.uint8).view(dt)


@kernel("bitcast-convert")
def _bitcast_convert(ins, args, ctx):
    f, t = et(ins, 0), et(ins)
    x = np.ascontiguousarray(args[0])
    wf, wt = bits(f), bits(t)
    dt = ins.shape.dtype
    if wf == wt:
        if x.dtype.itemsize == dt.itemsize and x.dtype.itemsize * 8 == wf:
            return result(ins, x.view(dt).copy())
        return result(ins, _from_pattern(_pattern(x, f), t))
    sub = wf % 8 or wt % 8
    if wf > wt:  # each element splits into wf/wt elements along a new minor dim
        k = wf // wt
        if not sub:
            return result(ins, x.view(dt).reshape(x.shape + (k,)).copy())
        p = _pattern(x, f)[..., None]
        parts = (p >> (np.arange(k, dtype=np.uint64) * np.uint64(wt))) & np.uint64((1 << wt) - 1)
        return result(ins, _from_pattern(parts, t))
    k = wt // wf  # the minor dim (of size wt/wf) merges into one element
    if not sub:
        return result(ins, x.view(dt).reshape(x.shape[:-1]).copy())
    p = _pattern(x, f) << (np.arange(k, dtype=np.uint64) * np.uint64(wf))
    return result(ins, _from_pattern(np.bitwise_or.reduce(p, axis=-1), t))


_SRC_MANTISSA = {"f16": 10, "bf16": 7, "f32": 23, "f64": 52}


def reduce_precision_array(x, t: str, exponent_bits: int, mantissa_bits: int) -> np.ndarray:
    """XLA's ReducePrecision on the bits of t: round the mantissa to nearest even, then send
    exponents out of the reduced range to inf (overflow) or a signed zero (underflow,
    including the reduced type's subnormals); NaN stays NaN, unchanged."""
    x = np.asarray(x)
    if t not in _SRC_MANTISSA:  # 8/4-bit floats: reduce their exact f32 values
        return to_narrow_float(reduce_precision_array(x.astype(F32), "f32", exponent_bits,
                                                      mantissa_bits), t)
    nbits = x.dtype.itemsize * 8
    src_m = _SRC_MANTISSA[t]
    src_e = nbits - 1 - src_m
    U = np.uint64
    full = U((1 << nbits) - 1)
    sign = U(1 << (nbits - 1))
    u0 = x.view(f"u{x.dtype.itemsize}").astype(np.uint64)
    exp_mask = U(((1 << src_e) - 1) << src_m)
    is_nan = (u0 & ~sign & full) > exp_mask
    u = u0
    if mantissa_bits < src_m:
        shift = src_m - mantissa_bits
        last = U(1 << shift)
        last_bit = (u & last) >> U(shift)
        u = ((u + last_bit + U((1 << (shift - 1)) - 1)) & ~(last - U(1))) & full
    if exponent_bits < src_e:
        bias = (1 << (src_e - 1)) - 1
        rbias = (1 << (exponent_bits - 1)) - 1
        xe = u & exp_mask
        over = xe > U((bias + rbias) << src_m)
        under = xe <= U((bias - rbias) << src_m)
        zero = u & sign
        u = np.where(over, zero | exp_mask, u)
        u = np.where(under, zero, u)
    u = np.where(is_nan, u0, u)
    return u.astype(f"u{x.dtype.itemsize}").view(x.dtype)


@kernel("reduce-precision")
def _reduce_precision(ins, args, ctx):
    return result(ins, reduce_precision_array(args[0], et(ins, 0), int(ins.attrs["exponent_bits"]),
                                              int(ins.attrs["mantissa_bits"])))


@kernel("real")
def _real(ins, args, ctx):
    x = np.asarray(args[0])
    return result(ins, np.real(x).copy())


@kernel("imag")
def _imag(ins, args, ctx):
    x = np.asarray(args[0])
    if is_complex(et(ins, 0)):
        return result(ins, np.imag(x).copy())
    return result(ins, np.zeros(x.shape, ins.shape.dtype))


@kernel("complex")
def _complex(ins, args, ctx):
    out = np.empty(ins.shape.dims, ins.shape.dtype)
    out.real, out.imag = args[0], args[1]
    return out



def stochastic_convert_array(x, f: str, r, t: str) -> np.ndarray:
    """XLA's StochasticConvertDecomposer, step by step: |x| is truncated and rounded up when
    the random bits are below its fraction scaled to 2^bits(random); the sign is restored and
    values beyond the target's range saturate.  Signed integer targets only (as XLA)."""
    if not (is_signed(t) and is_float(f)):
        raise ValueError(f"stochastic-convert from {f} to {t} is not supported (XLA decomposes "
                         "float -> signed integer only)")
    rt = D.from_dtype(np.asarray(r).dtype)
    x = np.asarray(x)
    with np.errstate(all="ignore"):
        xc = fin(x, f)
        neg = np.where(np.isnan(xc), False, np.sign(xc) < 0)
        ab = np.abs(x)                                   # abs: a bit operation
        tr = fout(np.floor(fin(ab, f)), f)               # floor
        frac = fout(fin(ab, f) - fin(tr, f), f)          # subtract
        ft = f
        if f == "f16":
            frac, ft = convert_array(frac, "f16", "f32"), "f32"
        scale = np.asarray(2.0 ** bits(rt)).astype(fin(frac, ft).dtype)
        fixed = fout(fin(frac, ft) * scale, ft)          # multiply
        up = np.asarray(r) < convert_array(fixed, ft, rt)
        ti = convert_array(tr, f, t).astype(np.int64)
        ti = iout(np.where(up, ti + 1, ti), t).astype(np.int64)
        res = np.where(neg, -ti, ti)
        w = bits(t)
        lo, hi = -(1 << (w - 1)), (1 << (w - 1)) - 1
        lo_f = fin(np.asarray(lo).astype(D.to_dtype(f)), f)
        hi_f = fin(np.asarray(hi).astype(D.to_dtype(f)), f)
        res = np.where(xc <= lo_f, lo, res)
        res = np.where(xc >= hi_f, hi, res)
    return iout(res, t)


@kernel("stochastic-convert")
def _stochastic_convert(ins, args, ctx):
    return result(ins, stochastic_convert_array(args[0], et(ins, 0), args[1], et(ins)))
