"""Thunk sequences and buffer assignment.

After the pass pipeline, each computation is scheduled (operands and control predecessors
first; side-effecting instructions the ROOT does not reach are kept) into a ThunkSequence:
one thunk per instruction that does work, each naming its kernel, its input slots and its
output slot.  while / conditional / call / fusion thunks hold the nested sequences of the
computations they run.

Buffer assignment gives each array value a slot.  A slot whose value is dead (its last user
has run) is reused by a later value of no larger size (best fit), and the sequence reports
its peak bytes; the executor drops each value after its last use, so the peak it reports is
the peak the run reaches.  Values that only re-label others (tuple, get-tuple-element,
parameter, bitcast of a plain value) take no new buffer.
"""
from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from ..hlo.errors import plural
from ..hlo.ir import Computation, Instruction, Module
from ..hlo.opcodes import ALIASING, CONTROL_FLOW as NESTED  # noqa: F401 - ALIASING re-exported


@dataclass(eq=False)
class Thunk:
    index: int
    ins: Instruction
    kernel: Callable | None
    inputs: list[int]              # positions in the sequence of the operand thunks
    slot: int | None               # buffer slot of the output (None: aliases, no storage)
    nbytes: int
    # Positions of values whose last use is this thunk: the executor frees them after it.
    frees: list[int] = field(default_factory=list)
    nested: list["ThunkSequence"] = field(default_factory=list)
    # False when the kernel runs its nested computation without its buffers (a loop fusion
    # compiled into one loop): the nested peak does not count.
    nested_buffers: bool = True

    @property
    def kind(self) -> str:
        if self.ins.opcode in ("parameter", "constant"):
            return self.ins.opcode
        if self.ins.opcode in NESTED:
            return self.ins.opcode
        if getattr(self.kernel, "plugin", None):
            return "plugin"
        return "alias" if self.slot is None else "kernel"


@dataclass(eq=False)
class ThunkSequence:
    computation: Computation
    thunks: list[Thunk]
    root: int
    params: list[int]              # positions of the parameter thunks, by parameter number
    slot_sizes: list[int]
    peak_bytes: int

    def total_peak_bytes(self) -> int:
        """Peak of this sequence plus the largest peak of any nested sequence."""
        nested = [s.total_peak_bytes() for t in self.thunks if t.nested_buffers
                  for s in t.nested]
        return self.peak_bytes + max(nested, default=0)


def schedule(comp: Computation) -> list[Instruction]:
    """Program order, adjusted so operands and control predecessors come first (the
    verifier's definition order: a cycle is an error at the instruction, with its line)."""
    from ..hlo.verifier_graph import definition_order
    return definition_order(comp)


def build_sequence(comp: Computation, resolve: Callable[[Instruction], Callable | None],
                   cache: dict[int, ThunkSequence] | None = None) -> ThunkSequence:
    cache = {} if cache is None else cache
    if id(comp) in cache:
        return cache[id(comp)]
    order = schedule(comp)
    pos = {id(ins): k for k, ins in enumerate(order)}
    last_use = list(range(len(order)))
    for k, ins in enumerate(order):
        for o in ins.operands:
            last_use[pos[id(o)]] = k
    last_use[pos[id(comp.root)]] = len(order)  # the result outlives the sequence
    # A value that aliases its operands (tuple, get-tuple-element, ...) keeps them alive.
    for k in range(len(order) - 1, -1, -1):
        if order[k].opcode in ALIASING:
            for o in order[k].operands:
                p = pos[id(o)]
                last_use[p] = max(last_use[p], last_use[k])
    dying: dict[int, list[int]] = {}
    for k, last in enumerate(last_use):
        dying.setdefault(last, []).append(k)

    thunks: list[Thunk] = []
    free_slots = _FreeSlots()
    slot_sizes: list[int] = []
    live = peak = 0
    for k, ins in enumerate(order):
        slot, nbytes = None, 0
        if ins.opcode not in ALIASING:
            nbytes = ins.shape.byte_size()
            slot = free_slots.take(nbytes)
            if slot is None:
                slot = len(slot_sizes)
                slot_sizes.append(nbytes)
            live += nbytes
            peak = max(peak, live)
        t = Thunk(k, ins, resolve(ins), [pos[id(o)] for o in ins.operands], slot, nbytes)
        if ins.opcode in NESTED:
            t.nested = [build_sequence(c, resolve, cache) for c in ins.called_computations()]
            compiled = getattr(t.kernel, "compiled_loop", None)
            t.nested_buffers = not (compiled is not None and compiled(ins))
        t.frees = dying.get(k, [])
        for d in t.frees:
            dead = t if d == k else thunks[d]
            if dead.slot is not None:
                free_slots.give(dead.slot, slot_sizes[dead.slot])
                live -= dead.nbytes
        thunks.append(t)
    params = [pos[id(p)] for p in comp.parameters]
    seq = ThunkSequence(comp, thunks, pos[id(comp.root)], params, slot_sizes, peak)
    cache[id(comp)] = seq
    return seq


class _FreeSlots:
    """The dead buffers, by size: `take(n)` hands out the smallest that holds n bytes (best
    fit), of those the one freed first -- in O(log sizes), not a scan of every free buffer
    (a wide fan-out frees thousands at once)."""

    def __init__(self):
        self.sizes: list[int] = []                   # sorted sizes with a free buffer
        self.slots: dict[int, deque[int]] = {}       # size -> its free buffers, oldest first

    def give(self, slot: int, size: int) -> None:
        q = self.slots.get(size)
        if q is None:
            q = self.slots[size] = deque()
            bisect.insort(self.sizes, size)
        q.append(slot)

    def take(self, nbytes: int) -> int | None:
        k = bisect.bisect_left(self.sizes, nbytes)
        if k == len(self.sizes):
            return None
        size = self.sizes[k]
        q = self.slots[size]
        slot = q.popleft()
        if not q:
            del self.slots[size]
            del self.sizes[k]
        return slot


def build_thunks(module: Module, device: str = "cpu",
                 resolve: Callable[[Instruction], Callable | None] | None = None) -> ThunkSequence:
    if resolve is None:
        from ..backends.backend import backend_for
        own = backend_for(device).kernel
        resolve = lambda ins: own(ins.opcode)  # noqa: E731
    return build_sequence(module.entry, resolve)


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def thunk_rows(seq: ThunkSequence, prefix: str = "") -> list[tuple[str, ...]]:
    rows = []
    for t in seq.thunks:
        ins = t.ins
        ins_txt = ", ".join(f"%{i}" for i in t.inputs)
        buf = (f"{ins_txt} -> " if ins_txt else "") + (f"b{t.slot}" if t.slot is not None else "alias")
        rows.append((f"{prefix}{t.index}", t.kind, ins.opcode + f" ({ins.name})", buf,
                     str(ins.shape), _fmt_bytes(t.nbytes) if t.slot is not None else "-"))
        for s in t.nested:
            rows.append((f"{prefix}{t.index}.", "sequence", s.computation.name, "", "",
                         f"peak {_fmt_bytes(s.peak_bytes)}"))
            rows.extend(thunk_rows(s, prefix=f"{prefix}{t.index}."))
    return rows


def thunks_footer(seq: ThunkSequence) -> str:
    return (f"{plural(len(seq.thunks), 'thunk')} in {seq.computation.name}; "
            f"{plural(len(seq.slot_sizes), 'buffer')}, "
            f"peak {_fmt_bytes(seq.peak_bytes)} (with nested sequences "
            f"{_fmt_bytes(seq.total_peak_bytes())})")


THUNK_HEADER = ("#", "thunk", "opcodes", "buffers", "shapes", "bytes")


def thunks_text(seq: ThunkSequence) -> str:
    """The sequence as plain aligned text (`Executable.thunks_text()`, `compile -o`); the
    terminal's table of the same rows is the CLI's (cli/module_report.py)."""
    rows = thunk_rows(seq)
    widths = [max(len(r[i]) for r in rows + [THUNK_HEADER]) for i in range(len(THUNK_HEADER))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
             for r in [THUNK_HEADER] + rows]
    return "\n".join(lines) + "\n" + thunks_footer(seq) + "\n"


def thunks_json(seq: ThunkSequence) -> dict:
    return {
        "computation": seq.computation.name,
        "buffers": len(seq.slot_sizes),
        "buffer_bytes": seq.slot_sizes,
        "peak_bytes": seq.peak_bytes,
        "total_peak_bytes": seq.total_peak_bytes(),
        "thunks": [{"index": t.index, "kind": t.kind, "opcode": t.ins.opcode,
                    "instruction": t.ins.name, "inputs": t.inputs, "buffer": t.slot,
                    "shape": str(t.ins.shape), "bytes": t.nbytes, "frees": t.frees,
                    "nested": [thunks_json(s) for s in t.nested]} for t in seq.thunks],
    }
