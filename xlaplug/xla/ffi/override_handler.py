"""The handler of the `xlaplug.override` target (xla/override_rewrite.py): an instruction of
a core opcode that a plugin overrides, served inside XLA by the override kernel.

It is the interpreter's own call: the handler holds the original instruction (a program
binds them, as mpi_handler.py's programs do: `run` and `index` in the call's attributes)
and runs the kernel the interpreter's context resolves for it -- plugin/session.py's
`_override_kernel`, which hands the plugin kernel the operands, preallocated results and
the instruction's own attributes as the HLO parser read them (`to_apply` a Computation,
`dimensions` a list, ...), with `replaced` (the kernel it displaced, down to xlaplug's core
kernel) and `comm` where the kernel names them.  Those attributes are Python objects no FFI
attribute can carry: so the call's attributes are only its keys, and the kernel gets
exactly what it gets in the interpreter.  Operands are zero-copy views of XLA's buffers;
the kernel's results are copied into XLA's result buffers.

Calls of one program are serialized (`Binding.lock`): XLA:CPU may run independent
instructions on several threads at once, the interpreter runs one device's instructions one
at a time, and an override kernel (and the core kernels its `replaced` runs, which share
the context's caches) may count on that.  A failure is kept on the binding -- the run
raises the kernel's own one-line error, not XLA's rewording of it -- and handed to XLA as
an FFI error that ends the execution.
"""
from __future__ import annotations

import numpy as np

from . import abi, decode
from .bound_handler import flat, same
from .mpi_handler import MpiHandler


class OverrideHandler(MpiHandler):
    """`address` is the XLA_FFI_Handler registered for `xlaplug.override`; `bind` and
    `unbind` as MpiHandler's (a program's context and original instructions)."""
    prefix = "xlaplug.override"

    @staticmethod
    def run(frame: int, binding, index: int) -> None:
        site = binding.sites.get(index)
        if site is None:
            ins = binding.instructions[index]
            site = binding.sites[index] = (ins, binding.ctx.resolve(ins))
        ins, kernel = site
        f = abi.CallFrame.from_address(frame)
        args, _ = decode.buffers(f.args)
        results, _ = decode.buffers(f.rets)
        with binding.lock, np.errstate(all="ignore"):  # (as every run runs kernels)
            out = kernel(ins, args, binding.ctx)
        out = flat(out)
        if len(out) != len(results):
            raise RuntimeError(f"{ins.opcode} '{ins.name}': {len(out)} results for "
                               f"{len(results)} buffers (internal error)")
        for buf, value in zip(results, out):
            if not same(buf, value):
                buf[...] = value
