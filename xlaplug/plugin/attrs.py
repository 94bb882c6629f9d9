"""Custom-call attributes -> typed Python keyword arguments for plugin rules and kernels.

backend_config arrives in every form XLA and JAX print: an MLIR-style dictionary
(`{alpha = 2.000000e+00 : f32, mode = 1 : i32, name = "x", flag = true,
dims = array<i64: 1, 2>, w = dense<[1, 2]> : tensor<2xi64>}`), quoted or not; JSON; or an
opaque string (passed as `backend_config=`).  frontend_attributes add string-valued keywords.
"""
from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from ..hlo.attr_types import Raw
from ..hlo.text.attributes import unquote
from .api import PluginError

_MLIR_TYPES = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "i1": np.bool_,
               "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
               "ui8": np.uint8, "ui16": np.uint16, "ui32": np.uint32, "ui64": np.uint64,
               "si32": np.int32, "si64": np.int64, "index": np.int64,
               "bf16": None}  # ml_dtypes' bfloat16, looked up when used (_mlir_type)


def _mlir_type(name):
    """The numpy type of an MLIR element type name, or None."""
    ty = _MLIR_TYPES.get(name)
    if ty is None and name == "bf16":
        from ..hlo.dtypes import to_dtype
        return to_dtype("bf16").type
    return ty


class AttrSyntaxError(ValueError):
    pass


def _split(body: str) -> list[str]:
    """Split on commas outside (), [], {}, <> and strings."""
    out, depth, cur, i = [], 0, 0, 0
    while i < len(body):
        c = body[i]
        if c == '"':
            i += 1
            while i < len(body) and body[i] != '"':
                i += 2 if body[i] == "\\" else 1
        elif c in "([{<":
            depth += 1
        elif c in ")]}>" and not (c == ">" and body[i - 1] == "-"):
            depth -= 1
        elif c == "," and depth == 0:
            out.append(body[cur:i])
            cur = i + 1
        i += 1
    out.append(body[cur:])
    return [p.strip() for p in out if p.strip()]


def _mlir_value(text: str) -> Any:
    t = text.strip()
    if t in ("true", "false"):
        return t == "true"
    if t.startswith('"'):
        return unquote(t)
    if t.startswith("{"):
        return parse_mlir_dict(t)
    if t.startswith("["):
        return tuple(_mlir_value(x) for x in _split(t[1:-1]))
    m = re.fullmatch(r"array<(\w+)(?::\s*(.*))?>", t, re.S)
    if m:
        ty = _mlir_type(m.group(1))
        if ty is None:
            raise AttrSyntaxError(f"unknown array element type '{m.group(1)}'")
        items = [x.strip() for x in (m.group(2) or "").split(",") if x.strip()]
        return tuple(_scalar(x, m.group(1)) for x in items)
    m = re.fullmatch(r"dense<(.*)>\s*:\s*tensor<((?:\d+x)*)(\w+)>", t, re.S)
    if m:  # what jax.ffi.ffi_call prints for a numpy array attribute
        ty = _mlir_type(m.group(3))
        if ty is None:
            raise AttrSyntaxError(f"unknown tensor element type '{m.group(3)}'")
        dims = tuple(int(d) for d in m.group(2).split("x") if d)
        items = re.findall(r"[^\s,\[\]]+", m.group(1))
        vals = np.array([_scalar(x, m.group(3)) for x in items], ty)
        if vals.size == 1 and int(np.prod(dims)) != 1:  # a splat: dense<0.0> : tensor<3xf32>
            return np.full(dims, vals[0], ty)
        return vals.reshape(dims)
    m = re.fullmatch(r"(.+?)\s*:\s*(\w+)", t, re.S)
    if m:
        ty = _mlir_type(m.group(2))
        if ty is None:
            raise AttrSyntaxError(f"unknown attribute type '{m.group(2)}' in '{t}'")
        return _scalar(m.group(1).strip(), m.group(2))
    try:
        return _number(t)
    except ValueError:
        return t


def _scalar(v: str, type_name: str):
    """One value of MLIR type `type_name` as that numpy scalar type (bool for i1)."""
    ty = _mlir_type(type_name)
    if ty is np.bool_:
        return v in ("true", "1")
    if v.lower().startswith("0x") and type_name in ("f16", "bf16", "f32", "f64"):
        # MLIR prints non-finite floats as their bits
        return np.array(int(v, 16), f"u{np.dtype(ty).itemsize}").view(ty)[()]
    return ty(_number(v))


def _number(v: str):
    if re.fullmatch(r"[-+]?\d+", v):
        return int(v)
    if v.lower().startswith(("0x", "-0x")):
        return int(v, 16)
    return float(v)


def parse_mlir_dict(text: str) -> dict[str, Any]:
    t = text.strip()
    if not (t.startswith("{") and t.endswith("}")):
        raise AttrSyntaxError(f"expected an MLIR dictionary in braces, got '{t[:40]}'")
    out = {}
    for item in _split(t[1:-1]):
        key, eq, val = item.partition("=")
        if not eq:
            out[key.strip()] = True  # a unit attribute
            continue
        try:
            out[key.strip().strip('"')] = _mlir_value(val)
        except ValueError as e:
            raise AttrSyntaxError(f"attribute '{key.strip()}': {e}") from None
    return out


def _json_typed(v):
    if isinstance(v, float):
        return np.float64(v)
    if isinstance(v, list):
        return tuple(_json_typed(x) for x in v)
    if isinstance(v, dict):
        return {k: _json_typed(x) for k, x in v.items()}
    return v


def backend_config_kwargs(cfg) -> dict[str, Any]:
    if cfg is None:
        return {}
    if isinstance(cfg, Raw):
        return parse_mlir_dict(cfg.text)
    s = cfg.strip()
    if not s:
        return {}
    if s.startswith("{"):
        try:
            v = json.loads(s)
            if isinstance(v, dict):
                return {k: _json_typed(x) for k, x in v.items()}
        except ValueError:
            pass
        try:
            return parse_mlir_dict(s)
        except AttrSyntaxError:
            pass
    return {"backend_config": cfg}


def call_kwargs(ins) -> dict[str, Any]:
    """Typed keyword arguments of a custom-call or composite call."""
    try:
        return _call_kwargs(ins)
    except AttrSyntaxError as e:
        raise PluginError(f"instruction '{ins.name}': cannot read its attributes: {e}",
                          line=ins.line, column=ins.column) from None


def _call_kwargs(ins) -> dict[str, Any]:
    kw: dict[str, Any] = {}
    fa = ins.attrs.get("frontend_attributes") or {}
    if ins.opcode == "call":
        comp_attrs = fa.get("composite.attributes")
        if comp_attrs is not None:
            kw.update(parse_mlir_dict(str(comp_attrs)))
        return kw
    kw.update(backend_config_kwargs(ins.attrs.get("backend_config")))
    for k, v in fa.items():
        if not k.startswith("_"):
            kw.setdefault(k, v if isinstance(v, str) else str(v))
    return kw


def op_name(ins) -> str | None:
    """The op a plugin would provide: custom_call_target, or a composite's name."""
    if ins.opcode == "custom-call":
        return ins.attrs.get("custom_call_target")
    if ins.opcode == "call" and ins.attrs.get("is_composite"):
        fa = ins.attrs.get("frontend_attributes") or {}
        name = fa.get("composite.name")
        return str(name) if name is not None else None
    return None
