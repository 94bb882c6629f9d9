"""What the handlers of xlaplug's own targets share (`xlaplug.mpi.*`, `xlaplug.devices.kernel`,
`xlaplug.override`): one ctypes callback per process serves every program, because XLA's
targets have no unregister.  A compiled program binds its state (`_bind`) and its calls name
the binding in their `run` attribute and themselves by `index` (mpi_frames.keys); a failure
in a call is kept on the binding -- the run raises that exception, not XLA's rewording of it
-- and handed to XLA as an FFI error, which ends the execution.  Subclasses say how a call
runs (`run`), how a failure is kept (`keep`) and what their errors start with (`prefix`).
"""
from __future__ import annotations

import ctypes
import itertools
import threading

import numpy as np

from . import abi, mpi_frames
from .python_handler import answer_metadata, create_error


class BoundHandler:
    """`address` is the XLA_FFI_Handler to register for the subclass's targets."""
    prefix = "xlaplug"

    def __init__(self):
        self.runs: dict[int, object] = {}
        self._keys = itertools.count(1)
        self._lock = threading.Lock()
        self.callback = abi.HANDLER(self._call)  # kept alive as long as this object
        self.address = ctypes.cast(self.callback, ctypes.c_void_p).value

    def _bind(self, binding) -> tuple[int, object]:
        with self._lock:
            key = next(self._keys)
            self.runs[key] = binding
        return key, binding

    def unbind(self, key: int) -> None:
        with self._lock:
            self.runs.pop(key, None)

    def _call(self, frame_addr: int) -> int | None:
        binding = None
        try:
            if mpi_frames.has_extension(frame_addr):
                return answer_metadata(abi.CallFrame.from_address(frame_addr))
            if not mpi_frames.is_execute(frame_addr):
                return None
            run, index = mpi_frames.keys(frame_addr)
            binding = self.runs.get(run)
            if binding is None:
                raise LookupError(f"run {run} is not bound (an executable called after its "
                                  "program was dropped)")
            self.run(frame_addr, binding, index)
            return None
        except BaseException as e:  # noqa: BLE001 -- nothing may escape into XLA
            return self._failed(frame_addr, binding, e)

    def _failed(self, frame_addr: int, binding, e: BaseException) -> int:
        """A call's exception kept as the run's report and returned to XLA as its error."""
        if binding is not None:
            self.keep(binding, e)
        text = getattr(e, "message", None) or str(e) or type(e).__name__
        return create_error(abi.CallFrame.from_address(frame_addr).api, f"{self.prefix}: {text}")

    @staticmethod
    def keep(binding, error: BaseException) -> None:
        """The first failure is the run's report."""
        if binding.failure is None:
            binding.failure = error

    @staticmethod
    def run(frame: int, binding, index: int) -> None:
        raise NotImplementedError


def flat(value) -> list:
    """A kernel's results as a flat list (tuples unnested)."""
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in flat(v)]
    return [value]


def same(buf: np.ndarray, value) -> bool:
    """Whether `value` is `buf`'s memory already (a kernel that wrote into its results)."""
    return isinstance(value, np.ndarray) and value.shape == buf.shape and \
        value.dtype == buf.dtype and value.ctypes.data == buf.ctypes.data
