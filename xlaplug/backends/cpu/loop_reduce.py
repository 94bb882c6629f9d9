"""A compiled loop's code (loop_codegen.ArrayCodegen) with the interpreter's reduces.

loop_sums folds every reduce in row-major order, one add after the other: a dependent chain
(a scan's f32[64] sum: 64 adds of 4 cycles, ~40% of its step) whose bits are the
HloEvaluator's, not the interpreter's -- whose plain add / multiply / maximum / minimum
reduce is numpy's, pairwise over 8 lanes, under FTZ and DAZ (cpu/reductions.py).  A small
region gives the interpreter's bits by emitting numpy's order (region_sums.numpy_reduce);
LoopCodegen takes that emitter for its reduces, so a compiled loop's sums are the
interpreted loop's, bit for bit, and its 8 partial sums run in vector lanes.  A reduce the
emitter cannot say (its init not a constant here, a numpy product over leading
dimensions, ...) keeps loop_sums' fold.  The fold's scratch stack is a buffer of the loop
(allocated once per run, not once per iteration).
"""
from __future__ import annotations

import re

from ...hlo.ir import Instruction
from .loop_codegen import ArrayCodegen, Unsupported
from .region_sums import RegionCodegen, numpy_reduce

_ALLOC = re.compile(r"^(\w+) = np\.empty\((\d+), (np\.\w+)\)$")


class LoopCodegen(ArrayCodegen):
    """ArrayCodegen whose reduces are numpy's (module docstring)."""

    flusher = RegionCodegen.flusher

    def __init__(self, consts: dict, prefix: str):
        super().__init__(consts, prefix)
        self.flushers: set[str] = set()

    def emit(self, ins: Instruction, name: str) -> str:
        if ins.opcode != "reduce":
            return super().emit(ins, name)
        if any(self.names.get(id(o)) in self._loop_vars for o in ins.operands):
            self._flush()
        mark = (len(self.lines), len(self.pieces), dict(self.buffers), set(self.flushers))
        try:
            numpy_reduce(self, ins, name)
        except Unsupported:
            del self.lines[mark[0]:], self.pieces[mark[1]:]
            self.buffers, self.flushers = mark[2], mark[3]
            return super().emit(ins, name)
        # Scratch the fold allocates: buffers of the loop, not allocations per iteration.
        for k in range(mark[0], len(self.lines)):
            m = _ALLOC.match(self.lines[k].strip())
            if m and not self.lines[k].startswith(" "):
                self.buffers[m[1]] = (int(m[2]), m[3])
                self.lines[k] = ""
        self.lines[mark[0]:] = [ln for ln in self.lines[mark[0]:] if ln]
        return name
