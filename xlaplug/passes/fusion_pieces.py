"""A loop-fusion group too large to compile quickly, cut into pieces of bounded size.

numba's compile of a fused loop grows faster than the loop (a 1,000-instruction body took
seconds, type inference over every call in it), and a chain of 100,000 elementwise ops
would be one body.  So loop-fusion cuts a group of more than `limit` instructions into
pieces, each one fusion with one output, that read each other's results: the same values,
one extra pass over memory per cut.  Pieces of the same form (a long chain cut every
`limit` instructions) have the same scalar source, so the kernel cache compiles one.

A piece grows from its root upward as a group does (passes/loop_fusion.py): a member joins
when every reader of it inside the group is in the piece; rank-0 constants and broadcasts
are copied into every piece that reads them.  Past `limit` instructions only reshapes,
copies and multiplies still join (a multiply without its operands): a multiply stays with
the add that contracts it into an FMA, so the cuts never fall between a multiply and its
reader.  A cut that would (a multiply or reshape read by two pieces, or the root of one)
leaves the group whole: its bits are then the unsplit loop's, always.
"""
from __future__ import annotations

from ..backends.common.fusion_contents import SHAPE_OPS, cheap, edge_broadcast
from ..hlo.ir import Instruction

DEFAULT_MAX_INSTRUCTIONS = 128
_KEEP_WITH_READER = SHAPE_OPS | {"multiply"}


def pieces(group: list[Instruction], users: dict[int, list[Instruction]],
           limit: int) -> list[list[Instruction]]:
    """`group` (topological order, root last) as pieces of about `limit` instructions
    each, producers' pieces first, each in topological order with its root last; or
    [group] when it is small enough or cannot be cut safely.  `users`: id -> readers."""
    if limit < 2 or len(group) <= limit:
        return [group]
    order = {id(i): k for k, i in enumerate(group)}
    piece_of: dict[int, int] = {}   # non-cheap member -> its piece
    out: list[list[Instruction]] = []
    for root in reversed(group):
        if id(root) in piece_of or cheap(root):
            continue
        if root.opcode in _KEEP_WITH_READER and root is not group[-1]:
            return [group]  # would be computed apart from the reader it belongs with
        k = len(out)
        piece, seen = [root], {id(root)}
        piece_of[id(root)] = k
        work = list(root.operands)
        while work:
            p = work.pop()
            if id(p) not in order or id(p) in seen or id(p) in piece_of:
                continue
            extend = not edge_broadcast(p)
            if not cheap(p):
                readers = [u for u in users.get(id(p), []) if id(u) in order]
                if not all(id(u) in seen for u in readers):
                    continue  # a reader is elsewhere: pushed again when it joins
                if len(piece) >= limit:
                    if p.opcode not in _KEEP_WITH_READER:
                        continue  # a cut: p roots a later piece
                    extend = p.opcode != "multiply"
                piece_of[id(p)] = k
            piece.append(p)
            seen.add(id(p))
            if extend:
                work.extend(p.operands)
        out.append(sorted(piece, key=lambda i: order[id(i)]))
    out.reverse()
    return out
