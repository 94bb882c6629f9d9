"""Value parsers for the geometry of an instruction: slice ranges, convolution windows,
convolution dim_labels, and pad's padding."""
from __future__ import annotations

import re

from .attr_text import _INT, AttrError, _braced_body, _int, _short, split_top_at
from ..attr_types import ConvDims, PadDim, Padding, SliceDim, SliceRanges, Window, WindowDim


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
