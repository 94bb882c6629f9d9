"""Constant literals parsed from HLO text into numpy arrays, for every element type (printing:
literal_format.py).

Parsing is the hot path for large constants, so array literals are flattened with string
operations and converted by numpy in one call; the brace structure is checked against the
shape with string operations too (a `{{vv}{vv}}` skeleton for rank >= 2).  Only when that
fast path finds a problem does a slow token-by-token walk, like XLA's parser, say exactly
what is wrong and where.  Floats are exact to the bit: -0, the sign of NaN and NaN payloads
(`nan(0x1)`) survive parse and print.
"""
from __future__ import annotations

import re

import numpy as np

from ..host import available_memory
from .. import dtypes
from ..ir import Shape


class LiteralError(ValueError):
    def __init__(self, message: str, offset: int = 0):
        super().__init__(message)
        self.offset = offset


_SPECIAL = {"inf": np.inf, "+inf": np.inf, "-inf": -np.inf, "nan": np.nan, "+nan": np.nan,
            "-nan": -np.nan}
_NAN_PAYLOAD = re.compile(r"([-+]?)nan\(0x([0-9a-fA-F]+)\)")
# The numbers XLA's lexer reads in a literal (decimal, integer, inf, nan with payload).
_FLOAT_TOKEN = re.compile(r"[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|inf|nan(?:\(0x[0-9a-fA-F]+\))?)")
_INT_TOKEN = re.compile(r"[-+]?(?:0[xX][0-9a-fA-F]+|\d+)")


# IEEE-like float types, whose NaNs carry a payload (mantissa bits) that XLA prints as
# `nan(0x..)` when it is not the plain quiet NaN.
_PAYLOAD_TYPES = {"f16": 10, "bf16": 7, "f32": 23, "f64": 52, "f8e5m2": 2, "f8e4m3": 3,
                  "f8e3m4": 4}


def _float_bits(dtype: np.dtype):
    """(unsigned view dtype, mantissa bits, exponent mask) for float types with NaN payloads."""
    mant = _PAYLOAD_TYPES.get(dtypes.from_dtype(dtype))
    if mant is None:
        return None
    nbits = dtype.itemsize * 8
    exp_mask = ((1 << (nbits - 1 - mant)) - 1) << mant
    return np.dtype(f"u{dtype.itemsize}"), mant, exp_mask


def _nan_with_payload(sign: str, payload: int, dtype: np.dtype):
    bits = _float_bits(dtype)
    if bits is None:
        raise LiteralError(f"{dtypes.from_dtype(dtype)} NaNs do not take a payload")
    uint, mant, exp_mask = bits
    if payload == 0 or payload >= (1 << mant):
        raise LiteralError(f"NaN payload 0x{payload:x} is out of range for "
                           f"{dtypes.from_dtype(dtype)} (1 to 0x{(1 << mant) - 1:x})")
    word = exp_mask | payload | ((1 << (dtype.itemsize * 8 - 1)) if sign == "-" else 0)
    return np.array([word], dtype=uint).view(dtype)[0]


def _float_values(tokens: list[str], dtype: np.dtype) -> np.ndarray:
    payloads = None
    try:
        out = np.array(tokens, dtype=np.float64)   # C speed; keeps the sign of -nan
    except ValueError:
        out = np.empty(len(tokens), np.float64)
        for i, t in enumerate(tokens):
            t = t.strip()
            if t in _SPECIAL:
                out[i] = _SPECIAL[t]
                continue
            m = _NAN_PAYLOAD.fullmatch(t)
            if m:
                out[i] = -np.nan if m[1] == "-" else np.nan
                payloads = payloads or {}
                payloads[i] = (m[1], int(m[2], 16))
                continue
            try:
                out[i] = float(t)
            except ValueError:
                raise _BadToken(i, f"invalid floating-point literal '{t[:30]}'") from None
    inf = np.isinf(out)
    if inf.any():  # a finite decimal past f64's range (1.8e308) reads as inf: XLA rejects it
        for i in np.flatnonzero(inf):
            if "inf" not in tokens[i]:
                raise _BadToken(int(i), f"value {tokens[i].strip()} is out of range for "
                                        f"{dtypes.from_dtype(dtype)}")
    if dtype == np.float64:
        res = out
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            res = out.astype(dtype)
            back = res.astype(np.float64)
        bad = np.isfinite(out) & ~np.isfinite(back)
        if bad.any():  # XLA rejects a finite value that becomes inf or nan
            i = int(np.argmax(bad))
            raise _BadToken(i, f"value {tokens[i].strip()} is out of range for "
                               f"{dtypes.from_dtype(dtype)}")
    if payloads:
        res = res.copy() if res is out else res
        for i, (sign, payload) in payloads.items():
            try:
                res[i] = _nan_with_payload(sign, payload, dtype)
            except LiteralError as e:
                raise _BadToken(i, str(e)) from None
    return res


class _BadToken(Exception):
    """A bad element: its index among the literal's elements, and the message."""

    def __init__(self, index: int, message: str):
        super().__init__(message)
        self.index = index


def _int_values(tokens: list[str], etype: str, dtype: np.dtype) -> np.ndarray:
    vals = []
    for i, t in enumerate(tokens):
        t = t.strip()
        if etype == "pred" and t in ("true", "false"):
            vals.append(t == "true")
            continue
        try:
            vals.append(int(t, 0) if t.lower().startswith(("0x", "-0x")) else int(t))
        except ValueError:
            raise _BadToken(i, f"invalid {etype} literal '{t[:30]}'") from None
    if etype == "pred":
        return np.array([bool(v) for v in vals], dtype=np.bool_)
    lo, hi = _int_range(etype, dtype)
    if etype == "u64":  # XLA reads an s64 and casts it: u64 constant(-1) is 2^64 - 1
        vals = [v + (1 << 64) if -(1 << 63) <= v < 0 else v for v in vals]
    for i, v in enumerate(vals):
        if not (lo <= v <= hi):
            raise _BadToken(i, f"value {v} is out of range for {etype} [{lo}, {hi}]")
    return np.array(vals, dtype=np.int64 if etype != "u64" else np.uint64).astype(dtype)


def _int_range(etype: str, dtype: np.dtype) -> tuple[int, int]:
    bits = dtypes.bit_width(etype)
    if dtypes.is_signed(etype):
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


# `(real, imag)`; a part may be a NaN with payload, `nan(0x1)`.
_COMPLEX = re.compile(r"\(\s*((?:[^,()\s]|\(0x[0-9a-fA-F]+\))+)\s*,\s*((?:[^,()\s]|\(0x[0-9a-fA-F]+\))+)\s*\)")


def _complex_values(body: str, dtype: np.dtype) -> np.ndarray:
    pairs = _COMPLEX.findall(body)
    rest = _COMPLEX.sub("", body)
    if re.search(r"[^\s{},]", rest):
        raise _Diagnose()  # not all (real, imag) pairs: the slow path says where
    part = np.dtype(np.float32 if dtype == np.complex64 else np.float64)
    try:
        re_ = _float_values([p[0] for p in pairs], part)
        im_ = _float_values([p[1] for p in pairs], part)
    except _BadToken as e:
        raise _BadToken(e.index, f"{e} (in a complex element)") from None
    out = np.empty(len(pairs), dtype)
    out.real = re_   # set the parts separately: inf + 1j*nan must not become nan+nanj,
    out.imag = im_   # and the sign of -0 must survive
    return out


def _skeleton(text: str, complex_: bool) -> str:
    """The brace structure of a literal with each element as 'v': `{{vv}{vv}}`."""
    if complex_:
        text = _COMPLEX.sub("v", text)
    return re.sub(r"[^{},\s]+", "v", text).translate(_DROP_SEP)


_DROP_SEP = str.maketrans("", "", ", \t\n\r")
# XLA's literal parser skips commas: elements may be separated by commas or whitespace.
_SEPARATORS = str.maketrans("{},", "   ")


def _expected_skeleton(dims) -> str:
    inner = "v"
    for d in reversed(dims):
        inner = "{" + inner * d + "}"
    return inner


# One scalar element, as the short form of an array constant may be written.
_SCALAR_TEXT = re.compile(r"[^{},\s]+|\([^()]*\)")


def parse_literal(text: str, shape: Shape):
    """Literal text (the inside of `constant(...)`) -> numpy array, or a tuple for tuples.

    Raises LiteralError whose offset is relative to `text`."""
    lead = len(text) - len(text.lstrip())
    try:
        return _parse_literal(text.strip(), shape)
    except LiteralError as e:
        e.offset += lead
        raise


def _parse_literal(text: str, shape: Shape):
    if shape.is_tuple:
        if not (text.startswith("(") and text.endswith(")")):
            raise LiteralError(f"a tuple constant of shape {shape} needs a parenthesised "
                               f"literal like (1, {{2, 3}})")
        from .attributes import split_top_at
        parts = split_top_at(text[1:-1])
        if len(parts) != len(shape.tuple_shapes):
            raise LiteralError(f"tuple literal has {len(parts)} elements, shape "
                               f"{shape} has {len(shape.tuple_shapes)}")
        out = []
        for (p, off), s in zip(parts, shape.tuple_shapes):
            try:
                out.append(_parse_literal(p, s))
            except LiteralError as e:
                e.offset += 1 + off
                raise
        return tuple(out)
    if shape.is_token or shape.element_type not in dtypes.ELEMENT_DTYPES:
        raise LiteralError(f"a {shape.element_type} has no literal")
    if not text:
        raise LiteralError(f"missing literal for shape {shape}")
    etype = shape.element_type
    dtype = shape.dtype
    rank = shape.rank
    is_complex = dtypes.is_complex(etype)
    n = shape.num_elements()
    if rank > 0 and n > 0 and not text.startswith("{") and _SCALAR_TEXT.fullmatch(text):
        # XLA's short form `f32[3] constant(1)`: its parser sets the first element and leaves
        # the rest as the zeros the literal was created with -- {1, 0, 0}.
        first = _parse_literal(text, Shape.array(etype, ()))
        need, have = n * dtype.itemsize, available_memory()
        if need > have:  # `f64[8589934592] constant(1)` is 64 GiB of zeros
            raise LiteralError(f"the short form fills all of {shape}: {need / 2**30:.1f} GiB, "
                               f"more than the memory available ({have / 2**30:.1f} GiB)")
        out = np.zeros(shape.dims, dtype)
        out.flat[0] = first
        return out
    try:
        if rank == 0:
            if text.startswith("{"):
                raise LiteralError(f"a scalar {etype} literal is written without braces, like "
                                   f"{'(1, 0)' if is_complex else '1'}")
        elif not (text.startswith("{") and text.endswith("}")):
            raise _Diagnose()
        elif rank == 1:
            inner = text[1:-1]
            if "{" in inner or "}" in inner:
                raise _Diagnose()
        elif n > len(text) or _skeleton(text, is_complex) != _expected_skeleton(shape.dims):
            # (Each element takes a character at least: a shorter text cannot fit the shape,
            # and its expected skeleton could be far too large to build.)
            raise _Diagnose()
        if is_complex:
            flat = _complex_values(text, dtype)
        else:
            tokens = text.translate(_SEPARATORS).split()
            if len(tokens) != n:
                raise _Diagnose()
            if dtypes.is_float(etype):
                flat = _float_values(tokens, dtype)
            else:
                flat = _int_values(tokens, etype, dtype)
        if flat.size != n:
            raise _Diagnose()
    except _Diagnose:
        from .literal_diagnose import diagnose_dense  # the error path only
        diagnose_dense(text, shape)
        raise LiteralError(f"malformed literal for shape {shape}") from None
    except _BadToken as e:
        from .literal_diagnose import element_offset
        raise LiteralError(str(e), element_offset(text, e.index, is_complex)) from None
    return flat.reshape(shape.dims)


class _Diagnose(Exception):
    """The fast path found a problem; the slow path says exactly what and where."""
