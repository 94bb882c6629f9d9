"""The handler of the `xlaplug.mpi.*` targets (xla/mpi_rewrite.py): a rank's collectives,
served inside XLA by xlaplug's MPI communicator.

It enters Python (a ctypes callback, as python_handler.py) and runs the interpreter's own
kernel for the instruction the call stands for -- the core collective's (backends/spmd/
kernels.py) or the plugin's communicator kernel -- in the run's context, whose `spmd`
place holds this rank's MpiTransport; operands are zero-copy views of XLA's buffers (the
frame read by mpi_frames.py), and the kernel's results are written into XLA's result
buffers -- or land there: an all-reduce reduces straight into them (`ctx.destinations`).

One handler object serves every run of the process (XLA's targets have no unregister): a
compiled program binds its instructions (`bind`), its calls name the binding in their `run`
attribute, and each run sets the binding's context and clears its failure (runtime/
mpi_engine.MpiProgram: one binding as long as the program is kept -- its key is in the
compiled text).  A failure in a call -- a collective timeout, ranks that disagree, a peer's
abort -- is kept on the binding (the run reports that exception, not XLA's rewording of
it) and handed to XLA as an FFI error, which ends the execution.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from . import mpi_frames
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


# The kernels that may write their results straight into XLA's (ctx.destinations).
_LANDS = frozenset({"all-reduce", "all-reduce-start"})


class MpiHandler(BoundHandler):
    """`address` is the XLA_FFI_Handler registered for every `xlaplug.mpi.*` target."""
    prefix = "xlaplug.mpi"  # of the FFI errors it hands XLA

    def __init__(self):
        super().__init__()
        self.jax_world = None  # xlaplug.jax.op's calls under mpiexec (xla/jax_mpi.py)

    def bind(self, ctx, instructions: list) -> tuple[int, Binding]:
        return self._bind(Binding(ctx, instructions))

    @staticmethod
    def run(frame: int, binding: Binding, index: int) -> None:
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
            return
        out = flat(out)
        if len(out) != len(results):
            raise RuntimeError(f"{ins.opcode} '{ins.name}': {len(out)} results for "
                               f"{len(results)} buffers (internal error)")
        for buf, value in zip(results, out):  # (the engine runs on the CPU: host arrays)
            if value is not buf and not same(buf, value):
                buf[...] = value
        mpi_frames.pass_order(order_in, order_out)
