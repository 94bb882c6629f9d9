"""Integer helpers of the scalar op table (numba register_jitable: callable from @njit code
and from plain Python).  Values are int64 (signed) or uint64 bit patterns of the type's width."""
from __future__ import annotations

import numpy as np
from numba.extending import register_jitable


@register_jitable
def _xws(x, w):
    """int64 -> wrapped to a w-bit signed value (w < 64)."""
    m = np.int64(1) << np.int64(w)
    h = np.int64(1) << np.int64(w - 1)
    return ((x + h) & (m - np.int64(1))) - h


@register_jitable
def _xsdiv(a, b, minv):
    if b == 0:
        return np.int64(-1)
    if a == minv and b == -1:
        return a
    q = a // b
    if a % b != 0 and (a < 0) != (b < 0):
        q += np.int64(1)
    return q


@register_jitable
def _xsrem(a, b, minv):
    if b == 0:
        return a
    if a == minv and b == -1:
        return np.int64(0)
    r = a % b
    if r != 0 and (r < 0) != (a < 0):
        r -= b
    return r


@register_jitable
def _xudiv(a, b, ones):
    if b == 0:
        return ones
    return a // b


@register_jitable
def _xurem(a, b):
    if b == 0:
        return a
    return a % b


@register_jitable
def _xipow(base, e, mask, w):
    """Integer power on w-bit patterns (uint64): XLA's 6-step square-and-multiply; a negative
    exponent gives 1 for base 1, +-1 for base -1 (all ones), else 0."""
    one = np.uint64(1)
    acc = one
    b = base
    x = e
    for _ in range(6):
        if x & one:
            acc = (acc * b) & mask
        b = (b * b) & mask
        x = x >> one
    if (e >> np.uint64(w - 1)) & one:
        if base == one:
            return one
        if base == mask:
            return mask if e & one else one
        return np.uint64(0)
    return acc


@register_jitable
def _xsext(p, w):
    """w-bit pattern (uint64) -> signed int64."""
    s = np.int64(p)
    if w < 64 and (p >> np.uint64(w - 1)) & np.uint64(1):
        s = s - (np.int64(1) << np.int64(w))
    return s


@register_jitable
def _xshl(p, c, w, mask):
    if c >= np.uint64(w):
        return np.uint64(0)
    return (p << c) & mask


@register_jitable
def _xsrl(p, c, w):
    if c >= np.uint64(w):
        return np.uint64(0)
    return p >> c


@register_jitable
def _xsra(p, c, w, mask):
    s = _xsext(p, w)
    if c >= np.uint64(w):
        return mask if s < 0 else np.uint64(0)
    return np.uint64(s >> np.int64(c)) & mask


@register_jitable
def _xpopcnt(p):
    n = 0
    while p:
        p &= p - np.uint64(1)
        n += 1
    return np.int64(n)


@register_jitable
def _xclz(p, w):
    n = 0
    for i in range(w - 1, -1, -1):
        if (p >> np.uint64(i)) & np.uint64(1):
            break
        n += 1
    return np.int64(n)


@register_jitable
def _xf2s(x, lo, hi):
    """Saturating float -> signed integer (int64 domain)."""
    v = np.float64(x)
    if v != v:
        return np.int64(0)
    if v <= np.float64(lo):
        return np.int64(lo)
    if v >= np.float64(hi):
        return np.int64(hi)
    return np.int64(v)


@register_jitable
def _xf2u(x, hi):
    v = np.float64(x)
    if not v > 0.0:
        return np.uint64(0)
    if v >= np.float64(hi):
        return np.uint64(hi)
    return np.uint64(v)
