"""The handler of the `xlaplug.mpi.*` targets (xla/mpi_rewrite.py): a rank's collectives,
served inside XLA by xlaplug's MPI communicator.

It enters Python (a ctypes callback, as python_handler.py) and runs the interpreter's own
kernel for the instruction the call stands for -- the core collective's (backends/spmd/
kernels.py) or the plugin's communicator kernel -- in the run's context, whose `spmd`
place holds this rank's MpiTransport; operands are zero-copy views of XLA's buffers, and
the kernel's results are written into XLA's result buffers.

One handler object serves every run of the process (XLA's targets have no unregister): a
run binds its context and instructions (`bind`) and its calls name it in their `run`
attribute.  A failure in a call -- a collective timeout, ranks that disagree, a peer's
abort -- is kept on the run's binding (the run reports that exception, not XLA's
rewording of it) and handed to XLA as an FFI error, which ends the execution.
"""
from __future__ import annotations

import ctypes
import itertools
import threading
from dataclasses import dataclass, field

import numpy as np

from . import abi, decode
from .python_handler import answer_metadata, create_error


@dataclass
class Binding:
    """One run's state: the interpreter context of this rank's device (its `spmd` place
    holds the transport) and the original instructions, by the calls' `index`."""
    ctx: object
    instructions: list
    failure: BaseException | None = None
    kernels: dict = field(default_factory=dict)  # index -> the instruction's kernel


def _flat(value) -> list:
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in _flat(v)]
    return [value]


def _same(buf: np.ndarray, value) -> bool:
    """Whether `value` is `buf`'s memory already (a kernel that wrote into its results)."""
    return isinstance(value, np.ndarray) and value.shape == buf.shape and \
        value.dtype == buf.dtype and value.ctypes.data == buf.ctypes.data


class MpiHandler:
    """`address` is the XLA_FFI_Handler registered for every `xlaplug.mpi.*` target."""

    def __init__(self):
        self.runs: dict[int, Binding] = {}
        self.jax_world = None  # xlaplug.jax.op's calls under mpiexec (xla/jax_mpi.py)
        self._keys = itertools.count(1)
        self._lock = threading.Lock()
        self.callback = abi.HANDLER(self._call)  # kept alive as long as this object
        self.address = ctypes.cast(self.callback, ctypes.c_void_p).value

    def bind(self, ctx, instructions: list) -> tuple[int, Binding]:
        with self._lock:
            key = next(self._keys)
            binding = self.runs[key] = Binding(ctx, instructions)
        return key, binding

    def unbind(self, key: int) -> None:
        with self._lock:
            self.runs.pop(key, None)

    def _call(self, frame_addr: int) -> int | None:
        api, binding = None, None
        try:
            frame = abi.CallFrame.from_address(frame_addr)
            api = frame.api
            if frame.extension_start:
                return answer_metadata(frame)
            if frame.stage != abi.STAGE_EXECUTE:
                return None
            attrs = decode.attributes(frame.attrs)
            binding = self.runs.get(int(attrs["run"]))
            if binding is None:
                raise LookupError(f"run {int(attrs['run'])} is not bound (an executable "
                                  "called after its run ended)")
            self.run(frame, binding, int(attrs["index"]))
            return None
        except BaseException as e:  # noqa: BLE001 -- nothing may escape into XLA
            if binding is not None and binding.failure is None:
                binding.failure = e
            text = getattr(e, "message", None) or str(e) or type(e).__name__
            return create_error(api, f"xlaplug.mpi: {text}")

    @staticmethod
    def run(frame: abi.CallFrame, binding: Binding, index: int) -> None:
        ins = binding.instructions[index]
        operands, _ = decode.buffers(frame.args)
        results, _ = decode.buffers(frame.rets)
        *args, order = operands
        ctx = binding.ctx
        kernel = binding.kernels.get(index)
        if kernel is None:
            kernel = binding.kernels[index] = ctx.resolve(ins)
        ctx.destinations = results[:-1]  # (a large all-reduce lands there: no copy)
        try:
            with np.errstate(all="ignore"):
                out = _flat(kernel(ins, args, ctx))
        finally:
            ctx.destinations = None
        if len(out) != len(results) - 1:
            raise RuntimeError(f"{ins.opcode} '{ins.name}': {len(out)} results for "
                               f"{len(results) - 1} buffers (internal error)")
        for buf, value in zip(results, out):  # (the engine runs on the CPU: host arrays)
            if not _same(buf, value):
                buf[...] = value
        results[-1][...] = order + 1  # the next call in the chain waits for this one
