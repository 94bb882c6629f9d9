"""The handler of `xlaplug.devices.kernel` (xla/devices_rewrite.py): a communicator kernel
(the Horovod ops) called by XLA on each of its host devices, served by xlaplug's in-process
communicator -- the devices' calls meet at a Rendezvous, as the interpreter's device threads
do.

It enters Python (a ctypes callback, as mpi_handler.py) and reads the frame as mpi_frames.py
does: the call's `run` and `index`, views of XLA's buffers, and the device's replica-id and
partition-id (its last two operands before the order token), which pick the device's
interpreter context.  One handler object serves every program of the process; a program
binds its instructions and grid (`bind`), and each run sets the contexts -- each holding a
Place on the run's Rendezvous -- and clears the failure (runtime/engine_devices.py).  A
failure on one device is kept on the binding and aborts the rendezvous, so the devices
waiting for it end at once rather than at the timeout; XLA gets an FFI error and ends the
execution, and the run reports the kept failure.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from . import mpi_frames
from .bound_handler import BoundHandler, flat, same


@dataclass
class DevicesBinding:
    """One program: the original instructions by the calls' `index`, and the grid's
    partition count; per run, each device's context and the rendezvous they meet at."""
    instructions: list
    partitions: int
    contexts: list = field(default_factory=list)
    rendezvous: object = None
    failure: tuple | None = None  # (device, the exception) of the first real failure
    sites: dict = field(default_factory=dict)    # index -> mpi_frames.Site
    kernels: dict = field(default_factory=dict)  # (device, index) -> its kernel
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail(self, device, error: BaseException) -> None:
        from ...backends.spmd.rendezvous import Aborted
        with self.lock:  # a device's own failure, not the others' Aborted, is the report
            if self.failure is None or (isinstance(self.failure[1], Aborted)
                                        and not isinstance(error, Aborted)):
                self.failure = (device, error)
        if self.rendezvous is not None and device is not None:
            self.rendezvous.abort(device, error)


class DevicesHandler(BoundHandler):
    """`address` is the XLA_FFI_Handler registered for `xlaplug.devices.kernel`."""
    prefix = "xlaplug.devices"

    def bind(self, instructions: list, partitions: int) -> tuple[int, DevicesBinding]:
        return self._bind(DevicesBinding(instructions, partitions))

    @staticmethod
    def keep(binding, error: BaseException) -> None:
        binding.fail(None, error)  # (kept where no device's failure is)

    @staticmethod
    def run(frame: int, binding: DevicesBinding, index: int) -> None:
        """Call `index` on the device whose ids it was given: the kernel on views of XLA's
        operands, its results written into XLA's, the order token passed on."""
        site = binding.sites.get(index)
        if site is None:
            site = binding.sites.setdefault(index, mpi_frames.Site(frame))
        args, results, order_in, order_out = site.buffers(frame)
        *args, replica, partition = args
        device = int(replica) * binding.partitions + int(partition)
        try:
            ctx = binding.contexts[device]
            ins = binding.instructions[index]
            kernel = binding.kernels.get((device, index))
            if kernel is None:
                kernel = binding.kernels[(device, index)] = ctx.resolve(ins)
            # The operands are copied out of XLA's buffers: a device's value may be read by
            # the others after this device has left the collective (the last device
            # reduces: the rest go on), and XLA reuses a buffer once its call returns --
            # views read that way gave wrong sums in a while loop.
            with np.errstate(all="ignore"):
                out = flat(kernel(ins, [a.copy() for a in args], ctx))
            if len(out) != len(results):
                raise RuntimeError(f"{ins.opcode} '{ins.name}': {len(out)} results for "
                                   f"{len(results)} buffers (internal error)")
            for buf, value in zip(results, out):  # (XLA:CPU: host arrays)
                if value is not buf and not same(buf, value):
                    buf[...] = value
        except BaseException as e:
            binding.fail(device, e)  # the others stop waiting for this device
            raise
        mpi_frames.pass_order(order_in, order_out)
