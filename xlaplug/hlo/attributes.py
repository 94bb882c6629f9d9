"""Instruction attributes: the kind of each known name, parsing its value text, printing it.

XLA's own parser knows each attribute's kind by name (hlo_parser.cc's `attrs` tables); so
do we.  A name we do not know is kept as `Raw` text, so nothing is ever lost.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

from .attr_types import (BufferDonor, ComputationLayout, ConvDims, InputOutputAlias, LiteralValue,
                         OutputOperandAliasing, PadDim, Padding, Raw, ReplicaGroups, ResultAccuracy,
                         Sharding, SliceDim, SliceRanges, Window, WindowDim, Word)


class AttrError(ValueError):
    """A malformed attribute value; `offset` is relative to the start of the value text."""

    def __init__(self, message: str, offset: int = 0):
        super().__init__(message)
        self.offset = offset


@dataclass
class CompRef:
    """A computation named before the module is fully read; resolved by the parser."""
    name: str
    offset: int = 0


@dataclass
class InstrRef:
    name: str
    offset: int = 0


_INT = re.compile(r"-?\d+")
_STRING = r'"(?:[^"\\\n]|\\.)*"'
_NAME = re.compile(r"%?[A-Za-z_][\w.\-]*")
_C_ESCAPES = {"n": 10, "t": 9, "r": 13, "a": 7, "b": 8, "f": 12, "v": 11, "\\": 92, "'": 39,
              '"': 34, "?": 63}


def _c_unescape(body: str) -> str:
    """C escapes (absl::CUnescape: \\n, \\", octal \\303, \\xNN, \\uNNNN) -> text.  Octal and
    hex escapes are bytes (CEscape writes UTF-8 that way), so they are decoded as UTF-8."""
    out = bytearray()
    i, n = 0, len(body)
    while i < n:
        c = body[i]
        if c != "\\" or i + 1 == n:
            out += c.encode("utf-8")
            i += 1
            continue
        e = body[i + 1]
        if e in _C_ESCAPES:
            out.append(_C_ESCAPES[e])
            i += 2
        elif e in "01234567":
            m = re.match(r"[0-7]{1,3}", body[i + 1:i + 4])
            out.append(int(m.group(0), 8) & 0xFF)
            i += 1 + len(m.group(0))
        elif e == "x" and re.match(r"[0-9a-fA-F]{1,2}", body[i + 2:i + 4]):
            m = re.match(r"[0-9a-fA-F]{1,2}", body[i + 2:i + 4])
            out.append(int(m.group(0), 16))
            i += 2 + len(m.group(0))
        elif e in "uU" and re.fullmatch(r"[0-9a-fA-F]{4}", body[i + 2:i + 6]):
            out += chr(int(body[i + 2:i + 6], 16)).encode("utf-8", "surrogatepass")
            i += 6
        else:  # unknown escape: keep it as written
            out += ("\\" + e).encode("utf-8")
            i += 2
    return out.decode("utf-8", "replace")


def unquote(s: str) -> str:
    """A quoted HLO string -> its text.  HLO strings use C escapes (absl::CEscape)."""
    body = s[1:-1]
    if "\\" not in body:
        return body
    try:
        return json.loads(s)
    except ValueError:
        return _c_unescape(body)


_QUOTE_RX = re.compile(r'[\\"\x00-\x1f\x7f]')
_QUOTE_MAP = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def quote(s: str) -> str:
    """Text -> a quoted HLO string that XLA's lexer reads back (one line, C escapes)."""
    if not _QUOTE_RX.search(s):
        return '"' + s + '"'
    return '"' + _QUOTE_RX.sub(lambda m: _QUOTE_MAP.get(m.group(0), f"\\{ord(m.group(0)):03o}"),
                               s) + '"'


def _braced_body(text: str, what: str) -> str:
    t = text.strip()
    if not (t.startswith("{") and t.endswith("}")):
        raise AttrError(f"expected {what} in braces, got '{_short(t)}'")
    return t[1:-1].strip()


def _short(t: str) -> str:
    return t if len(t) < 40 else t[:37] + "..."


def _int(t: str, what: str = "an integer") -> int:
    t = t.strip()
    if not _INT.fullmatch(t):
        raise AttrError(f"expected {what}, got '{_short(t)}'")
    return int(t)


def split_top(body: str, sep: str = ",") -> list[str]:
    """Split on `sep` outside of braces, brackets, parens and strings."""
    return [p for p, _ in split_top_at(body, sep)]


def split_top_at(body: str, sep: str = ",") -> list[tuple[str, int]]:
    """split_top, with the offset of each (stripped) part in `body`."""
    out, depth, cur, i, n = [], 0, 0, 0, len(body)

    def add(a, b):
        part = body[a:b]
        stripped = part.strip()
        if stripped:
            out.append((stripped, a + len(part) - len(part.lstrip())))

    while i < n:
        c = body[i]
        if c == '"':
            j = i + 1
            while j < n and body[j] != '"':
                j += 2 if body[j] == "\\" else 1
            i = j + 1
            continue
        if c in "{[(":
            depth += 1
        elif c in "}])":
            depth -= 1
        elif depth == 0 and (c == sep or (sep == " " and c.isspace())):
            add(cur, i)
            cur = i + 1
        i += 1
    add(cur, n)
    return out


class _Cursor:
    """A position in an attribute value, for the structured kinds (errors carry offsets)."""

    _WORD = re.compile(r"[A-Za-z_][\w.\-]*")
    _NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|inf|nan)")

    def __init__(self, text: str, what: str):
        self.s, self.i, self.what = text, 0, what

    def ws(self) -> None:
        s, n = self.s, len(self.s)
        while self.i < n:
            if s[self.i].isspace():
                self.i += 1
            elif s.startswith("/*", self.i):
                j = s.find("*/", self.i + 2)
                if j < 0:
                    raise AttrError("unterminated /* comment", self.i)
                self.i = j + 2
            else:
                break

    def at_end(self) -> bool:
        self.ws()
        return self.i >= len(self.s)

    def pos(self) -> int:
        """Where the next token starts."""
        self.ws()
        return self.i

    def peek(self, tok: str) -> bool:
        self.ws()
        return self.s.startswith(tok, self.i)

    def eat(self, tok: str) -> bool:
        if self.peek(tok):
            self.i += len(tok)
            return True
        return False

    def found(self) -> str:
        self.ws()
        if self.i >= len(self.s):
            return "the end of the value"
        m = self._WORD.match(self.s, self.i) or _INT.match(self.s, self.i)
        return f"'{_short(m.group(0) if m else self.s[self.i])}'"

    def err(self, msg: str) -> AttrError:
        return AttrError(msg, self.i)

    def expect(self, tok: str, context: str = "") -> None:
        if not self.eat(tok):
            raise self.err(f"expected '{tok}'{context}, found {self.found()}")

    def int(self, what: str = "an integer") -> int:
        self.ws()
        m = _INT.match(self.s, self.i)
        if not m:
            raise self.err(f"expected {what}, found {self.found()}")
        self.i = m.end()
        return int(m.group(0))

    def number(self, what: str = "a number") -> float:
        self.ws()
        m = self._NUMBER.match(self.s, self.i)
        if not m:
            raise self.err(f"expected {what}, found {self.found()}")
        self.i = m.end()
        return float(m.group(0))

    def word(self, what: str = "a name") -> str:
        self.ws()
        m = self._WORD.match(self.s, self.i)
        if not m:
            raise self.err(f"expected {what}, found {self.found()}")
        self.i = m.end()
        return m.group(0)

    def ints(self, open_: str, close: str, what: str) -> tuple[int, ...]:
        self.expect(open_, f" to start {what}")
        out = []
        if not self.eat(close):
            while True:
                out.append(self.int(f"an integer in {what}"))
                if self.eat(close):
                    break
                self.expect(",", f" or '{close}' in {what}")
        return tuple(out)

    def shape_index(self) -> tuple[int, ...]:
        return self.ints("{", "}", "a shape index")

    def braced(self) -> str:
        """A balanced `{...}` (strings respected), returned verbatim."""
        self.ws()
        start, depth, s, n = self.i, 0, self.s, len(self.s)
        i = start
        while i < n:
            c = s[i]
            if c == '"':
                j = i + 1
                while j < n and s[j] != '"':
                    j += 2 if s[j] == "\\" else 1
                i = j
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    self.i = i + 1
                    return s[start:i + 1]
            i += 1
        raise self.err("unbalanced '{'")

    def done(self) -> None:
        if not self.at_end():
            raise self.err(f"unexpected {self.found()} after the value")


# ---- value parsers (text -> typed value) -------------------------------------------------

def p_int(t: str) -> int:
    return _int(t)


def p_float(t: str) -> float:
    try:
        return float(t)
    except ValueError:
        raise AttrError(f"expected a number, got '{_short(t)}'") from None


def p_bool(t: str) -> bool:
    if t == "true":
        return True
    if t == "false":
        return False
    raise AttrError(f"expected true or false, got '{_short(t)}'")


def p_word(t: str) -> Word:
    if not re.fullmatch(r"[A-Za-z_][\w.\-]*", t):
        raise AttrError(f"expected a name, got '{_short(t)}'")
    return Word(t)


# Enumerations XLA's parser checks by name (the spelling it prints).
ENUMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "direction": ("a comparison direction", ("EQ", "NE", "GE", "GT", "LE", "LT")),
    "type": ("a comparison type", ("FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED")),
    "fft_type": ("an FFT type", ("FFT", "IFFT", "RFFT", "IRFFT")),
    "distribution": ("a random distribution", ("rng_uniform", "rng_normal")),
    "kind": ("a fusion kind", ("kLoop", "kInput", "kOutput", "kCustom")),
    "transpose_a": ("a transpose option", ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT",
                                           "TRANSPOSE_INVALID")),
    "api_version": ("a custom-call API version", (
        "API_VERSION_ORIGINAL", "API_VERSION_STATUS_RETURNING",
        "API_VERSION_STATUS_RETURNING_UNIFIED", "API_VERSION_TYPED_FFI")),
    "schedule": ("a custom-call schedule", ("SCHEDULE_NONE", "SCHEDULE_LATEST",
                                            "SCHEDULE_EARLIEST")),
    "custom_call_schedule": ("a custom-call schedule", ("SCHEDULE_NONE", "SCHEDULE_LATEST",
                                                        "SCHEDULE_EARLIEST")),
    "padding_type": ("a padding type", ("PADDING_INVALID", "PADDING_VALID", "PADDING_SAME")),
    "conv_kind": ("a convolution kind", ("fprop", "wgrad", "dgrad", "unset")),
}
_PRECISIONS = ("default", "high", "highest", "packed_nibble")


def _enum_parser(name: str) -> Callable[[str], Word]:
    what, values = ENUMS[name]
    allowed = frozenset(values)

    def parse(t: str) -> Word:
        if t not in allowed:
            raise AttrError(f"expected {what} ({', '.join(values)}), got '{_short(t)}'")
        return Word(t)
    return parse


def p_string(t: str) -> str:
    if not re.fullmatch(_STRING, t, re.S):
        if t.startswith('"'):
            raise AttrError("unterminated string literal")
        raise AttrError(f"expected a quoted string, got '{_short(t)}'")
    return unquote(t)


def p_int_list(t: str) -> tuple[int, ...]:
    body = _braced_body(t, "an integer list")
    if not body:
        return ()
    out = []
    for part, off in split_top_at(t.strip()[1:-1]):
        if not _INT.fullmatch(part):
            raise AttrError(f"expected an integer list like {{0,1}}, found '{_short(part)}'",
                            1 + off)
        out.append(int(part))
    return tuple(out)


def p_int_list_or_lists(t: str):
    """`{1,2}` or `{{1,2},{3,4}}` (slice_sizes: gather vs. combined collective-permute)."""
    body = _braced_body(t, "an integer list")
    if body.startswith("{"):
        return tuple(p_int_list(g) for g in split_top(body))
    return p_int_list(t)


def p_bool_list(t: str) -> tuple[bool, ...]:
    body = _braced_body(t, "a list of true/false")
    return tuple(p_bool(x.strip()) for x in body.split(",")) if body else ()


def p_bool_or_list(t: str):
    """`true` or `{true,false}` (allow_spmd_sharding_propagation_to_*)."""
    return p_bool_list(t) if t.strip().startswith("{") else p_bool(t)


def p_word_list(t: str) -> tuple[Word, ...]:
    body = _braced_body(t, "a list of names")
    return tuple(p_word(x.strip()) for x in body.split(",")) if body else ()


def p_precision_list(t: str) -> tuple[Word, ...]:
    words = p_word_list(t)
    for w in words:
        if w.lower() not in _PRECISIONS:
            raise AttrError(f"expected operand precisions ({', '.join(_PRECISIONS)}), got "
                            f"'{_short(w)}'")
    return words


def p_comp(t: str) -> CompRef:
    name = t.strip()
    if not _NAME.fullmatch(name):
        raise AttrError(f"expected a computation name, got '{_short(name)}'")
    return CompRef(name.lstrip("%"), len(t) - len(t.lstrip()))


def p_comps(t: str) -> list[CompRef]:
    """`name` or `{name, name}`; each reference's offset is where its name starts."""
    s = t.strip()
    if s.startswith("{"):
        _braced_body(s, "computations")
        out = []
        for part, off in split_top_at(s[1:-1]):
            if not _NAME.fullmatch(part):
                raise AttrError(f"expected a computation name, got '{_short(part)}'", 1 + off)
            out.append(CompRef(part.lstrip("%"), 1 + off))
        if not out:
            raise AttrError("expected at least one computation name in braces")
        return out
    return [p_comp(t)]


def p_instrs(t: str) -> list[InstrRef]:
    t = t.strip()
    _braced_body(t, "instruction names")
    out = []
    for part, off in split_top_at(t[1:-1]):
        if not _NAME.fullmatch(part):
            raise AttrError(f"expected an instruction name, got '{_short(part)}'", 1 + off)
        out.append(InstrRef(part.lstrip("%"), 1 + off))
    return out


_SLICE_DIM = re.compile(r"\[\s*(-?\d+)\s*:\s*(-?\d+)\s*(?::\s*(-?\d+)\s*)?\]")


def p_slice(t: str) -> SliceRanges:
    t = t.strip()
    _braced_body(t, "slice ranges like {[0:2], [1:5:2]}")
    dims = []
    for part, off in split_top_at(t[1:-1]):
        m = _SLICE_DIM.fullmatch(part)
        if not m:
            raise AttrError(f"expected [start:limit] or [start:limit:stride] with integers, "
                            f"got '{_short(part)}'", 1 + off)
        dims.append(SliceDim(int(m[1]), int(m[2]), int(m[3]) if m[3] else 1))
    return SliceRanges(tuple(dims))


_WINDOW_KEYS = ("size", "stride", "pad", "lhs_dilate", "rhs_dilate", "rhs_reversal")


def p_window(t: str) -> Window:
    t = t.strip()
    _braced_body(t, "a window like {size=3x3 stride=2x2}")
    fields: dict[str, list] = {}
    for m in re.finditer(r"\S+", t[1:-1]):
        item, off = m.group(0), 1 + m.start()
        key, eq, val = item.partition("=")
        if not eq or key not in _WINDOW_KEYS:
            raise AttrError(f"unknown window field '{_short(item)}' (expected "
                            f"{', '.join(k + '=' for k in _WINDOW_KEYS)})", off)
        if key in fields:
            raise AttrError(f"window field '{key}=' given twice", off)
        parts = val.split("x")
        try:
            if key == "pad":
                pads = []
                for p in parts:
                    lo, us, hi = p.partition("_")
                    if not us:
                        raise AttrError(f"expected low_high per dimension (like 0_1x1_1), got "
                                        f"'{_short(val)}'")
                    pads.append((_int(lo), _int(hi)))
                fields[key] = pads
            else:
                fields[key] = [_int(p) for p in parts]
        except AttrError as e:
            raise AttrError(f"in {key}=: {e}", off + len(key) + 1) from None
    if fields and "size" not in fields:
        raise AttrError("window has no size=")
    n = len(fields.get("size", []))
    for k, v in fields.items():
        if len(v) != n:
            raise AttrError(f"window {k}= has {len(v)} dimensions but size= has {n}")
    if any(r not in (0, 1) for r in fields.get("rhs_reversal", [])):
        raise AttrError("window rhs_reversal= takes 0 or 1 per dimension")
    dims = []
    for i in range(n):
        pad = fields.get("pad", [(0, 0)] * n)[i]
        dims.append(WindowDim(fields["size"][i], fields.get("stride", [1] * n)[i], pad[0], pad[1],
                              fields.get("lhs_dilate", [1] * n)[i],
                              fields.get("rhs_dilate", [1] * n)[i],
                              bool(fields.get("rhs_reversal", [0] * n)[i])))
    return Window(tuple(dims))


def _labels(s: str, batch: str, feature: str, what: str):
    b = f = None
    spatial: dict[int, int] = {}
    for pos, ch in enumerate(s):
        if ch == "?":
            continue
        if ch in spatial or (ch == batch and b is not None) or (ch == feature and f is not None):
            raise AttrError(f"{what} dim_labels '{s}' repeat '{ch}'")
        if ch == batch:
            b = pos
        elif ch == feature:
            f = pos
        elif ch.isdigit():
            spatial[int(ch)] = pos
        else:
            raise AttrError(f"unexpected '{ch}' in {what} dim_labels '{s}' (expected "
                            f"{batch}, {feature}, digits or ?)")
    if b is None or f is None or sorted(spatial) != list(range(len(spatial))):
        raise AttrError(f"{what} dim_labels '{s}' must name {batch}, {feature} and spatial "
                        f"dims 0..n-1")
    return b, f, tuple(spatial[i] for i in range(len(spatial)))


def p_conv_dims(t: str) -> ConvDims:
    m = re.fullmatch(r"([\w?]+)_([\w?]+)->([\w?]+)", t.strip())
    if not m:
        raise AttrError(f"expected dim_labels like b01f_01io->b01f, got '{_short(t)}'")
    ib, if_, isp = _labels(m[1], "b", "f", "input")
    ki, ko, ksp = _labels(m[2], "i", "o", "kernel")
    ob, of, osp = _labels(m[3], "b", "f", "output")
    if not (len(isp) == len(ksp) == len(osp)):
        raise AttrError(f"dim_labels '{t}' disagree on the number of spatial dimensions")
    return ConvDims(ib, if_, isp, ki, ko, ksp, ob, of, osp, text=t.strip())


def p_padding(t: str) -> Padding:
    dims = []
    off = 0
    for part in t.strip().split("x") if t.strip() else []:
        nums = part.split("_")
        if len(nums) not in (2, 3) or not all(_INT.fullmatch(x) for x in nums):
            raise AttrError(f"expected padding low_high or low_high_interior per dimension "
                            f"(like 0_0x1_-1_2), got '{_short(part)}'", off)
        dims.append(PadDim(*(int(x) for x in nums)))
        off += len(part) + 1
    return Padding(tuple(dims))


_META_ITEM = re.compile(r'\s*([A-Za-z_][\w.\-]*)=("(?:[^"\\\n]|\\.)*"|\{[^{}]*\}|[^\s"{}]+)\s*')


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


_IOTA_GROUPS = re.compile(r"\[([\d,\s]*)\]<=\[([\d,\s]*)\](?:T\(([\d,\s]*)\))?")


def _check_iota(dims: tuple[int, ...], reshape: tuple[int, ...], perm) -> None:
    import math
    if not dims or not reshape:
        raise AttrError("iota dimensions must not be empty")
    if math.prod(dims) != math.prod(reshape):
        raise AttrError(f"iota [{','.join(map(str, dims))}] has {math.prod(dims)} devices but "
                        f"<=[{','.join(map(str, reshape))}] has {math.prod(reshape)}")
    if perm is not None and sorted(perm) != list(range(len(reshape))):
        raise AttrError(f"T({','.join(map(str, perm))}) is not a permutation of the "
                        f"{len(reshape)} reshape dimensions")


def p_replica_groups(t: str) -> ReplicaGroups:
    t = t.strip()
    if t.startswith("["):
        m = _IOTA_GROUPS.fullmatch(t)
        if not m:
            raise AttrError(f"malformed iota replica groups '{_short(t)}' (expected "
                            f"[groups,size]<=[dims] or [groups,size]<=[dims]T(perm))")
        dims = tuple(int(x) for x in m[1].split(",") if x.strip())
        if len(dims) != 2:
            raise AttrError(f"iota replica groups need [groups,size], got [{m[1]}]")
        reshape = tuple(int(x) for x in m[2].split(",") if x.strip())
        perm = tuple(int(x) for x in m[3].split(",") if x.strip()) if m[3] is not None else None
        _check_iota(dims, reshape, perm)
        return ReplicaGroups(iota=t)
    t = t.strip()
    _braced_body(t, "replica groups like {{0,1},{2,3}}")
    groups = []
    for g, off in split_top_at(t[1:-1]):
        try:
            groups.append(p_int_list(g))
        except AttrError as e:
            raise AttrError(f"replica group: {e}", 1 + off + e.offset) from None
    return ReplicaGroups(groups=tuple(groups))


def p_pairs(t: str) -> tuple[tuple[int, int], ...]:
    t = t.strip()
    _braced_body(t, "source-target pairs like {{0,1},{1,0}}")
    out = []
    for g, off in split_top_at(t[1:-1]):
        pair = p_int_list(g)
        if len(pair) != 2:
            raise AttrError(f"expected a {{source,target}} pair, got '{_short(g)}'", 1 + off)
        out.append(pair)
    return tuple(out)


def p_backend_config(t: str):
    # A quoted string (JSON or opaque) becomes str; a `{...}` dictionary (JSON, or MLIR-style
    # attributes) stays verbatim, as XLA keeps it.
    if t.startswith('"'):
        return p_string(t)
    if t.startswith("{") and t.endswith("}"):
        return Raw(t)
    raise AttrError(f"backend_config must be a quoted string or a {{...}} dictionary, got "
                    f"'{_short(t)}'")


def p_shapes(t: str):
    from .shape_parser import ShapeError, parse_shape
    t = t.strip()
    body = _braced_body(t, "a list of shapes")
    out = []
    for s, off in split_top_at(t[1:-1]) if body else []:
        try:
            out.append(parse_shape(s))
        except ShapeError as e:
            raise AttrError(str(e), 1 + off + e.offset) from None
    return tuple(out)


def p_shape(t: str):
    from .shape_parser import ShapeError, parse_shape
    try:
        return parse_shape(t)
    except ShapeError as e:
        raise AttrError(str(e), e.offset) from None


def p_raw(t: str) -> Raw:
    return Raw(t)


def p_braced_raw(t: str) -> Raw:
    if not (t.startswith("{") and t.endswith("}")):
        raise AttrError(f"expected a {{...}} value, got '{_short(t)}'")
    return Raw(t)


# ---- shardings ---------------------------------------------------------------------------

_SHARDING_FLAGS = ("replicated", "maximal", "manual", "unknown", "unreduced")


def _sharding_single(c: _Cursor) -> Sharding:
    """One `{...}` sharding; the cursor is just past its '{'."""
    import math
    open_at = c.i - 1
    c.ws()
    if c.s.startswith(("mesh", "maximal_mesh", "@"), c.i):
        c.i = open_at
        return Sharding("named", text=c.braced())
    flags: set[str] = set()
    device = None
    tile_dims: tuple[int, ...] = ()
    devices = reshape = perm = None
    ltdr = False
    ltd: tuple[str, ...] = ()
    metadata = group = ""
    while not c.eat("}"):
        if c.at_end():
            raise c.err("missing '}' at the end of the sharding")
        at = c.pos()
        w = c.word("a sharding keyword (replicated, maximal, manual, devices=, ...)")
        if w in _SHARDING_FLAGS:
            flags.add(w)
        elif w == "last_tile_dim_replicate":
            ltdr = True
        elif w in ("shard_as", "shard_like"):
            group = f"{w} {c.int('a shard group id')}"
        elif c.eat("="):
            if w == "device":
                device = c.int("a device id after device=")
            elif w == "devices":
                tile_dims = c.ints("[", "]", "the tile assignment dimensions")
                if c.eat("<="):
                    reshape = c.ints("[", "]", "the iota reshape dimensions")
                    if c.eat("T"):
                        perm = c.ints("(", ")", "the iota transpose permutation")
                else:
                    devs = [c.int("a device id")]
                    while c.eat(","):
                        devs.append(c.int("a device id"))
                    devices = tuple(devs)
            elif w == "metadata":
                metadata = c.braced()
            elif w == "last_tile_dims":
                c.expect("{", " to start last_tile_dims")
                types = []
                if not c.eat("}"):
                    while True:
                        at2 = c.pos()
                        ty = c.word("a sharding type")
                        if ty not in ("manual", "replicated", "maximal", "unreduced"):
                            c.i = at2
                            raise c.err(f"unknown sharding type '{ty}' in last_tile_dims "
                                        f"(expected manual, replicated, maximal or unreduced)")
                        types.append(ty)
                        if c.eat("}"):
                            break
                        c.expect(",", " or '}' in last_tile_dims")
                ltd = tuple(types)
            else:
                c.i = at
                raise c.err(f"unknown sharding attribute '{w}=' (expected device=, devices=, "
                            f"metadata= or last_tile_dims=)")
        else:
            c.i = at
            raise c.err(f"unexpected '{w}' in sharding (expected replicated, maximal, manual, "
                        f"unknown, devices=..., last_tile_dim_replicate, ...)")
    where = c.i
    c.i = open_at  # errors about the whole sharding point at its '{'
    result = None
    for flag in _SHARDING_FLAGS:
        if flag in flags:
            if flag == "maximal":
                if device is None:
                    raise c.err("a maximal sharding needs device=N")
                result = Sharding("maximal", device=device, metadata=metadata,
                                  shard_group=group)
            elif device is not None or tile_dims:
                raise c.err(f"{flag} shardings must not assign devices")
            else:
                result = Sharding(flag, metadata=metadata, shard_group=group)
            break
    if result is None:
        if not tile_dims:
            raise c.err("a sharding needs replicated, maximal, manual, unknown or "
                        "devices=[...]")
        if ltdr and ltd:
            raise c.err("last_tile_dim_replicate and last_tile_dims= cannot both be given")
        n = math.prod(tile_dims)
        if reshape is not None:
            try:
                _check_iota(tile_dims, reshape, perm)
            except AttrError as e:
                raise c.err(str(e)) from None
        elif len(devices) != n:
            raise c.err(f"devices=[{','.join(map(str, tile_dims))}] needs {n} device ids, "
                        f"got {len(devices)}")
        result = Sharding("tiled", tile_dims=tile_dims, devices=devices, iota_reshape=reshape,
                          iota_perm=perm, last_tile_dim_replicate=ltdr, last_tile_dims=ltd,
                          metadata=metadata, shard_group=group)
    c.i = where
    return result


def p_sharding(t: str) -> Sharding:
    c = _Cursor(t, "sharding")
    c.expect("{", " to start the sharding")
    c.ws()
    if c.peek("{") or c.peek("}"):  # a tuple sharding, one element per leaf
        elements = []
        if not c.eat("}"):
            while True:
                c.expect("{", " to start a tuple element sharding")
                elements.append(_sharding_single(c))
                if c.eat("}"):
                    break
                c.expect(",", " or '}' between tuple element shardings")
        result = Sharding("tuple", elements=tuple(elements))
    else:
        result = _sharding_single(c)
    c.done()
    return result


# ---- aliasing, layouts, accuracy ---------------------------------------------------------

def p_output_operand_aliasing(t: str) -> OutputOperandAliasing:
    c = _Cursor(t, "output_to_operand_aliasing")
    c.expect("{")
    entries = []
    while not c.eat("}"):
        out = c.shape_index()
        c.expect(":", " after the output shape index ({out}: (operand, {index}))")
        c.expect("(")
        n = c.int("an operand number")
        c.expect(",")
        idx = c.shape_index()
        c.expect(")")
        entries.append((out, n, idx))
        if not c.eat(","):
            c.expect("}", " or ',' between aliasing entries")
            break
    c.done()
    return OutputOperandAliasing(tuple(entries))


def p_io_alias(t: str) -> InputOutputAlias:
    c = _Cursor(t, "input_output_alias")
    c.expect("{")
    entries = []
    while not c.eat("}"):
        out = c.shape_index()
        c.expect(":", " after the output shape index ({out}: (param, {index}, kind))")
        c.expect("(")
        p = c.int("a parameter number")
        c.expect(",")
        idx = c.shape_index()
        kind = "may-alias"
        if c.eat(","):
            at = c.pos()
            kind = c.word("may-alias or must-alias")
            if kind not in ("may-alias", "must-alias"):
                c.i = at
                raise c.err(f"expected may-alias or must-alias, found '{kind}'")
        c.expect(")")
        entries.append((out, p, idx, kind))
        if not c.eat(","):
            c.expect("}", " or ',' between aliases")
            break
    c.done()
    return InputOutputAlias(tuple(entries))


def p_buffer_donor(t: str) -> BufferDonor:
    c = _Cursor(t, "buffer_donor")
    c.expect("{")
    entries = []
    while not c.eat("}"):
        c.expect("(", " to start a (param, {index}) entry")
        p = c.int("a parameter number")
        c.expect(",")
        idx = c.shape_index()
        c.expect(")")
        entries.append((p, idx))
        if not c.eat(","):
            c.expect("}", " or ',' between buffer donors")
            break
    c.done()
    return BufferDonor(tuple(entries))


def p_computation_layout(t: str) -> ComputationLayout:
    from .shape_parser import ShapeError, parse_shape
    t = t.strip()
    body = _braced_body(t, "a computation layout like {(f32[2]{0})->f32[2]{0}}")
    start = t.index(body)
    depth = 0
    for i, ch in enumerate(body):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0 and body.startswith("->", i):
            break
    else:
        raise AttrError("computation layout needs '(parameters)->result'", start)
    try:
        params = parse_shape(body[:i])
    except ShapeError as e:
        raise AttrError(f"computation layout parameters: {e}", start + e.offset) from None
    if not params.is_tuple or not body[:i].strip().startswith("("):
        raise AttrError("computation layout parameters must be in parentheses", start)
    try:
        result = parse_shape(body[i + 2:])
    except ShapeError as e:
        raise AttrError(f"computation layout result: {e}", start + i + 2 + e.offset) from None
    return ComputationLayout(params.tuple_shapes, result)


def p_result_accuracy(t: str) -> ResultAccuracy:
    c = _Cursor(t, "result_accuracy")
    c.expect("{")
    at = c.pos()
    key = c.word("mode= or tolerance=")
    c.expect("=")
    if key == "mode":
        mode = c.word("an accuracy mode (default, highest)")
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


def p_literal(t: str) -> LiteralValue:
    """custom-call `literal=s32[2]{0} {1, 2}`: a shape, then the literal."""
    from .literals import LiteralError, parse_literal
    from .shape_parser import ShapeError, parse_shape_prefix
    try:
        shape, end = parse_shape_prefix(t)
    except ShapeError as e:
        raise AttrError(f"literal: {e}", e.offset) from None
    try:
        return LiteralValue(shape, parse_literal(t[end:], shape))
    except LiteralError as e:
        raise AttrError(f"literal: {e}", end + e.offset) from None


# ---- the table ---------------------------------------------------------------------------

INT_LISTS = (
    "dimensions", "lhs_batch_dims", "lhs_contracting_dims", "rhs_batch_dims",
    "rhs_contracting_dims", "offset_dims", "collapsed_slice_dims", "start_index_map",
    "operand_batching_dims", "start_indices_batching_dims", "update_window_dims",
    "inserted_window_dims", "scatter_dims_to_operand_dims", "input_batching_dims",
    "scatter_indices_batching_dims", "fft_length", "dynamic_slice_sizes", "lhs_ragged_dims",
    "rhs_group_dims",
)
INTS = ("index", "index_vector_dim", "iota_dimension", "channel_id", "feature_group_count",
        "batch_group_count", "exponent_bits", "mantissa_bits", "k", "feature_index",
        "cross_program_prefetch_index", "split_dimension", "all_gather_dimension", "delta",
        "num_carries", "inferred_dimension", "replica_count", "num_partitions")
BOOLS = ("is_stable", "indices_are_sorted", "unique_indices", "constrain_layout",
         "use_global_device_ids", "custom_call_has_side_effect", "is_composite", "left_side",
         "lower", "unit_diagonal", "largest", "is_host_transfer", "is_cross_program_prefetch",
         "is_reverse", "is_associative", "is_scheduled", "alias_passthrough_params")
WORDS = ("algorithm", "mode")
STRINGS = ("custom_call_target", "infeed_config", "outfeed_config", "async_execution_thread",
           "execution_thread", "op_name")
COMPS = ("to_apply", "condition", "body", "true_computation", "false_computation", "select",
         "scatter")
COMP_LISTS = ("calls", "branch_computations", "called_computations")

PARSERS: dict[str, Callable[[str], Any]] = {
    **{k: p_int_list for k in INT_LISTS}, **{k: p_int for k in INTS},
    **{k: p_bool for k in BOOLS}, **{k: p_word for k in WORDS}, **{k: p_string for k in STRINGS},
    **{k: p_comp for k in COMPS}, **{k: p_comps for k in COMP_LISTS},
    **{k: _enum_parser(k) for k in ENUMS},
    "slice": p_slice, "window": p_window, "dim_labels": p_conv_dims, "padding": p_padding,
    "metadata": p_metadata, "frontend_attributes": p_str_dict,
    "replica_groups": p_replica_groups, "source_target_pairs": p_pairs,
    "slice_sizes": p_int_list_or_lists, "sharding": p_sharding,
    "backend_config": p_backend_config, "operand_layout_constraints": p_shapes,
    "control-predecessors": p_instrs, "operand_precision": p_precision_list,
    "parameter_replication": p_bool_list, "epsilon": p_float, "outfeed_shape": p_shape,
    "output_to_operand_aliasing": p_output_operand_aliasing,
    "result_accuracy": p_result_accuracy, "literal": p_literal,
    "statistics": p_braced_raw, "origin": p_braced_raw, "domain": p_braced_raw,
    # Module header.
    "entry_computation_layout": p_computation_layout, "input_output_alias": p_io_alias,
    "buffer_donor": p_buffer_donor,
    "allow_spmd_sharding_propagation_to_parameters": p_bool_or_list,
    "allow_spmd_sharding_propagation_to_output": p_bool_or_list,
}


# Kinds whose values are immutable, so one parse can serve every repetition of the same
# text (`dimensions={0}`, `index=1`, `direction=LT` repeat thousands of times in big modules).
_CACHEABLE = frozenset(INT_LISTS + INTS + BOOLS + WORDS + tuple(ENUMS) + (
    "slice", "window", "dim_labels", "padding", "operand_precision", "replica_groups",
    "source_target_pairs", "parameter_replication", "slice_sizes", "sharding",
    "output_to_operand_aliasing", "result_accuracy"))


@lru_cache(maxsize=8192)
def _parse_cached(name: str, text: str) -> Any:
    return PARSERS[name](text)


def parse_attr(name: str, text: str) -> Any:
    if name in _CACHEABLE:
        return _parse_cached(name, text)
    parser = PARSERS.get(name)
    if parser is None:
        return Raw(text)
    return parser(text)


# ---- printing ----------------------------------------------------------------------------

# Names that XLA's lexer would read as something else unless written with a `%` sigil.
_RESERVED = frozenset({"ROOT", "ENTRY", "HloModule", "true", "false", "inf", "nan",
                       "maximal", "replicated", "manual", "unknown", "unreduced",
                       "last_tile_dim_replicate", "shard_as", "shard_like", "FileNames",
                       "FunctionNames", "FileLocations", "StackFrames", "token", "opaque",
                       "tuple", "buffer"})
_NEEDS_SIGIL = re.compile(r"(?:pred|[suf]\d+|bf16|c64|c128|f8e\w+|f4e\w+)$")


def name_ref(name: str) -> str:
    """A computation or instruction name as printed: bare, like JAX prints it, unless
    the bare name would lex as a keyword or an element type."""
    if name in _RESERVED or _NEEDS_SIGIL.match(name):
        return "%" + name
    return name


_STR_TYPES = (Window, SliceRanges, ConvDims, Padding, ReplicaGroups, Sharding, ComputationLayout,
              InputOutputAlias, BufferDonor, OutputOperandAliasing, ResultAccuracy, LiteralValue)


def format_value(name: str, v: Any) -> str:
    from .ir import Computation, Instruction, Shape
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (Raw, Word)):
        return str(v)
    if isinstance(v, str):
        return quote(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, Computation):
        return name_ref(v.name)
    if isinstance(v, _STR_TYPES):
        return str(v)
    if isinstance(v, dict):
        if name == "metadata":
            return "{" + " ".join(f"{k}={format_value(k, x)}" for k, x in v.items()) + "}"
        return "{" + ",".join(f"{k}={format_value(k, x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        if name in COMP_LISTS:
            if name == "calls" and len(v) == 1:
                return name_ref(v[0].name)
            return "{" + ", ".join(name_ref(c.name) for c in v) + "}"
        if name == "control-predecessors":
            return "{" + ", ".join(name_ref(i.name) for i in v) + "}"
        if name == "source_target_pairs":
            return "{" + ",".join("{" + f"{a},{b}" + "}" for a, b in v) + "}"
        if name == "operand_layout_constraints":
            return "{" + ", ".join(str(s) for s in v) + "}"
        return "{" + ",".join(format_value(name, x) for x in v) + "}"
    if isinstance(v, Shape):
        return str(v)
    if isinstance(v, Instruction):
        return name_ref(v.name)
    raise TypeError(f"cannot print attribute {name}={v!r}")


def called_computations(instr) -> list:
    from .ir import Computation
    out = []
    for v in instr.attrs.values():
        if isinstance(v, Computation):
            out.append(v)
        elif isinstance(v, list) and v and isinstance(v[0], Computation):
            out.extend(v)
    return out


def expand_iota_groups(text: str) -> tuple[tuple[int, ...], ...]:
    """`[G,S]<=[dims]T(perm)`: iota over dims, transposed by perm, reshaped to G groups of S."""
    import numpy as np
    m = re.fullmatch(r"\[([\d,\s]*)\]<=\[([\d,\s]*)\](?:T\(([\d,\s]*)\))?", text)
    out_dims = [int(x) for x in m[1].split(",")]
    src_dims = [int(x) for x in m[2].split(",")]
    ids = np.arange(int(np.prod(src_dims))).reshape(src_dims)
    if m[3]:
        ids = ids.transpose([int(x) for x in m[3].split(",")])
    ids = ids.reshape(out_dims[0], -1)
    return tuple(tuple(int(x) for x in g) for g in ids)
