"""XLA:CPU's arrays without jax: arguments placed on the client's devices and an execution's
outputs read back as numpy views, through jaxlib's own array type (its names from
jaxlib_names.jaxlib_jax) -- what jax's device_put, make_array_from_single_device_arrays and
np.asarray do, for a process that runs XLA:CPU on jaxlib's own client (one that has not
imported jax: xla/cpu_client.py).

jaxlib's arrays call back into jax (they import jax.core) for a single-device array's numpy
value and to split a many-device result into its devices' arrays.  So the outputs are read
through DLPack instead, one device's buffer at a time (`reorder_shards` puts device d's
first): a read-only view of XLA's buffer, no copy, as np.asarray gives under jax.  DLPack
has no sub-byte types: an s4 / u4 / ... output is read as jax reads it, jax imported for it.
"""
from __future__ import annotations

import ctypes
import functools
import math
import time
from functools import partial

import numpy as np

from ..hlo.errors import HloError
from . import jaxlib_names
from .jaxlib_names import XlaError, xla_message


class _Aval:
    """What jaxlib's arrays keep of jax's ShapedArray: shape, dtype, weak_type."""
    __slots__ = ("shape", "dtype", "weak_type")

    def __init__(self, shape, dtype):
        self.shape, self.dtype, self.weak_type = tuple(shape), np.dtype(dtype), False


# An output's aval is not read: its buffer's own shape and type come through DLPack.
_ANY = _Aval((), np.uint8)


@functools.cache  # one pair of classes per process (jaxlib's modules are the arguments)
def _shardings(J, xc):
    """(one-device, many-device) sharding types: jaxlib's C++ shardings with the Python
    attributes jaxlib's device_put asks of them (jax adds the same to these classes)."""
    replicated = xc.HloSharding.replicate()

    class One(J.SingleDeviceSharding):
        memory_kind = property(lambda self: self._memory_kind)

        def _to_xla_hlo_sharding(self, ndim):
            return replicated

    class Many(J.GSPMDSharding):
        memory_kind = property(lambda self: self._memory_kind)

        def _to_xla_hlo_sharding(self, ndim):
            return self._hlo_sharding

    return One, Many


def _names(what: str):
    J, xc = jaxlib_names.jaxlib_jax(what), jaxlib_names.xla_client(what)
    return J, xc, *_shardings(J, xc)


def place(per_device, devs, what: str) -> list:
    """Each argument on its devices, waited for: on one device the array itself; on many,
    each device's own value as one "replicated" array (its shards are not compared)."""
    J, xc, One, Many = _names(what)
    args = []
    for k in range(len(per_device[0]) if per_device else 0):
        vals = [np.asarray(per_device[d][k]) for d in range(len(devs))]
        bufs = [_put(J, One, v, dv) for v, dv in zip(vals, devs)]
        args.append(bufs[0] if len(devs) == 1 else J.ArrayImpl(
            _Aval(vals[0].shape, vals[0].dtype), Many(tuple(devs), xc.HloSharding.replicate()),
            bufs, True, True))
    for a in args:
        a.block_until_ready()
    return args


def place_shards(shards, padded, hs, devs, what: str):
    """A global value of shape `padded` from each device's shard under HloSharding `hs`."""
    J, xc, One, Many = _names(what)
    bufs = [_put(J, One, s, dv) for s, dv in zip(shards, devs)]
    return J.ArrayImpl(_Aval(padded, shards[0].dtype), Many(tuple(devs), hs), bufs, True, True)


def _put(J, One, value: np.ndarray, device):
    # f64 / s64 stay 64-bit (what jax.enable_x64(True) does for jax's device_put)
    return J.batched_device_put(_Aval(value.shape, value.dtype), One(device), [value],
                                [device], True, enable_x64=True)


@functools.lru_cache(maxsize=64)  # per device set (devices are the client's, process-wide)
def _reading(devs: tuple):
    """(the result handler of an output on `devs`, for each device d a sharding that lists
    d first): made once per device set, not at every run."""
    J, xc, One, Many = _names("XLA:CPU")
    replicated = xc.HloSharding.replicate()
    whole = Many(devs, replicated) if len(devs) > 1 else One(devs[0])
    return (J.array_result_handler(_ANY, whole, True, True),
            [Many(devs[d:] + devs[:d], replicated) for d in range(len(devs))])


def outputs(results, n: int, devs, what: str) -> list[list[np.ndarray]]:
    """[device][leaf] of one execution's results (jaxlib's ExecuteResults) as numpy views,
    each waited for; a failed output's error is raised once every device's outputs are done
    (xla_executables._every_output says why)."""
    J = jaxlib_names.jaxlib_jax(what)
    handler, orders = _reading(tuple(devs))
    leaves = results.consume_with_handlers([handler] * len(results))
    out, first = [[] for _ in range(n)], None
    for d in range(n):
        for leaf in leaves:
            try:
                mine = leaf if d == 0 else J.reorder_shards(
                    leaf, orders[d], J.ArrayCopySemantics.REUSE_INPUT)
                out[d].append(_read(J, mine))
            except Exception as e:  # noqa: BLE001 - XLA's error, raised below
                first = first or e
    if first is not None:
        raise first
    return out


def run_own(exe, devs, per_device, platform, repeat, times, runs):
    """run_compiled on jaxlib's own client: the same runs, arrays without jax."""
    what = f"XLA:{platform.upper()}"
    try:
        args = place(per_device, devs, what)
        for _ in range(repeat):
            t0 = time.perf_counter()
            out = outputs(exe.execute_sharded(args), len(devs), devs, what)
            if times is not None:
                times.append(time.perf_counter() - t0)
            if runs is not None:
                runs.append(out)
    except HloError:
        raise
    except Exception as e:
        raise XlaError(f"{what} failed running the module: {xla_message(e)}") from None
    return out


def run_global_own(compiled, args, shapes, platform, what, repeat, times):
    """run_global_compiled on jaxlib's own client (this module's arrays, and the
    blocks of each device from global_shards.numpy_indices, jax's indices without jax)."""
    from .global_shards import assemble, cut, numpy_indices
    xc = jaxlib_names.xla_client(what)
    indices = partial(numpy_indices, xc=xc)
    exe, devs = compiled
    label = f"XLA:{platform.upper()}"
    try:
        arrays = []
        for x, op in zip(args, exe.get_parameter_shardings()):
            hs = xc.HloSharding.from_proto(op)
            padded, shards = cut(np.asarray(x), hs, len(devs), indices)
            arrays.append(place_shards(shards, padded, hs, devs, what))
        for a in arrays:
            a.block_until_ready()
        for _ in range(repeat):
            t0 = time.perf_counter()
            per = outputs(exe.execute_sharded(arrays), len(devs), devs, what)
            if times is not None:
                times.append(time.perf_counter() - t0)
        outs = exe.get_output_shardings()
    except HloError:
        raise
    except Exception as e:
        raise XlaError(f"{label} failed running the module: {xla_message(e)}") from None
    shards = [[per[d][j] for d in range(len(devs))] for j in range(len(per[0]))]
    return [assemble(leaf, xc.HloSharding.from_proto(op), indices, shape)
            for leaf, op, shape in zip(shards, outs, shapes)]


class _Exported:
    """A DLPack capsule as np.from_dlpack takes it (an object with __dlpack__)."""
    __slots__ = ("capsule",)

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **_):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU


def _read(J, array) -> np.ndarray:
    """A one-device array's read-only numpy view: numpy's own DLPack import (1 us), else,
    for the types numpy's DLPack lacks (bf16, f8), host_view's (5 us); a type DLPack has no
    code for (s4, u4, s2, u2, f4e2m1fn) as jax reads it (jax imported for it)."""
    try:
        capsule = J.buffer_to_dlpack_managed_tensor(array)  # (waits; XLA's error raises here)
    except Exception as e:  # noqa: BLE001 - jaxlib's own error types
        if "no DLPack equivalent" not in str(e):
            raise
        import jax  # noqa: F401 - jaxlib's arrays take their numpy value from jax's code
        out = np.asarray(array)
        out.flags.writeable = False
        return out
    try:
        out = np.from_dlpack(_Exported(capsule))
    except (BufferError, TypeError, RuntimeError):  # numpy's "Unsupported dtype"
        return host_view(J.buffer_to_dlpack_managed_tensor(array))
    out.flags.writeable = False
    return out


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_CAPSULE_POINTER = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
# DLPack's type codes past int / uint / float (dlpack.h): ml_dtypes' names
_DL_ML = {4: "bfloat16", 7: "float8_e3m4", 8: "float8_e4m3", 9: "float8_e4m3b11fnuz",
          10: "float8_e4m3fn", 11: "float8_e4m3fnuz", 12: "float8_e5m2", 13: "float8_e5m2fnuz",
          14: "float8_e8m0fnu"}


def _dl_dtype(code: int, bits: int) -> np.dtype:
    if code in (0, 1, 2, 5):
        return np.dtype(f"{('int', 'uint', 'float', '', '', 'complex')[code]}{bits}")
    if code == 6:
        return np.dtype(np.bool_)
    if code in _DL_ML:
        import ml_dtypes
        return np.dtype(getattr(ml_dtypes, _DL_ML[code]))
    raise XlaError(f"XLA:CPU output of DLPack type code {code} ({bits} bits) "
                                "has no numpy type")


class _Held:
    """The bytes of a DLPack tensor as numpy sees them; holds the capsule (and so XLA's
    buffer) as long as any view of it lives."""

    def __init__(self, capsule, address: int, nbytes: int):
        self.capsule = capsule
        self.__array_interface__ = {"data": (address, True), "shape": (nbytes,),
                                    "typestr": "|u1", "version": 3}


def _row_major(shape: tuple) -> tuple:
    """A C-contiguous array's strides, in elements (DLPack's unit)."""
    strides, step = [], 1
    for s in reversed(shape):
        strides.append(step)
        step *= s
    return tuple(reversed(strides))


def host_view(capsule) -> np.ndarray:
    """A read-only numpy view of the host buffer a DLPack capsule ("dltensor") holds."""
    t = _DLTensor.from_address(_CAPSULE_POINTER(capsule, b"dltensor"))
    dtype = _dl_dtype(t.code, t.bits * t.lanes)
    shape = tuple(t.shape[i] for i in range(t.ndim))
    size = math.prod(shape)
    if size == 0:
        out = np.empty(shape, dtype)
    else:
        strides = (tuple(t.strides[i] for i in range(t.ndim)) if t.strides else None)
        if strides == _row_major(shape):
            strides = None  # the usual layout: a reshape, not as_strided
        extent = (1 + sum((s - 1) * st for s, st in zip(shape, strides)) if strides
                  else size)
        raw = np.asarray(_Held(capsule, t.data + t.byte_offset, extent * dtype.itemsize))
        raw = raw.view(dtype)
        out = (raw.reshape(shape) if strides is None else np.lib.stride_tricks.as_strided(
            raw, shape, [st * dtype.itemsize for st in strides], writeable=False))
    out.flags.writeable = False
    return out
