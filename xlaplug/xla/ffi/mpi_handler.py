"""The handler of the `xlaplug.mpi.*` targets (xla/mpi_rewrite.py): a rank's collectives,
served inside XLA by xlaplug's MPI communicator.

It enters Python (a ctypes callback, as python_handler.py) and runs the interpreter's own
kernel for the instruction the call stands for -- the core collective's (backends/spmd/
kernels.py) or the plugin's communicator kernel -- in the run's context, whose `spmd`
place holds this rank's MpiTransport; operands are zero-copy views of XLA's buffers (the
frame read by mpi_frames.py), and the kernel's results are written into XLA's result
buffers -- or land there: an all-reduce reduces straight into them (`ctx.destinations`).
A plain all-reduce's later calls do not come here: once a Python call has armed its site
(`_arm`), XLA's calls reach a compiled handler first (mpi_native.py), which serves them
with no Python and hands back only what it cannot finish (`_resume`).

One handler object serves every run of the process (XLA's targets have no unregister): a
compiled program binds its instructions (`bind`), its calls name the binding in their `run`
attribute, and each run sets the binding's context and clears its failure (runtime/
mpi_engine.MpiProgram: one binding as long as the program is kept -- its key is in the
compiled text).  A failure in a call -- a collective timeout, ranks that disagree, a peer's
abort -- is kept on the binding (the run reports that exception, not XLA's rewording of
it) and handed to XLA as an FFI error, which ends the execution.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field

import numpy as np

from . import mpi_frames, mpi_sites
from .bound_handler import BoundHandler, flat, same


@dataclass
class Binding:
    """One program's state: the interpreter context of this rank's device, set by each run
    (its `spmd` place holds the run's transport), and the original instructions, by the
    calls' `index`."""
    ctx: object
    instructions: list
    failure: BaseException | None = None
    # held while a kernel runs (ffi/override_handler.py: XLA may call independent
    # instructions from several threads; the interpreter runs one device's one at a time)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # index -> (instruction, its kernel, its mpi_frames.Site, whether it may land in
    # XLA's result buffers), made on its first call
    sites: dict = field(default_factory=dict)
    # the compiled handler's (mpi_sites.py): a record per call index (int64 slots), the
    # armed sites by index, the communicators' sequence cells by id
    records: np.ndarray | None = None
    armed: dict = field(default_factory=dict)
    cells: dict = field(default_factory=dict)
    key: int = 0  # its `run`


# The kernels that may write their results straight into XLA's (ctx.destinations).
_LANDS = frozenset({"all-reduce", "all-reduce-start"})


class MpiHandler(BoundHandler):
    """`address` is the XLA_FFI_Handler registered for every `xlaplug.mpi.*` target: with
    `compiled`, the cfunc of mpi_native.py (its plain all-reduces served with no Python;
    everything else, and any call it hands back, here), else the Python callback.  One
    compiled handler per process (its external symbols are the process's): the one
    mpi_rewrite.mpi_handler registers.  XLAPLUG_MPI_HANDLER=python keeps it Python (to
    time one against the other)."""
    prefix = "xlaplug.mpi"  # of the FFI errors it hands XLA

    def __init__(self, compiled: bool = False):
        import os
        super().__init__()
        self.jax_world = None  # xlaplug.jax.op's calls under mpiexec (xla/jax_mpi.py)
        self.python_address, self.cfunc, self.registry, self.sites = self.address, None, None, 0
        self.how = "Python handler"
        if compiled and os.environ.get("XLAPLUG_MPI_HANDLER", "") != "python":
            from ...backends.spmd.mpi import mpi_module
            self.resumer = mpi_sites.RESUME(self._resume)  # kept alive with this object
            try:
                self.cfunc = mpi_sites.compile_handler(
                    self.python_address, ctypes.cast(self.resumer, ctypes.c_void_p).value)
            except Exception as e:  # noqa: BLE001 -- numba could not: Python serves all
                self.how = f"Python handler (the compiled one failed: {e})"
                return
            self.registry = mpi_sites.new_registry(mpi_module())
            self.address, self.sites = self.cfunc.address, self.registry.ctypes.data
            self.how = "compiled handler (plain all-reduces), Python handler (the rest)"

    def bind(self, ctx, instructions: list) -> tuple[int, Binding]:
        key, binding = self._bind(Binding(ctx, instructions))
        binding.key = key
        return key, binding

    def unbind(self, key: int) -> None:
        if self.registry is not None:
            mpi_sites.leave(self.registry, key)
        super().unbind(key)

    def _resume(self, frame_addr: int, record: int, code: int) -> int | None:
        """A call the cfunc began and hands back (mpi_sites.resume finishes it); `record`,
        its record's address, is the binding's row for the call's `index`."""
        binding = None
        try:
            run, index = mpi_frames.keys(frame_addr)
            binding = self.runs[run]
            with mpi_sites.synced(binding):
                mpi_sites.resume(binding.armed[index], code)
            return None
        except BaseException as e:  # noqa: BLE001 -- nothing may escape into XLA
            return self._failed(frame_addr, binding, e)

    def run(self, frame: int, binding: Binding, index: int) -> None:
        with mpi_sites.synced(binding):
            self._run(frame, binding, index)

    def _run(self, frame: int, binding: Binding, index: int) -> None:
        """Call `index` of the run: its kernel on views of XLA's operands, its results in
        XLA's result buffers (a kernel that reduced into them already -- the all-reduce --
        leaves nothing to copy), then the order token passed on."""
        site = binding.sites.get(index)
        if site is None:
            ins = binding.instructions[index]
            site = binding.sites[index] = (ins, binding.ctx.resolve(ins),
                                           mpi_frames.Site(frame), ins.opcode in _LANDS)
        ins, kernel, buffers, lands = site
        args, results, order_in, order_out = buffers.buffers(frame)
        ctx = binding.ctx
        # (the all-reduce lands there: no copy; offered to it alone, never to a collective
        # that some other kernel might run inside its own)
        ctx.destinations = results if lands else None
        try:
            with np.errstate(all="ignore"):
                out = kernel(ins, args, ctx)
        finally:
            ctx.destinations = None
        if len(results) == 1 and out is results[0]:
            mpi_frames.pass_order(order_in, order_out)
            self._arm(binding, index, ins, args, results)
            return
        out = flat(out)
        if len(out) != len(results):
            raise RuntimeError(f"{ins.opcode} '{ins.name}': {len(out)} results for "
                               f"{len(results)} buffers (internal error)")
        for buf, value in zip(results, out):  # (the engine runs on the CPU: host arrays)
            if value is not buf and not same(buf, value):
                buf[...] = value
        mpi_frames.pass_order(order_in, order_out)
        self._arm(binding, index, ins, args, results)

    def _arm(self, binding: Binding, index: int, ins, args, results) -> None:
        """The compiled handler serves the site's next calls, where it can."""
        if self.registry is None or ins.opcode not in _LANDS:
            return
        site = binding.armed.get(index)
        if site is not None:  # (a call the cfunc left to Python: a big buffer seen now)
            site.seen(*(a.ctypes.data for a in (*args, *results)))
        elif mpi_sites.enrol(self.registry, binding.key, binding):
            mpi_sites.arm(binding, index, ins, binding.ctx, args, results)
