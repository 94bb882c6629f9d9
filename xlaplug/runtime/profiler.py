"""Per-thunk profile of a run (`xlaplug run --profile`).

A Profiler is handed to the ExecContext (state as an argument: there is no global one); when
the context has none, the executor's plain loop runs and nothing here costs anything.

For each thunk the profiled loop reads the clock three times: when the previous thunk (or the
sequence) ended, just before its kernel is called and just after.  What lies between the
first two -- gathering operand values, freeing dead ones, the loop itself -- is the thunk's
*dispatch* time; the kernel call is its *kernel* time.  A kernel that runs nested sequences
(while, call, conditional, an interpreted fusion) has the nested runs' wall time taken out of
its own kernel time (those thunks are profiled themselves), so that

    sum over thunks of (self kernel time + dispatch time) == the runs' wall time

up to float rounding: every moment of a run is counted once.  The tail of a sequence (after
its last thunk until `run` returns) is charged to the last thunk's dispatch.

With a `timeline` list the same clock readings are also kept one by one -- (start, end,
ThunkStats) for every kernel call, (start, end, None) for every entry run -- which
runtime/timeline.py turns into a Chrome trace (`xlaplug run --trace`).  A nested run's calls
lie inside the call of the kernel that ran it, so the slices nest as the runs do.  One
Profiler serves one device (its own ExecContext): a multi-device run has one per device.
`counting=False` keeps the timeline but leaves the totals alone (a run with one-time setup
that the profile leaves out but the trace shows).

A run during which numba compiled anything (a small fusion or region compiles on its ninth
call, jit_cache.HOT_CALLS; a while loop after its interpreted iterations) is left out of the
totals too, and counted in `compiled_runs`: one such run of a module with many regions took
1.5 s where the others took 25 ms, and made a compiling region look like most of every run.
"""
from __future__ import annotations

import contextlib
import functools
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class ThunkStats:
    computation: str
    index: int
    instruction: str
    opcode: str
    kind: str
    shape: str
    bytes_out: int                 # bytes the value holds (0 for aliases)
    bytes_in: int                  # bytes of the operands it reads
    calls: int = 0
    kernel_s: float = 0.0          # kernel time without nested sequences' runs
    dispatch_s: float = 0.0
    ins: Any = field(default=None, repr=False, compare=False)  # for the trace's slice args

    @property
    def total_s(self) -> float:
        return self.kernel_s + self.dispatch_s


@dataclass(eq=False)
class Profiler:
    """Collects ThunkStats across runs; `runs` counts entry-computation runs."""
    stats: dict[int, ThunkStats] = field(default_factory=dict)
    runs: int = 0
    wall_s: float = 0.0            # wall time of the entry runs, summed
    timeline: list | None = None   # a list: every call's (start, end, stats) kept too
    counting: bool = True          # False: this run adds to the timeline only
    compiled_runs: int = 0         # counted runs left out: numba compiled during them
    # Wall time of nested runs under the kernel now running, one accumulator per depth.
    _nested: list[float] = field(default_factory=lambda: [0.0])

    def entry(self, seq, thunk) -> ThunkStats:
        s = self.stats.get(id(thunk))
        if s is None:
            ins = thunk.ins
            out = thunk.nbytes if thunk.slot is not None else 0
            s = self.stats[id(thunk)] = ThunkStats(
                seq.computation.name, thunk.index, ins.name, ins.opcode, thunk.kind, str(ins.shape), out,
                sum(_byte_size(o.shape) for o in ins.operands), ins=ins)
        return s

    def run_sequence(self, ctx, seq, values: list) -> Any:
        """The executor's loop over `seq.thunks` with the clock read around each kernel."""
        clock = time.perf_counter
        start = prev = clock()
        nested = self._nested
        last = None
        timeline, counting = self.timeline, self.counting
        # CUDA kernels are launched asynchronously: wait for each, so the time is its own.
        sync = getattr(ctx.memory, "synchronize", None)
        for t in seq.thunks:
            ins = t.ins
            st = self.entry(seq, t)
            if ins.opcode != "parameter":
                fn = t.kernel
                if fn is None:
                    ctx._missing(ins)
                operands = [values[i] for i in t.inputs]
                nested.append(0.0)
                t0 = clock()
                try:
                    values[t.index] = fn(ins, operands, ctx)
                    if sync is not None:
                        sync()
                finally:
                    t1 = clock()
                    inner = nested.pop()
                if counting:
                    st.calls += 1
                    st.kernel_s += (t1 - t0) - inner
                    st.dispatch_s += t0 - prev
                if timeline is not None:
                    timeline.append((t0, t1, st))
            else:
                if counting:
                    st.calls += 1
                t1 = prev
            for d in t.frees:
                if d != seq.root:
                    values[d] = None
            prev = t1
            last = st
        end = clock()
        if last is not None and counting:
            last.dispatch_s += end - prev
        # This run is nested in the kernel that called it (or is an entry run: depth 0).
        nested[-1] += end - start
        if timeline is not None and len(nested) == 1:
            timeline.append((start, end, None))
        return values[seq.root]

    @contextlib.contextmanager
    def run(self):
        """One entry run: counted (its wall time is what depth 0 accumulated), unless numba
        compiled during it -- then every thunk's totals are put back as they were."""
        from numba.core import event
        kept = {k: (s.calls, s.kernel_s, s.dispatch_s) for k, s in self.stats.items()}
        compiles = _compile_counter()()
        try:
            with event.install_listener("numba:compile", compiles):
                yield
        finally:
            if self.counting and compiles.n:
                for k, st in self.stats.items():
                    st.calls, st.kernel_s, st.dispatch_s = kept.get(k, (0, 0.0, 0.0))
                self.compiled_runs += 1
            elif self.counting:
                self.runs += 1
                self.wall_s += self._nested[0]
            self._nested[0] = 0.0


@functools.cache
def _compile_counter():
    """A numba event listener class counting compiles (nested ones too: any is enough)."""
    from numba.core import event

    class CompileCounter(event.Listener):
        n = 0

        def on_start(self, ev):
            self.n += 1

        def on_end(self, ev):
            pass
    return CompileCounter


def _byte_size(shape) -> int:
    try:
        return 0 if shape.is_tuple or shape.is_token else shape.byte_size()
    except (AttributeError, ValueError):
        return 0
