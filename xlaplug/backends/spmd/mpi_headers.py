"""What each MPI collective carries so that ranks that disagree fail instead of mixing data.

Before its payload moves, every collective swaps a fixed 128-byte header with the other
members: the collective's sequence number on its communicator, the instruction's call
number, a digest of (kind, instruction name, dtypes and shapes, reduction op), the payload
size (an exchange's pickled bytes: it legitimately differs between members) and, for the
message, the same things as text.  A mismatch is an error naming both sides, raised by
every member alike; without the header an f32 all-reduce meeting an s32 one returned
garbage, and an all-reduce meeting an all-gather read the reduced bytes as a size to
allocate ("Unable to allocate 7.84 EiB").

Layout: seq, call, digest, size as little-endian 64-bit integers (bytes 0..31; the first 24
must agree), then kind (24 bytes), name (32) and signature (40), UTF-8, cut to fit.
"""
from __future__ import annotations

import hashlib
import struct

import numpy as np

from ...hlo import dtypes
from ..common.errors import ExecutionError

HEADER_BYTES = 128
AGREE_BYTES = 24  # seq, call, digest: every member's must be equal
_FIXED = struct.Struct("<qqQq")
_TEXT = ((32, 24), (56, 32), (88, 40))  # (offset, length) of kind, name, signature


class CollectiveMismatch(ExecutionError):
    """Members of one collective are at different collectives (or the same with different
    operands): every member raises it, with the same text."""


def dtype_name(dtype) -> str:
    try:
        return dtypes.from_dtype(np.dtype(dtype))
    except (KeyError, TypeError, ValueError):
        return str(dtype)


def array_text(a) -> str:
    return f"{dtype_name(a.dtype)}[{','.join(map(str, a.shape))}]"


def signature(values, shapes: bool = True) -> str:
    """The dtypes (and, with `shapes`, shapes) of a collective's operands: a list or tuple
    of arrays, an array, a dict of them (several devices of one rank), or anything else by
    its type.  `shapes` False: a plugin communicator's gather, whose members may hold
    arrays of different lengths."""
    if isinstance(values, dict):
        return "{" + ", ".join(f"{k}: {signature(v, shapes)}" for k, v in values.items()) + "}"
    if isinstance(values, (list, tuple)):
        return "(" + ", ".join(signature(v, shapes) for v in values) + ")"
    if hasattr(values, "dtype") and hasattr(values, "shape"):
        return array_text(values) if shapes else dtype_name(values.dtype)
    return type(values).__name__


def template(kind: str, name: str, sig: str) -> bytearray:
    """A header with the collective's identity filled in; `stamp` adds the counters."""
    digest = hashlib.blake2b(f"{kind}\0{name}\0{sig}".encode(), digest_size=8).digest()
    buf = bytearray(HEADER_BYTES)
    _FIXED.pack_into(buf, 0, 0, 0, int.from_bytes(digest, "little"), 0)
    for (at, n), text in zip(_TEXT, (kind, name, sig)):
        raw = text.encode()
        if len(raw) > n:  # cut on a character boundary, marked as cut
            raw = raw[:n - 3].decode(errors="ignore").encode() + b"..."
        buf[at:at + len(raw)] = raw
    return buf


def stamp(header: bytearray, seq: int, call: int, size: int = 0) -> bytearray:
    struct.pack_into("<qq", header, 0, seq, call)
    struct.pack_into("<q", header, 24, size)
    return header


def fields_size(buf) -> int:
    """The payload size a header (or a message that starts with one) announces."""
    return struct.unpack_from("<q", memoryview(buf).cast("B"), 24)[0]


def unpack(buf) -> dict:
    raw = bytes(buf)
    seq, call, digest, size = _FIXED.unpack_from(raw, 0)
    kind, name, sig = (raw[at:at + n].rstrip(b"\0").decode(errors="replace")
                       for at, n in _TEXT)
    return {"seq": seq, "call": call, "digest": digest, "size": size, "kind": kind,
            "name": name, "sig": sig}


def describe(h: dict) -> str:
    return f"{h['kind']} '{h['name']}' (call {h['call'] + 1}) {h['sig']}"


def check(received: np.ndarray, mine: bytearray, members, unit: str = "rank") -> list[int]:
    """Every member's payload size, once their headers agree with `mine`; else
    CollectiveMismatch naming the first member and the first that differs from it.
    `received`: the members' headers back to back (uint8), in `members` order."""
    rows = received.reshape(len(members), HEADER_BYTES)
    if rows[:, :AGREE_BYTES].tobytes() != bytes(mine[:AGREE_BYTES]) * len(members):
        raise CollectiveMismatch(mismatch_text(rows, members, unit))
    return [int(s) for s in rows[:, 24:32].copy().view("<i8").reshape(-1)]


def mismatch_text(rows, members, unit: str = "rank") -> str:
    heads = [unpack(r) for r in rows]
    first = heads[0]
    other = next(i for i, h in enumerate(heads)
                 if (h["seq"], h["call"], h["digest"]) !=
                 (first["seq"], first["call"], first["digest"]))
    h = heads[other]
    at = (f"collective {first['seq'] + 1}" if first["seq"] == h["seq"] else
          f"collectives {first['seq'] + 1} and {h['seq'] + 1}")
    return (f"{unit}s disagree at {at} over {unit}s {', '.join(map(str, members))}: "
            f"{unit} {members[0]} has {describe(first)}, {unit} {members[other]} has "
            f"{describe(h)}")
