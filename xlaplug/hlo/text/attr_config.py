"""Value parsers for free-form and configuration values: metadata, frontend_attributes,
backend_config, kept-verbatim `{...}` values, and result_accuracy."""
from __future__ import annotations

import re
from typing import Any

from .attr_cursor import _Cursor
from .attr_text import _INT, AttrError, _braced_body, _short, split_top_at, unquote
from ..attr_types import Raw, ResultAccuracy
from .attr_values import p_int_list, p_string


# XLA separates metadata fields by spaces and also reads commas: `{source_line=5, op_type=".."}`.
_META_ITEM = re.compile(r'\s*([A-Za-z_][\w.\-]*)=("(?:[^"\\\n]|\\.)*"|\{[^{}]*\}|[^\s"{},]+)\s*'
                        r'(?:,\s*)?')


def p_metadata(t: str) -> dict[str, Any]:
    # Hot path (jax prints metadata on most instructions): one regex, no character loop.
    t = t.strip()
    body = _braced_body(t, "metadata")
    out: dict[str, Any] = {}
    pos = 0
    for m in _META_ITEM.finditer(body):
        if m.start() != pos:
            break
        pos = m.end()
        key, val = m.group(1), m.group(2)
        if key in out:
            raise AttrError(f"metadata field '{key}' given twice", 1 + m.start(1))
        if val[0] == '"':
            out[key] = unquote(val)
        elif _INT.fullmatch(val):
            out[key] = int(val)
        elif val in ("true", "false"):  # preserve_layout=true
            out[key] = val == "true"
        elif val[0] == "{":  # profile_type={1,2}
            out[key] = p_int_list(val)
        else:
            raise AttrError(f"metadata field '{key}' needs a quoted string or an integer, got "
                            f"'{_short(val)}'", 1 + m.start(2))
    if pos != len(body):
        rest = body[pos:].lstrip()
        inner = t[1:-1]
        where = 1 + (len(inner) - len(inner.lstrip())) + len(body) - len(rest)
        if rest.startswith('"') or re.match(r'[A-Za-z_][\w.\-]*="', rest):
            raise AttrError("unterminated string in metadata", where + rest.index('"'))
        raise AttrError(f"malformed metadata near '{_short(rest)}' (expected name=\"text\" "
                        f"or name=integer)", where)
    return out


def p_str_dict(t: str) -> dict[str, Any]:
    """frontend_attributes: `{key="text",key2={json-like dict}}`."""
    t = t.strip()
    _braced_body(t, "key=value pairs")
    out: dict[str, Any] = {}
    for item, off in split_top_at(t[1:-1]):
        key, eq, val = item.partition("=")
        key, val = key.strip(), val.strip()
        if not eq or not re.fullmatch(r"[A-Za-z_][\w.\-]*", key):
            raise AttrError(f"expected key=\"value\", got '{_short(item)}'", 1 + off)
        if val.startswith('"'):
            out[key] = p_string(val)
        elif val.startswith("{") and val.endswith("}"):
            out[key] = Raw(val)
        else:
            raise AttrError(f"value of '{key}' must be a quoted string or a {{...}} dictionary, "
                            f"got '{_short(val)}'", 1 + off + item.index("=") + 1)
    return out


def p_backend_config(t: str):
    # A quoted string (JSON or opaque) becomes str; a `{...}` dictionary (JSON, or MLIR-style
    # attributes) stays verbatim, as XLA keeps it.
    if t.startswith('"'):
        return p_string(t)
    if t.startswith("{") and t.endswith("}"):
        return Raw(t)
    raise AttrError(f"backend_config must be a quoted string or a {{...}} dictionary, got "
                    f"'{_short(t)}'")


def p_raw(t: str) -> Raw:
    return Raw(t)


def p_braced_raw(t: str) -> Raw:
    if not (t.startswith("{") and t.endswith("}")):
        raise AttrError(f"expected a {{...}} value, got '{_short(t)}'")
    return Raw(t)


# XLA's ResultAccuracy::Mode values, and the opcodes XLA's parser takes result_accuracy on.
RESULT_ACCURACY_MODES = frozenset({"default", "highest"})
RESULT_ACCURACY_OPS = frozenset({
    "acos", "acosh", "asin", "asinh", "atanh", "exponential-minus-one", "log", "log-plus-one",
    "logistic", "sqrt", "cbrt", "rsqrt", "tanh", "erf", "sine", "sinh", "cosine", "cosh", "tan",
    "exponential"})


def p_result_accuracy(t: str) -> ResultAccuracy:
    c = _Cursor(t, "result_accuracy")
    c.expect("{")
    at = c.pos()
    key = c.word("mode= or tolerance=")
    c.expect("=")
    if key == "mode":
        at = c.pos()
        mode = c.word("an accuracy mode (default, highest)")
        if mode not in RESULT_ACCURACY_MODES:
            c.i = at
            raise c.err(f"unknown result_accuracy mode '{mode}' (expected default or highest)")
        result = ResultAccuracy(mode=mode)
    elif key == "tolerance":
        c.expect("{", " to start the tolerance")
        vals = {"atol": 0.0, "rtol": 0.0, "ulps": 0.0}
        while not c.eat("}"):
            at2 = c.pos()
            k = c.word("atol, rtol or ulps")
            if k not in vals:
                c.i = at2
                raise c.err(f"unknown tolerance field '{k}' (expected atol, rtol, ulps)")
            c.expect("=")
            vals[k] = c.number()
            if not c.eat(","):
                c.expect("}", " or ',' in the tolerance")
                break
        result = ResultAccuracy(None, vals["atol"], vals["rtol"], vals["ulps"])
    else:
        c.i = at
        raise c.err(f"expected mode= or tolerance=, found '{key}'")
    c.expect("}")
    c.done()
    return result


_DEBUG_ITEM = re.compile(r"\s*([A-Za-z_]\w*)\s*=\s*([^\s,{}()]*)\s*")
_DEBUG_VALUES = {"log_mode": re.compile(r"default|fusion_debugger"), "callback_id": _INT,
                 "op_id": _INT, "partitioned": re.compile(r"true|false")}


def p_debug_attributes(t: str) -> Raw:
    """The module's `debug_attributes={ {"name"}:({log_mode=default,callback_id=1}), ... }`:
    each `{field=value,...}` group is checked as XLA checks it (log_mode default or
    fusion_debugger, integer callback_id and op_id, boolean partitioned); kept verbatim."""
    t = t.strip()
    _braced_body(t, "debug attributes")
    for group in re.finditer(r"\(\s*\{([^{}]*)\}", t):
        body, base = group.group(1), group.start(1)
        for item, off in split_top_at(body):
            m = _DEBUG_ITEM.fullmatch(item)
            at = base + off
            if m is None:
                raise AttrError(f"expected field=value in debug attributes, got "
                                f"'{_short(item)}'", at)
            key, val = m.group(1), m.group(2)
            check = _DEBUG_VALUES.get(key)
            if check is None:
                raise AttrError(f"unknown debug attribute '{key}' (expected log_mode, "
                                f"callback_id, partitioned or op_id)", at)
            if not check.fullmatch(val):
                what = {"log_mode": "default or fusion_debugger", "partitioned": "true or false"}
                raise AttrError(f"invalid debug attribute value {key}={val} (expected "
                                f"{what.get(key, 'an integer')})", at + m.start(2) - m.start())
    return Raw(t)
