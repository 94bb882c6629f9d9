"""The call frame of an `xlaplug.mpi.*` call read in a few ctypes steps (mpi_handler.py's
hot path).

decode.py reads any frame into Python objects: a ctypes Structure per struct, every
attribute decoded by type, a fresh numpy view per buffer.  On a 2-core machine that took
~30 us of a 1 MiB all-reduce's ~200 (attributes 14, buffers 13).  An `xlaplug.mpi.*` call
site has static shapes and the attributes mpi_rewrite.py wrote (`run`, `index` as i64
scalars, found by name on every call: nothing about the frame's memory is cached), so a
call reads its two keys and one data pointer per buffer (`ctypes.c_int64.from_address`,
~0.1 us each), and a buffer's view is made once per address it is seen at (a `Site`
keeps them: XLA hands the same few buffers back call after call).

`Site.views` is safe across calls: a view is only a (pointer, dtype, shape) over the bytes
XLA says hold that buffer *in this call*; it owns nothing and is used only while the call
lasts.
"""
from __future__ import annotations

import ctypes

import numpy as np

from . import abi, decode, huge_pages

_I64 = ctypes.c_int64.from_address
_I32 = ctypes.c_int32.from_address
_U32 = ctypes.c_uint32.from_address
_S64 = abi.DTYPE_CODES["s64"]
_KEYS = {b"run": 0, b"index": 1}
_VIEWS_KEPT = 64  # addresses remembered per site before its views start afresh


def is_execute(frame: int) -> bool:
    """Not the registration-time query (it has an extension) and the execute stage."""
    return _I32(frame + abi.FRAME_STAGE).value == abi.STAGE_EXECUTE


def has_extension(frame: int) -> bool:
    return bool(_I64(frame + abi.FRAME_EXTENSION).value)


def keys(frame: int) -> tuple[int, int]:
    """(run, index): the call's `run` and `index` attributes, found by name."""
    n = _I64(frame + abi.FRAME_ATTRS_SIZE).value
    names = _I64(frame + abi.FRAME_ATTRS_NAMES).value
    values = _I64(frame + abi.FRAME_ATTRS).value
    found = [None, None]
    for i in range(n):
        span = _I64(names + 8 * i).value
        size = _I64(span + abi.SPAN_LEN).value
        if size != 3 and size != 5:  # neither "run" nor "index": not read
            continue
        slot = _KEYS.get(ctypes.string_at(_I64(span + abi.SPAN_PTR).value, size))
        if slot is None:
            continue
        scalar = _I64(values + 8 * i).value
        if _I32(scalar + abi.SCALAR_DTYPE).value != _S64:
            raise decode.DecodeError("attributes 'run' and 'index' must be i64 scalars")
        found[slot] = _I64(_I64(scalar + abi.SCALAR_VALUE).value).value
    if found[0] is None or found[1] is None:
        raise decode.DecodeError("an xlaplug.mpi call without its 'run' and 'index' "
                                 "attributes")
    return found[0], found[1]


class Site:
    """One call site's buffers: their dtypes and shapes (read in full on its first call),
    and views by address.  The last operand and the last result are the order token
    (u32[]), read and written in place, not viewed."""

    def __init__(self, frame: int):
        f = abi.CallFrame.from_address(frame)
        operands, _ = decode.buffers(f.args)
        results, _ = decode.buffers(f.rets)
        for what, token in (("operand", operands[-1:]), ("result", results[-1:])):
            if not token or token[0].dtype != np.uint32 or token[0].shape != ():
                raise decode.DecodeError(f"an xlaplug.mpi call's last {what} must be its "
                                         "u32[] order token")
        self.args = [(a.dtype, a.shape) for a in operands[:-1]]
        self.rets = [(r.dtype, r.shape) for r in results[:-1]]
        self.views: dict[tuple, np.ndarray] = {}

    def _view(self, slot, addr: int, dtype, shape) -> np.ndarray:
        v = self.views.get((slot, addr))
        if v is None:
            if len(self.views) >= _VIEWS_KEPT:
                self.views.clear()
            v = self.views[(slot, addr)] = decode.view(addr, dtype, shape)
            huge_pages.advise(addr, v.nbytes)  # (numpy's big arrays have them: mpi4py's)
        return v

    def buffers(self, frame: int) -> tuple[list, list, int, int]:
        """(operand views, result views, the token operand's address, the token result's)."""
        nargs, nrets = len(self.args) + 1, len(self.rets) + 1
        if _I64(frame + abi.FRAME_ARGS_SIZE).value != nargs or \
                _I64(frame + abi.FRAME_RETS_SIZE).value != nrets:
            raise decode.DecodeError("the call's buffers changed between calls")
        args_at = _I64(frame + abi.FRAME_ARGS).value
        rets_at = _I64(frame + abi.FRAME_RETS).value
        data = abi.BUFFER_DATA
        args = [self._view(k, _I64(_I64(args_at + 8 * k).value + data).value, dt, shape)
                for k, (dt, shape) in enumerate(self.args)]
        rets = [self._view(-1 - k, _I64(_I64(rets_at + 8 * k).value + data).value, dt, shape)
                for k, (dt, shape) in enumerate(self.rets)]
        order_in = _I64(_I64(args_at + 8 * (nargs - 1)).value + data).value
        order_out = _I64(_I64(rets_at + 8 * (nrets - 1)).value + data).value
        return args, rets, order_in, order_out


def pass_order(order_in: int, order_out: int) -> None:
    """The next call in the chain waits for this one: its token is this one's plus one."""
    _U32(order_out).value = (_U32(order_in).value + 1) & 0xFFFFFFFF
