"""mpi_frames.py reads an `xlaplug.mpi.*` call frame in a few ctypes loads: the `run` and
`index` attributes by name, the buffers as views of the very memory XLA hands over (kept
per address), the order token passed on.  The frames here are laid out as XLA's typed FFI
lays them out (abi.py's structures) over numpy arrays, so writes are checked in memory."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from xlaplug.xla.ffi import abi, decode, mpi_frames


class Frame:
    """A CallFrame over `operands` and `results` (numpy arrays) with scalar i64 and string
    attributes, everything it points to kept alive."""

    def __init__(self, operands, results, attrs: dict):
        self.keep = []
        self.frame = abi.CallFrame()
        self.frame.struct_size = ctypes.sizeof(abi.CallFrame)
        self.frame.stage = abi.STAGE_EXECUTE
        self.frame.args = self._args(operands)
        self.frame.rets = self._args(results)
        names, kinds, values = [], [], []
        for name, v in attrs.items():
            names.append(ctypes.pointer(self._span(name.encode())))
            if isinstance(v, str):
                kinds.append(abi.ATTR_STRING)
                values.append(ctypes.addressof(self._span(v.encode())))
            else:
                value = self._kept(ctypes.c_int64(v))
                scalar = self._kept(abi.Scalar(abi.DTYPE_CODES["s64"], ctypes.addressof(value)))
                kinds.append(abi.ATTR_SCALAR)
                values.append(ctypes.addressof(scalar))
        n = len(names)
        self.frame.attrs = abi.Attrs(
            ctypes.sizeof(abi.Attrs), None, n,
            ctypes.cast(self._kept((ctypes.c_int * n)(*kinds)), ctypes.POINTER(ctypes.c_int)),
            ctypes.cast(self._kept((ctypes.POINTER(abi.ByteSpan) * n)(*names)),
                        ctypes.POINTER(ctypes.POINTER(abi.ByteSpan))),
            ctypes.cast(self._kept((ctypes.c_void_p * n)(*values)),
                        ctypes.POINTER(ctypes.c_void_p)))
        self.addr = ctypes.addressof(self.frame)

    def _kept(self, obj):
        self.keep.append(obj)
        return obj

    def _span(self, raw: bytes) -> abi.ByteSpan:
        text = self._kept(ctypes.create_string_buffer(raw))
        return self._kept(abi.ByteSpan(ctypes.addressof(text), len(raw)))

    def _args(self, arrays) -> abi.Args:
        ptrs = []
        for a in arrays:
            dims = self._kept((ctypes.c_int64 * max(a.ndim, 1))(*a.shape))
            b = self._kept(abi.Buffer(ctypes.sizeof(abi.Buffer), None,
                                      abi.DTYPE_CODES[decode_name(a.dtype)], a.ctypes.data,
                                      a.ndim, ctypes.cast(dims, ctypes.POINTER(ctypes.c_int64))))
            ptrs.append(ctypes.addressof(b))
        n = len(ptrs)
        return abi.Args(ctypes.sizeof(abi.Args), None, n,
                        ctypes.cast(self._kept((ctypes.c_int * n)(*[1] * n)),
                                    ctypes.POINTER(ctypes.c_int)),
                        ctypes.cast(self._kept((ctypes.c_void_p * n)(*ptrs)),
                                    ctypes.POINTER(ctypes.c_void_p)))


def decode_name(dtype) -> str:
    return {np.dtype(np.float32): "f32", np.dtype(np.uint32): "u32"}[np.dtype(dtype)]


def _call(x, out, token_in, token_out, attrs):
    return Frame([x, token_in], [out, token_out], attrs)


@pytest.mark.parametrize("attrs", [{"index": 4, "op": "all-reduce", "run": 9},
                                   {"run": 9, "index": 4}, {"rank": 1, "index": 4, "run": 9}])
def test_keys_are_read_by_name_in_any_order(attrs):
    x, out = np.arange(6, dtype=np.float32).reshape(2, 3), np.zeros((2, 3), np.float32)
    f = _call(x, out, np.array(7, np.uint32), np.zeros((), np.uint32), attrs)
    assert mpi_frames.is_execute(f.addr) and not mpi_frames.has_extension(f.addr)
    assert mpi_frames.keys(f.addr) == (9, 4)


def test_a_frame_without_its_keys_is_refused():
    x = np.zeros(4, np.float32)
    f = _call(x, x.copy(), np.zeros((), np.uint32), np.zeros((), np.uint32),
              {"index": 0, "op": "all-reduce"})
    with pytest.raises(decode.DecodeError, match="without its 'run' and 'index'"):
        mpi_frames.keys(f.addr)


def test_views_are_the_buffers_memory_and_the_token_moves_on():
    x, out = np.arange(6, dtype=np.float32).reshape(2, 3), np.zeros((2, 3), np.float32)
    token_in, token_out = np.array(41, np.uint32), np.zeros((), np.uint32)
    f = _call(x, out, token_in, token_out, {"index": 0, "run": 1})
    site = mpi_frames.Site(f.addr)
    args, results, order_in, order_out = site.buffers(f.addr)
    assert [a.shape for a in args] == [(2, 3)] and [r.shape for r in results] == [(2, 3)]
    np.testing.assert_array_equal(args[0], x)
    results[0][...] = 5.0  # written where XLA reads its result
    np.testing.assert_array_equal(out, np.full((2, 3), 5.0, np.float32))
    mpi_frames.pass_order(order_in, order_out)
    assert int(token_out) == 42
    again = site.buffers(f.addr)  # the same address: the same view object
    assert again[1][0] is results[0]


def test_a_call_without_its_order_token_is_refused():
    x = np.zeros(4, np.float32)
    f = Frame([x, x.copy()], [x.copy(), x.copy()], {"index": 0, "run": 1})
    with pytest.raises(decode.DecodeError, match="u32\\[\\] order token"):
        mpi_frames.Site(f.addr)
