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

from .attr_types import (ConvDims, PadDim, Padding, Raw, ReplicaGroups, SliceDim, SliceRanges,
                         Window, WindowDim, Word)


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
_STRING = r'"(?:[^"\\]|\\.)*"'


def unquote(s: str) -> str:
    # HLO strings use C escapes; JSON's decoder handles the common ones exactly.
    body = s[1:-1]
    if "\\" not in body:
        return body
    try:
        return json.loads(s)
    except ValueError:
        return body.encode("latin-1", "backslashreplace").decode("unicode_escape")


def quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _braced_body(text: str, what: str) -> str:
    t = text.strip()
    if not (t.startswith("{") and t.endswith("}")):
        raise AttrError(f"expected {what} in braces, got '{_short(t)}'")
    return t[1:-1].strip()


def _short(t: str) -> str:
    return t if len(t) < 40 else t[:37] + "..."


def _int(t: str, what: str = "integer") -> int:
    t = t.strip()
    if not _INT.fullmatch(t):
        raise AttrError(f"expected {what}, got '{_short(t)}'")
    return int(t)


def split_top(body: str, sep: str = ",") -> list[str]:
    """Split on `sep` outside of braces, brackets, parens and strings."""
    out, depth, cur, i, n = [], 0, 0, 0, len(body)
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
            out.append(body[cur:i])
            cur = i + 1
        i += 1
    out.append(body[cur:])
    return [p.strip() for p in out if p.strip()]


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


def p_string(t: str) -> str:
    if not re.fullmatch(_STRING, t, re.S):
        raise AttrError(f"expected a quoted string, got '{_short(t)}'")
    return unquote(t)


def p_int_list(t: str) -> tuple[int, ...]:
    body = _braced_body(t, "an integer list")
    return tuple(_int(x) for x in body.split(",")) if body else ()


def p_bool_list(t: str) -> tuple[bool, ...]:
    body = _braced_body(t, "a list of true/false")
    return tuple(p_bool(x.strip()) for x in body.split(",")) if body else ()


def p_word_list(t: str) -> tuple[Word, ...]:
    body = _braced_body(t, "a list of names")
    return tuple(p_word(x.strip()) for x in body.split(",")) if body else ()


def p_comp(t: str) -> CompRef:
    name = t.strip()
    if not re.fullmatch(r"%?[A-Za-z_][\w.\-]*", name):
        raise AttrError(f"expected a computation name, got '{_short(name)}'")
    return CompRef(name.lstrip("%"))


def p_comps(t: str) -> list[CompRef]:
    t = t.strip()
    if t.startswith("{"):
        return [p_comp(x) for x in split_top(_braced_body(t, "computations"))]
    return [p_comp(t)]


def p_instrs(t: str) -> list[InstrRef]:
    return [InstrRef(c.name) for c in p_comps(t)]


def p_slice(t: str) -> SliceRanges:
    dims = []
    for part in split_top(_braced_body(t, "slice ranges")):
        m = re.fullmatch(r"\[\s*(-?\d+)\s*:\s*(-?\d+)\s*(?::\s*(-?\d+)\s*)?\]", part)
        if not m:
            raise AttrError(f"expected [start:limit] or [start:limit:stride], got '{_short(part)}'")
        dims.append(SliceDim(int(m[1]), int(m[2]), int(m[3]) if m[3] else 1))
    return SliceRanges(tuple(dims))


_WINDOW_KEYS = ("size", "stride", "pad", "lhs_dilate", "rhs_dilate", "rhs_reversal")


def p_window(t: str) -> Window:
    body = _braced_body(t, "a window")
    fields: dict[str, list] = {}
    for item in body.split():
        key, eq, val = item.partition("=")
        if not eq or key not in _WINDOW_KEYS:
            raise AttrError(f"unknown window field '{_short(item)}' (expected one of "
                            f"{', '.join(_WINDOW_KEYS)})")
        parts = val.split("x")
        if key == "pad":
            pads = []
            for p in parts:
                lo, us, hi = p.partition("_")
                if not us:
                    raise AttrError(f"window pad must be lo_hi, got '{p}'")
                pads.append((_int(lo), _int(hi)))
            fields[key] = pads
        else:
            fields[key] = [_int(p) for p in parts]
    if "size" not in fields and fields:
        raise AttrError("window has no size")
    n = len(fields.get("size", []))
    for k, v in fields.items():
        if len(v) != n:
            raise AttrError(f"window {k} has {len(v)} dimensions but size has {n}")
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
        if ch == batch:
            b = pos
        elif ch == feature:
            f = pos
        elif ch.isdigit():
            spatial[int(ch)] = pos
        else:
            raise AttrError(f"unexpected '{ch}' in {what} dim_labels '{s}'")
    if b is None or f is None or sorted(spatial) != list(range(len(spatial))):
        raise AttrError(f"{what} dim_labels '{s}' must name {batch}, {feature} and spatial dims 0..n-1")
    return b, f, tuple(spatial[i] for i in range(len(spatial)))


def p_conv_dims(t: str) -> ConvDims:
    m = re.fullmatch(r"([\w]+)_([\w]+)->([\w]+)", t.strip())
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
    for part in t.strip().split("x") if t.strip() else []:
        nums = part.split("_")
        if len(nums) not in (2, 3):
            raise AttrError(f"expected padding lo_hi or lo_hi_interior, got '{_short(part)}'")
        vals = [_int(x) for x in nums]
        dims.append(PadDim(*vals))
    return Padding(tuple(dims))


def _kv_items(body: str, sep: str) -> list[tuple[str, str]]:
    items = []
    for item in split_top(body, sep):
        key, eq, val = item.partition("=")
        if not eq:
            raise AttrError(f"expected key=value, got '{_short(item)}'")
        items.append((key.strip(), val.strip()))
    return items


_META_ITEM = re.compile(r'\s*([A-Za-z_][\w.\-]*)=("(?:[^"\\]|\\.)*"|[^\s"]+)\s*')


def p_metadata(t: str) -> dict[str, Any]:
    # Hot path (jax prints metadata on most instructions): one regex, no character loop.
    body = _braced_body(t, "metadata")
    out: dict[str, Any] = {}
    pos = 0
    for m in _META_ITEM.finditer(body):
        if m.start() != pos:
            break
        pos = m.end()
        key, val = m.group(1), m.group(2)
        if val[0] == '"':
            out[key] = unquote(val)
        elif _INT.fullmatch(val):
            out[key] = int(val)
        else:
            out[key] = Raw(val)
    if pos != len(body):
        raise AttrError(f"malformed metadata near '{_short(body[pos:])}'", pos + 1)
    return out


def p_str_dict(t: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, val in _kv_items(_braced_body(t, "key=value pairs"), ","):
        out[key] = p_string(val) if val.startswith('"') else Raw(val)
    return out


def p_replica_groups(t: str) -> ReplicaGroups:
    t = t.strip()
    if t.startswith("["):
        if not re.fullmatch(r"\[[\d,\s]*\]<=\[[\d,\s]*\](?:T\([\d,\s]*\))?", t):
            raise AttrError(f"malformed iota replica groups '{_short(t)}'")
        return ReplicaGroups(iota=t)
    return ReplicaGroups(groups=tuple(p_int_list(g) for g in split_top(_braced_body(t, "replica groups"))))


def p_pairs(t: str) -> tuple[tuple[int, int], ...]:
    out = []
    for g in split_top(_braced_body(t, "source-target pairs")):
        pair = p_int_list(g)
        if len(pair) != 2:
            raise AttrError(f"expected a {{source,target}} pair, got '{_short(g)}'")
        out.append(pair)
    return tuple(out)


def p_backend_config(t: str):
    # A quoted string (JSON or opaque) becomes str; an MLIR-style dictionary stays Raw.
    return p_string(t) if t.startswith('"') else Raw(t)


def p_shapes(t: str):
    from .shape_parser import parse_shape
    body = _braced_body(t, "a list of shapes")
    return tuple(parse_shape(s) for s in split_top(body)) if body else ()


def p_raw(t: str) -> Raw:
    return Raw(t)


# ---- the table ---------------------------------------------------------------------------

INT_LISTS = (
    "dimensions", "lhs_batch_dims", "lhs_contracting_dims", "rhs_batch_dims",
    "rhs_contracting_dims", "offset_dims", "collapsed_slice_dims", "start_index_map",
    "slice_sizes", "operand_batching_dims", "start_indices_batching_dims", "update_window_dims",
    "inserted_window_dims", "scatter_dims_to_operand_dims", "input_batching_dims",
    "scatter_indices_batching_dims", "fft_length", "dynamic_slice_sizes", "lhs_ragged_dims",
    "rhs_group_dims",
)
INTS = ("index", "index_vector_dim", "iota_dimension", "channel_id", "feature_group_count",
        "batch_group_count", "exponent_bits", "mantissa_bits", "k", "feature_index",
        "cross_program_prefetch_index", "split_dimension", "all_gather_dimension")
BOOLS = ("is_stable", "indices_are_sorted", "unique_indices", "constrain_layout",
         "use_global_device_ids", "custom_call_has_side_effect", "is_composite", "left_side",
         "lower", "unit_diagonal", "largest", "is_host_transfer", "is_cross_program_prefetch")
WORDS = ("direction", "type", "kind", "api_version", "transpose_a", "fft_type", "distribution",
         "algorithm", "custom_call_schedule", "schedule", "padding_type")
STRINGS = ("custom_call_target", "infeed_config", "outfeed_config", "async_execution_thread",
           "execution_thread", "op_name")
COMPS = ("to_apply", "condition", "body", "true_computation", "false_computation", "select",
         "scatter")
COMP_LISTS = ("calls", "branch_computations", "called_computations")

PARSERS: dict[str, Callable[[str], Any]] = {
    **{k: p_int_list for k in INT_LISTS}, **{k: p_int for k in INTS},
    **{k: p_bool for k in BOOLS}, **{k: p_word for k in WORDS}, **{k: p_string for k in STRINGS},
    **{k: p_comp for k in COMPS}, **{k: p_comps for k in COMP_LISTS},
    "slice": p_slice, "window": p_window, "dim_labels": p_conv_dims, "padding": p_padding,
    "metadata": p_metadata, "frontend_attributes": p_str_dict,
    "replica_groups": p_replica_groups, "source_target_pairs": p_pairs,
    "backend_config": p_backend_config, "operand_layout_constraints": p_shapes,
    "control-predecessors": p_instrs, "operand_precision": p_word_list,
    "parameter_replication": p_bool_list, "epsilon": p_float, "outfeed_shape": p_raw,
}


# Kinds whose values are immutable, so one parse can serve every repetition of the same
# text (`dimensions={0}`, `index=1`, `direction=LT` repeat thousands of times in big modules).
_CACHEABLE = frozenset(INT_LISTS + INTS + BOOLS + WORDS + (
    "slice", "window", "dim_labels", "padding", "operand_precision", "replica_groups",
    "source_target_pairs", "parameter_replication"))


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
        return v.name
    if isinstance(v, (Window, SliceRanges, ConvDims, Padding, ReplicaGroups)):
        return str(v)
    if isinstance(v, dict):
        if name == "metadata":
            return "{" + " ".join(f"{k}={format_value(k, x)}" for k, x in v.items()) + "}"
        return "{" + ",".join(f"{k}={format_value(k, x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        if name in COMP_LISTS:
            if name == "calls" and len(v) == 1:
                return v[0].name
            return "{" + ", ".join(c.name for c in v) + "}"
        if name == "control-predecessors":
            return "{" + ", ".join(i.name for i in v) + "}"
        if name == "source_target_pairs":
            return "{" + ",".join("{" + f"{a},{b}" + "}" for a, b in v) + "}"
        if name == "operand_layout_constraints":
            return "{" + ", ".join(str(s) for s in v) + "}"
        return "{" + ",".join(format_value(name, x) for x in v) + "}"
    if isinstance(v, Shape):
        return str(v)
    if isinstance(v, Instruction):
        return v.name
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
