"""Constant literals: HLO text <-> numpy arrays, for every element type.

Parsing is the hot path for large constants, so array literals are flattened with string
operations and converted by numpy in one call; the brace structure is checked against the
shape's rank and the element count against its size.
"""
from __future__ import annotations

import re

import numpy as np

from . import dtypes
from .ir import Shape


class LiteralError(ValueError):
    def __init__(self, message: str, offset: int = 0):
        super().__init__(message)
        self.offset = offset


_SPECIAL = {"inf": np.inf, "+inf": np.inf, "-inf": -np.inf, "nan": np.nan, "+nan": np.nan,
            "-nan": -np.nan}
_NAN_PAYLOAD = re.compile(r"(-?)nan\(0x([0-9a-fA-F]+)\)")


def _float_values(tokens: list[str], dtype: np.dtype) -> np.ndarray:
    try:
        out = np.array(tokens, dtype=np.float64)
    except ValueError:
        out = np.empty(len(tokens), np.float64)
        for i, t in enumerate(tokens):
            t = t.strip()
            if t in _SPECIAL:
                out[i] = _SPECIAL[t]
            elif _NAN_PAYLOAD.fullmatch(t):
                out[i] = np.nan
            else:
                try:
                    out[i] = float(t)
                except ValueError:
                    raise LiteralError(f"invalid floating-point literal '{t[:30]}'") from None
    neg_nan = [i for i, t in enumerate(tokens) if t.strip().startswith("-nan")]
    res = out.astype(dtype)
    if neg_nan:  # keep the sign bit of -nan, which XLA prints and reads back
        res[neg_nan] = -np.abs(res[neg_nan])
    return res


def _int_values(tokens: list[str], etype: str, dtype: np.dtype) -> np.ndarray:
    vals = []
    for t in tokens:
        t = t.strip()
        if etype == "pred" and t in ("true", "false"):
            vals.append(t == "true")
            continue
        try:
            vals.append(int(t, 0) if t.lower().startswith(("0x", "-0x")) else int(t))
        except ValueError:
            raise LiteralError(f"invalid {etype} literal '{t[:30]}'") from None
    if etype == "pred":
        return np.array([bool(v) for v in vals], dtype=np.bool_)
    info = np.iinfo(dtype) if dtype.kind in "iu" else None
    if info is not None:
        bad = [v for v in vals if not (info.min <= v <= info.max)]
        if bad:
            raise LiteralError(f"value {bad[0]} is out of range for {etype}")
    return np.array(vals, dtype=np.int64 if etype != "u64" else np.uint64).astype(dtype)


_COMPLEX = re.compile(r"\(\s*([^,()]+?)\s*,\s*([^,()]+?)\s*\)")


def _complex_values(body: str, dtype: np.dtype) -> np.ndarray:
    pairs = _COMPLEX.findall(body)
    rest = _COMPLEX.sub("", body)
    if re.search(r"[^\s{},]", rest):
        raise LiteralError("complex literal elements must be (real, imag) pairs")
    part = np.float32 if dtype == np.complex64 else np.float64
    re_ = _float_values([p[0] for p in pairs], np.dtype(part))
    im_ = _float_values([p[1] for p in pairs], np.dtype(part))
    return (re_ + 1j * im_.astype(dtype)).astype(dtype)


def parse_literal(text: str, shape: Shape):
    """Literal text (the inside of `constant(...)`) -> numpy array, or a tuple for tuples."""
    text = text.strip()
    if shape.is_tuple:
        if not (text.startswith("(") and text.endswith(")")):
            raise LiteralError("a tuple constant needs a parenthesised tuple literal")
        from .attributes import split_top
        parts = split_top(text[1:-1])
        if len(parts) != len(shape.tuple_shapes):
            raise LiteralError(f"tuple literal has {len(parts)} elements, shape "
                               f"{shape} has {len(shape.tuple_shapes)}")
        return tuple(parse_literal(p, s) for p, s in zip(parts, shape.tuple_shapes))
    if shape.is_token:
        raise LiteralError("a token has no literal")
    etype = shape.element_type
    dtype = shape.dtype
    rank = shape.rank
    if rank == 0:
        if text.startswith("{"):
            raise LiteralError(f"scalar {etype} literal must not be in braces")
        body = text
    else:
        depth = maxdepth = 0
        for ch in text:
            if ch == "{":
                depth += 1
                maxdepth = max(maxdepth, depth)
            elif ch == "}":
                depth -= 1
                if depth < 0:
                    raise LiteralError("unbalanced '}' in literal")
        if depth != 0:
            raise LiteralError("unterminated '{' in literal")
        if maxdepth != rank and shape.num_elements() > 0:
            raise LiteralError(f"literal nesting depth {maxdepth} does not match rank {rank} "
                               f"of shape {shape}")
        body = text
    if dtypes.is_complex(etype):
        flat = _complex_values(body, dtype)
    else:
        tokens = [t for t in body.replace("{", " ").replace("}", " ").split(",") if t.strip()]
        if len(tokens) == 1 and rank > 0 and "," not in body and " " in tokens[0].strip():
            raise LiteralError("literal elements must be separated by commas")
        if dtypes.is_float(etype):
            flat = _float_values(tokens, dtype)
        else:
            flat = _int_values(tokens, etype, dtype)
    n = shape.num_elements()
    if flat.size != n:
        raise LiteralError(f"literal has {flat.size} elements, shape {shape} needs {n}")
    return flat.reshape(shape.dims)


# ---- printing ----------------------------------------------------------------------------

def _fmt_float(v, etype: str) -> str:
    f = float(v)
    if f != f:
        return "-nan" if np.signbit(v) else "nan"
    if f in (np.inf, -np.inf):
        return "inf" if f > 0 else "-inf"
    if etype == "f64":
        s = repr(f)
    elif etype == "f16":
        s = str(np.float16(f))
    else:  # f32 and the narrow floats: shortest float32 repr of the exact value
        s = str(np.float32(f))
    return s[:-2] if s.endswith(".0") else s


def format_scalar(v, etype: str) -> str:
    if etype == "pred":
        return "true" if bool(v) else "false"
    if dtypes.is_complex(etype):
        part = "f64" if etype == "c128" else "f32"
        return f"({_fmt_float(v.real, part)}, {_fmt_float(v.imag, part)})"
    if dtypes.is_float(etype):
        return _fmt_float(v, etype)
    return str(int(v))


def format_literal(value, shape: Shape) -> str:
    if shape.is_tuple:
        return "(" + ", ".join(format_literal(v, s) for v, s in zip(value, shape.tuple_shapes)) + ")"
    etype = shape.element_type
    arr = np.asarray(value)
    if shape.rank == 0:
        return format_scalar(arr.reshape(()).item() if etype != "bf16" else arr.reshape(())[()],
                             etype)
    if etype in ("f32", "f64") or dtypes.is_integral(etype) or etype == "pred":
        if etype == "pred":
            items = np.where(arr.reshape(-1), "true", "false").tolist()
        elif dtypes.is_integral(etype):
            items = [str(x) for x in arr.reshape(-1).astype(object if etype == "u64" else np.int64).tolist()]
        else:
            items = [_fmt_float(x, etype) for x in arr.reshape(-1).astype(
                np.float32 if etype == "f32" else np.float64)]
    else:
        items = [format_scalar(x, etype) for x in arr.reshape(-1)]
    return _nest(items, shape.dims)


def _nest(items: list[str], dims) -> str:
    if len(dims) == 1:
        return "{" + ", ".join(items) + "}"
    inner = 1
    for d in dims[1:]:
        inner *= d
    groups = [_nest(items[i * inner:(i + 1) * inner], dims[1:]) for i in range(dims[0])]
    return "{ " + ", ".join(groups) + " }"
