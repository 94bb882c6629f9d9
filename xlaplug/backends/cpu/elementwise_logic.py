"""Compare, select, clamp, min/max, logical/bitwise ops, shifts, popcnt, clz (XLA:CPU
semantics; see elementwise.py)."""
from __future__ import annotations

import numpy as np

from ..registry import kernel
from .elementwise import (bits, et, fin, fout, iin, iout, is_complex, is_float, is_int,
                          is_signed, result)
from . import elementwise_loops as L

_CMP = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
        "GT": np.greater, "GE": np.greater_equal}


def fmax(a, b):
    """XLA's NaN-propagating max (-0 < +0)."""
    r = np.where(a > b, a, b)
    r = np.where((a == b) & (a == 0), np.where(np.signbit(a), b, a), r)
    return np.where(np.isnan(a), a, np.where(np.isnan(b), b, r))


def fmin(a, b):
    r = np.where(a < b, a, b)
    r = np.where((a == b) & (a == 0), np.where(np.signbit(a), a, b), r)
    return np.where(np.isnan(a), a, np.where(np.isnan(b), b, r))


def _pattern(x, t: str) -> np.ndarray:
    """The W-bit pattern of each element as uint64 (sub-byte types included)."""
    x = np.asarray(x)
    w = bits(t)
    if t == "pred":
        return x.astype(np.uint64)
    if x.dtype.itemsize * 8 == w:
        return x.view(f"u{x.dtype.itemsize}").astype(np.uint64)
    # sub-byte (ml_dtypes): one element per byte, the value in the low w bits
    return x.view(np.uint8).astype(np.uint64) & np.uint64((1 << w) - 1)


def _signed(p: np.ndarray, w: int) -> np.ndarray:
    """W-bit patterns (uint64) -> their two's-complement values (int64)."""
    s = p.astype(np.int64)
    if w < 64:
        s = np.where(s >> (w - 1) != 0, s - (1 << w), s)
    return s


def total_order_key(x, t: str) -> np.ndarray:
    """Signed integer keys ordering floats as -NaN < -inf < ... < -0 < +0 < ... < inf < NaN."""
    w = bits(t)
    s = _signed(_pattern(x, t), w)
    return np.where(s < 0, s ^ ((1 << (w - 1)) - 1), s)


@kernel("compare")
def _compare(ins, args, ctx):
    t = et(ins, 0)
    d = str(ins.attrs["direction"])
    ctype = str(ins.attrs.get("type", "")) or None
    a, b = np.asarray(args[0]), np.asarray(args[1])
    fn = _CMP[d]
    if is_float(t) and ctype == "TOTALORDER":
        return result(ins, fn(total_order_key(a, t), total_order_key(b, t)))
    if is_float(t) or is_complex(t):
        if is_complex(t) and d not in ("EQ", "NE"):
            raise ValueError(f"complex compare supports EQ/NE only, got {d}")
        return result(ins, fn(fin(a, t), fin(b, t)))
    if t == "pred":
        return result(ins, fn(a, b))
    if ctype == "UNSIGNED" or (ctype is None and not is_signed(t)):
        return result(ins, fn(_pattern(a, t), _pattern(b, t)))
    w = bits(t)
    return result(ins, fn(_signed(_pattern(a, t), w), _signed(_pattern(b, t), w)))


@kernel("select")
def _select(ins, args, ctx):
    p, a, b = args
    return result(ins, np.where(np.asarray(p, dtype=bool), a, b))


def _minmax(op, a, b, t):
    if t == "pred":
        return (a | b) if op == "maximum" else (a & b)
    if is_int(t):
        return iout((np.maximum if op == "maximum" else np.minimum)(iin(a, t), iin(b, t)), t)
    if is_complex(t):
        raise ValueError(f"{op} is not defined on complex numbers")
    with np.errstate(all="ignore"):
        x, y = fin(a, t), fin(b, t)
        return fout(fmax(x, y) if op == "maximum" else fmin(x, y), t)


# From this many elements an f32/f64 maximum/minimum runs as one compiled loop of the scalar
# table's expression (the fused loops' own): fmax's numpy form makes ~12 passes over memory
# (a ReLU of 512K f32 took 28 ms of a conv net's 167 ms step on a loaded 2-core machine).
LOOP_FROM_ELEMENTS = 4096


def _minmax_loop(op: str, a: np.ndarray, b: np.ndarray, t: str) -> np.ndarray:
    from ..common.scalar_ops import SCALAR_OPS, ScalarSig
    from .jit_cache import cached_function
    expr = SCALAR_OPS[op](ScalarSig(t, (t, t))).format("a[i]", "b[i]")
    loop = cached_function(f"def loop(a, b, out):\n    for i in range(out.shape[0]):\n"
                           f"        out[i] = {expr}\n", {}, "loop", nogil=True,
                           error_model="numpy")
    out = np.empty(a.size, a.dtype)
    loop(np.ascontiguousarray(a).reshape(-1), np.ascontiguousarray(b).reshape(-1), out)
    return out.reshape(a.shape)


@kernel("maximum", "minimum")
def _maxmin(ins, args, ctx):
    a, b, t = np.asarray(args[0]), np.asarray(args[1]), et(ins)
    if t in ("f32", "f64") and a.shape == b.shape and a.size >= LOOP_FROM_ELEMENTS:
        return result(ins, _minmax_loop(ins.opcode, a, b, t))
    return result(ins, _minmax(ins.opcode, a, b, t))


@kernel("clamp")
def _clamp(ins, args, ctx):
    lo, x, hi = (np.asarray(v) for v in args)
    t = et(ins)
    return result(ins, _minmax("minimum", hi, _minmax("maximum", lo, x, t), t))


@kernel("and", "or", "xor")
def _bitwise(ins, args, ctx):
    t = et(ins)
    fn = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[ins.opcode]
    if t == "pred":
        return result(ins, fn(np.asarray(args[0], bool), np.asarray(args[1], bool)))
    return result(ins, iout(fn(iin(args[0], t), iin(args[1], t)), t))


@kernel("not")
def _not(ins, args, ctx):
    t = et(ins)
    if t == "pred":
        return result(ins, ~np.asarray(args[0], bool))
    if not is_int(t):
        raise ValueError(f"not is not defined on {t}")
    return result(ins, iout(~iin(args[0], t), t))


@kernel("shift-left", "shift-right-logical", "shift-right-arithmetic")
def _shift(ins, args, ctx):
    t = et(ins)
    if not is_int(t):
        raise ValueError(f"{ins.opcode} is not defined on {t}")
    w = bits(t)
    mask = np.uint64((1 << w) - 1)
    u = _pattern(args[0], t)
    c = _pattern(args[1], t)  # counts read as unsigned: negative counts are out of range
    kind = {"shift-left": 0, "shift-right-logical": 1, "shift-right-arithmetic": 2}[ins.opcode]
    # (arithmetic shifts take the pattern's top bit as the sign, even for unsigned types)
    r = L.shift(kind, L.flat(u, np.uint64), L.flat(c, np.uint64), np.int64(w), mask)
    return result(ins, iout(_from_pattern(r.reshape(u.shape), t), t))


def _from_pattern(p: np.ndarray, t: str) -> np.ndarray:
    return _signed(p, bits(t)) if is_signed(t) else p


@kernel("popcnt")
def _popcnt(ins, args, ctx):
    t = et(ins)
    if is_signed(t) and bits(t) < 8:  # XLA counts the sign-extended byte it stores
        p = np.asarray(args[0]).astype(np.int8).view(np.uint8)
    else:
        p = _pattern(args[0], t)
    return result(ins, iout(np.bitwise_count(p).astype(np.int64), t))


@kernel("count-leading-zeros")
def _clz(ins, args, ctx):
    t = et(ins)
    u = _pattern(args[0], t)
    n = L.clz(L.flat(u, np.uint64), np.int64(bits(t)))
    return result(ins, iout(n.reshape(u.shape), t))
