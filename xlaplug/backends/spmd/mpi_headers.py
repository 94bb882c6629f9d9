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
HeaderSwaps (MpiTransport's base) swaps them point to point; mpi_threads.py's leaders send
them ahead of their swaps.
"""
from __future__ import annotations

import hashlib
import struct
import time

import numpy as np

from ...hlo import dtypes
from ..common.errors import ExecutionError

HEADER_BYTES = 128
_HEAD_TAG = 7  # the headers' tag on a group's communicator (its collectives have none)
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


class HeaderSwaps:
    """MpiTransport's header swaps.  Needs `MPI`, `rank`, `_seq` (id(communicator) ->
    collectives begun on it), `_templates`, `_boxes` ({}), and PolledWaits' `_wait` and
    `_poll_control`."""

    def _header(self, comm, ins, call: int, values, shapes: bool = True, size: int = 0,
                op: str = "") -> bytearray:
        """This rank's header for call `call` of `ins` on `comm` (its sequence counted).
        An instruction's operands keep their dtypes and shapes from call to call: its
        template is made once."""
        key = (ins, op) if hasattr(ins, "operands") else None
        tpl = self._templates.get(key) if key is not None else None
        if tpl is None:
            sig = signature(values, shapes) + (f" {op}" if op else "")
            tpl = template(ins.opcode, ins.name, sig)
            if key is not None:
                self._templates[key] = tpl
        seq = self._seq.get(id(comm), 0)
        self._seq[id(comm)] = seq + 1
        return stamp(bytearray(tpl), seq, call, size)

    def _swap_headers(self, comm, ins, call: int, group, header: bytearray) -> list:
        """Every member's message in group order -- its header, or more where a member is at
        another collective -- once the headers agree (else CollectiveMismatch, on every
        member).

        Point to point, into receives posted for a message of this rank's size: a member
        at another collective, or at this one with other operands, is found by its header
        and never read as this one's data (MPI collectives would be posted with that
        member's counts and types, and misread them).  A longer message than this rank's
        is cut short by MPI (ERR_TRUNCATE): its sender got this rank's shorter one, knows
        both headers and reports (_outsized).  Measured on 2 ranks, 4 KiB, 2 shared cores:
        a posted receive and send took 3-8 us where MPI_Iallreduce took 11-21 us
        (mpi_allreduce.py sends a small operand with its header so)."""
        boxes = self._inboxes(len(group), len(header))
        me = group.index(self.rank)  # (a group's communicator ranks its members in order)
        boxes[me] = header
        reqs = self._post(comm, me, boxes)
        self._settle(reqs, False, ins, call, group, boxes)
        return boxes

    def _post(self, comm, me: int, boxes: list) -> list:
        """The receives of every other member's message, then this rank's sends."""
        others = [j for j in range(len(boxes)) if j != me]
        return [comm.Irecv(boxes[j], source=j, tag=_HEAD_TAG) for j in others] + \
            [comm.Isend(boxes[me], dest=j, tag=_HEAD_TAG) for j in others]

    def _settle(self, reqs, done: bool, ins, call: int, group, boxes: list) -> None:
        """Waits for _post's requests (unless `done`), then checks the headers."""
        MPI, me = self.MPI, group.index(self.rank)
        if not done:
            try:
                self._wait(reqs, ins, call, group)
            except MPI.Exception as e:
                self._outsized(boxes[me], reqs, e)
        head = bytes(memoryview(boxes[me])[:AGREE_BYTES])
        if all(bytes(memoryview(b)[:AGREE_BYTES]) == head for b in boxes):
            return
        rows = np.concatenate([np.frombuffer(b, np.uint8, HEADER_BYTES) for b in boxes])
        check(rows, boxes[me], group)

    def _inboxes(self, n: int, size: int) -> list:
        """n receive buffers of `size` bytes, reused from call to call (each call's
        messages are read before the next call posts its receives)."""
        boxes = self._boxes.get((n, size))
        if boxes is None:
            boxes = self._boxes[(n, size)] = [np.empty(size, np.uint8) for _ in range(n)]
        return list(boxes)

    def _outsized(self, header, reqs, error) -> None:
        """`error` from waiting for a header swap: when a member sent more than this rank's
        message (MPI cut it short), that member reports (it holds both headers) and its
        abort stops this rank; 2 s without one, this rank says what it knows."""
        MPI = self.MPI
        if error.Get_error_class() not in (MPI.ERR_TRUNCATE, MPI.ERR_IN_STATUS):
            raise error
        until = time.monotonic() + 2.0
        while time.monotonic() < until:
            try:
                MPI.Request.Testall(reqs)  # the sends still complete
            except MPI.Exception:
                pass
            self._poll_control()  # raises Aborted once the member's abort is here
            time.sleep(1e-3)
        raise CollectiveMismatch(f"{describe(unpack(header[:HEADER_BYTES]))}: another member "
                                 "sent a longer message for this collective (a different "
                                 "one?)")

    def _agree(self, comm, ins, call: int, group, header: bytearray) -> list[int]:
        """The members' payload sizes, once their headers agree (_swap_headers)."""
        return [fields_size(m) for m in self._swap_headers(comm, ins, call, group, header)]
