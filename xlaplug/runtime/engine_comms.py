"""The program XLA runs on its host devices for `--engine xla` (engine_devices.py, in this
process or in the worker process, engine_worker.py): the lowered module made into XLA's
text, its plugin kernels registered as FFI targets, and its communicator kernels (the
Horovod ops) and core-opcode overrides served on each of XLA's device threads, in that
device's interpreter context, by xlaplug's in-process communicator
(xla/devices_rewrite.py, xla/ffi/devices_handler.py).

A global program (shard_map as jax prints it) is cut by XLA's partitioner, which knows
nothing of xlaplug's calls: its communicator ops are decomposed when it is lowered.
"""
from __future__ import annotations

import copy
import time
import weakref

from ..hlo.errors import HloError

# How long a run's report waits for the failing device's own error when only a device it
# stopped has reported (Communicators.failure).
ROOT_WAIT_S = 5.0


class Communicators:
    """A program's communicator calls (and overridden instructions) and what serves them: the copy of the lowered module
    rewritten for XLA (`module`), the handler's binding of its calls, and each device's
    interpreter context (made once, kept with the program)."""

    def __init__(self, module, session, grid):
        from ..xla.devices_rewrite import devices_handler, rewrite_for_devices
        from ..xla.mpi_rewrite import twins
        from .executor import ExecContext
        self.grid = grid
        self.module = copy.deepcopy(module)
        twin = twins(self.module, module)
        handler = devices_handler()
        key, self.binding = handler.bind([], grid.partitions)
        weakref.finalize(self, handler.unbind, key)  # (the key is in the compiled text)
        served = rewrite_for_devices(self.module, session.registry, key)
        self.binding.instructions = [twin[id(ins)] for ins in served]
        self.contexts = [ExecContext("cpu", {}, overrides=session.resolve)
                         for _ in range(grid.count)]

    def begin(self, timeout: float) -> None:
        """A run's rendezvous and each device's place on it."""
        from ..backends.spmd.place import Place
        from ..backends.spmd.rendezvous import Rendezvous
        rendezvous = Rendezvous(self.grid.count, timeout)
        self.binding.failure, self.binding.rendezvous = None, rendezvous
        self.binding.contexts = [ctx.begin_run(spmd=Place(self.grid, d, rendezvous))
                                 for d, ctx in enumerate(self.contexts)]

    def end(self) -> None:
        for ctx in self.contexts:
            ctx.end_run()
        self.binding.rendezvous, self.binding.contexts = None, []

    def failure(self) -> BaseException | None:
        """The run's failure in a communicator call, as the interpreter's device threads
        report it (`device D: ...`), else None."""
        from ..backends.spmd.rendezvous import Aborted
        from .spmd.runner import DeviceError
        if self.binding.failure is None:
            return None
        device, error = self.binding.failure
        if isinstance(error, Aborted):
            # A device stopped by another's failure was recorded first: XLA can return the
            # stopped device's error before the failing device's thread has recorded its
            # own (twice in loaded suite runs, 2026-12-06: 'device 3: device 3: stopped
            # because device 1 failed').  The failing device's report is the run's.
            root = self._root_failure(Aborted)
            if root is None:
                return error  # (its message names its device already)
            device, error = root
        return DeviceError(device, error) if device is not None else error

    def _root_failure(self, aborted: type) -> tuple | None:
        """The first failure that is not an `aborted` one, from the binding or the
        rendezvous, waited for up to ROOT_WAIT_S (an Aborted says it exists); else None."""
        deadline = time.monotonic() + ROOT_WAIT_S
        while True:
            rendezvous = self.binding.rendezvous
            for got in (self.binding.failure,
                        rendezvous.failure if rendezvous is not None else None):
                if got is not None and not isinstance(got[1], aborted):
                    return got
            if time.monotonic() > deadline:
                return None
            time.sleep(0.005)


def xla_program(module, session, grid, whole: bool):
    """(HLO text for XLA, the FFI registrations, the Communicators or None) of a lowered
    module (engine.lowered: communicator kernels kept unless `whole`, a global program)."""
    from ..hlo.text.printer import module_to_text
    from ..xla.devices_rewrite import needs_handler
    from ..xla.engine import serve_plugin_ops
    comms = None
    if not whole and needs_handler(module, session.registry):
        comms = Communicators(module, session, grid)
    ours = comms.module if comms is not None else copy.deepcopy(module)
    served = serve_plugin_ops(ours, session.registry)
    return module_to_text(ours), served, comms


def communicator_ops(comms) -> list[str]:
    """The ops whose communicator kernels XLA's devices call (sorted, once each)."""
    from ..plugin.attrs import op_name
    return sorted({op_name(i) for i in comms.binding.instructions if op_name(i)}) \
        if comms else []


def override_ops(comms) -> list[str]:
    """The core opcodes whose plugin overrides XLA's devices call (sorted, once each)."""
    from ..plugin.attrs import op_name
    return sorted({i.opcode for i in comms.binding.instructions if not op_name(i)}) \
        if comms else []


def run_with(comms, timeout: float, run):
    """`run()` (XLA's execution) with the communicator calls' rendezvous set up around it;
    a failure in one of them is raised as that device's, not as XLA's rewording of it."""
    if comms is None:
        return run()
    comms.begin(timeout)
    try:
        return run()
    except HloError:
        failure = comms.failure()
        if failure is not None:  # (a device's error as the interpreter's run raises it)
            from .options import RunError
            raise (failure if isinstance(failure, HloError) else RunError(str(failure))) \
                from None
        raise
    finally:
        comms.end()
