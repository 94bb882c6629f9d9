"""The handler that enters Python: an XLA_FFI_Handler made from a ctypes callback.

XLA calls it (from any of its threads; ctypes takes the GIL) with a call frame; it hands the
plugin kernel zero-copy numpy views of the operand and result buffers and the attributes as
typed keyword arguments -- the call the interpreter makes (plugin/session.py `_run_kernel`):
`kernel(*operands, *results, **attributes)`, plus `element_types` when the kernel names it,
and a returned value written into the results.

Nothing may escape the callback: ctypes would print the exception and hand XLA a NULL
error, a silent wrong value.  Every failure becomes an XLA_FFI_Error naming the plugin, the
op and the message, which jax raises; the next call starts afresh.
"""
from __future__ import annotations

import ctypes
import inspect

import numpy as np

from ...hlo.errors import HloError
from . import abi, decode


def create_error(api: int | None, message: str, code: int = abi.ERROR_INTERNAL) -> int | None:
    """An XLA_FFI_Error* made by XLA's own XLA_FFI_Error_Create (it copies the message)."""
    if not api:
        return None  # the metadata query of an XLA that passes no Api: nothing to answer with
    create = abi.ErrorCreate(ctypes.c_void_p.from_address(api + abi.API_ERROR_CREATE).value)
    args = abi.ErrorCreateArgs(abi.ERROR_ARGS_SIZE, None, message.encode("utf-8", "replace"),
                               code)
    return create(ctypes.byref(args))


def answer_metadata(frame: abi.CallFrame) -> int | None:
    """The registration-time query: our API version (and no traits), after checking XLA's."""
    if frame.api:
        major = ctypes.c_int.from_address(frame.api + abi.API_MAJOR_AT).value
        minor = ctypes.c_int.from_address(frame.api + abi.API_MINOR_AT).value
        try:
            abi.check_version((major, minor), "the running XLA")
        except abi.FfiError as e:
            return create_error(frame.api, e.message, abi.ERROR_UNIMPLEMENTED)
    ext = frame.extension_start
    if ext and ctypes.c_int.from_address(ext + 8).value == abi.EXTENSION_METADATA:
        meta = ctypes.c_void_p.from_address(ext + abi.METADATA_EXT_METADATA).value
        ctypes.c_int.from_address(meta + abi.METADATA_MAJOR).value = abi.API_MAJOR
        ctypes.c_int.from_address(meta + abi.METADATA_MINOR).value = abi.API_MINOR_REPORTED
        ctypes.c_uint32.from_address(meta + abi.METADATA_TRAITS).value = 0
    return None


class PythonHandler:
    """The Python handler of one plugin op; `address` is the XLA_FFI_Handler to register."""

    def __init__(self, op: str, entry):
        self.op, self.entry = op, entry
        self.what = f"plugin '{entry.plugin.name}' kernel for '{op}'"
        try:
            params = inspect.signature(entry.fn).parameters
        except (TypeError, ValueError):
            params = {}
        self.wants_types = "element_types" in params
        # A numba kernel's defaults, given explicitly: a dispatcher with explicit
        # signatures types an omitted argument as `omitted(...)`, which none of them takes.
        from numba.core.registry import CPUDispatcher
        self.defaults = {} if not isinstance(entry.fn, CPUDispatcher) else {
            p.name: p.default for p in params.values() if p.default is not p.empty}
        self.callback = abi.HANDLER(self._call)  # kept alive as long as this object
        self.address = ctypes.cast(self.callback, ctypes.c_void_p).value

    def _call(self, frame_addr: int) -> int | None:
        api = None
        try:
            frame = abi.CallFrame.from_address(frame_addr)
            api = frame.api
            if frame.extension_start:
                return answer_metadata(frame)
            if frame.stage != abi.STAGE_EXECUTE:
                return None  # no instantiate/prepare/initialize work
            self.run(frame)
            return None
        except BaseException as e:  # noqa: BLE001 -- see the module docstring
            return create_error(api, self.describe(e))

    def run(self, frame: abi.CallFrame) -> None:
        operands, in_types = decode.buffers(frame.args)
        results, out_types = decode.buffers(frame.rets)
        kwargs = {**self.defaults, **decode.attributes(frame.attrs)}
        if self.wants_types:
            kwargs["element_types"] = tuple(in_types + out_types)
        ret = self.entry.fn(*operands, *results, **kwargs)
        if ret is not None:  # a kernel may return its results instead of writing them
            self._store(ret, results)

    def _store(self, ret, results: list[np.ndarray]) -> None:
        outs = list(ret) if isinstance(ret, tuple) else [ret]
        if len(outs) != len(results):
            raise HloError(f"returned {len(outs)} outputs, the call has {len(results)} results")
        for k, (got, buf) in enumerate(zip(outs, results)):
            got = np.asarray(got)
            if got.shape != buf.shape:
                raise HloError(f"returned output {k} as {got.dtype}{list(got.shape)}, the "
                               f"result buffer is {buf.dtype}{list(buf.shape)}")
            buf[...] = got

    def describe(self, e: BaseException) -> str:
        if isinstance(e, decode.DecodeError):
            return f"{self.what}: {e}"
        if isinstance(e, HloError):
            return f"{self.what}: {e.message}"
        return f"{self.what} raised {type(e).__name__}: {e}"
