"""Narrow element types on CUDA: bf16, the f8/f4 formats and the sub-byte integers.

numba.cuda has no dtype for them, so a device array holds their *values* in a wider type
(launch.device_dtype: float32 for the floats, int8 / uint8 for s1-s4 / u1-u4).  Every value
a run holds stays *canonical* -- exactly a value of its element type -- by induction:

* inputs and constants are converted exactly when they are copied in (device.CudaMemory);
* elementwise kernels round after each op (the SCALAR_OPS templates the CPU shares) and
  data movement only copies;
* every other kernel producing a narrow result (dot, convolution, iota, reductions, rng,
  plugin kernels, ...) computes in the wide type -- as XLA upcasts bf16 dots and
  convolutions to f32 -- and `canonicalizing` rounds its result once afterwards (ties to
  even, the format's overflow rule) or wraps it to the integer's width.  Rounding a
  canonical value changes nothing, so kernels that already round pay one launch, no error.

bitcast-convert needs the formats' bit patterns: `to_bits` / `from_bits` convert between
values and patterns on the device (bf16 is the top half of a float32; the 8- and 4-bit
formats go through a 2^bits-entry table built from ml_dtypes).  A NaN keeps its sign but
not its payload through float32 (as ml_dtypes' own conversions): an f8 NaN pattern read by
bitcast-convert comes back as that format's canonical NaN; bf16 payloads survive.
"""
from __future__ import annotations


import numpy as np

from ...hlo import dtypes as D
from ...hlo.opcodes import ALIASING, CONTROL_FLOW, MOVES_ELEMENTS
from ..common.scalar_base import NARROW_FORMATS
from ..common.errors import ExecutionError
from .elementwise import OPCODES as ELEMENTWISE
from .launch import (NARROW_TYPES, cached_kernel, cuda_module, elementwise_launch, flat,
                     jit_source, stride_loop)
from .scalar_cuda import cuda_namespace

# Opcodes whose narrow results are canonical by construction (no rounding pass): the
# elementwise kernels (their templates round), and everything that only moves values.
EXACT_OPCODES = (frozenset(ELEMENTWISE) - {"reduce-precision"}) | ALIASING | MOVES_ELEMENTS \
    | (CONTROL_FLOW - {"fusion"}) | frozenset({"constant", "async-update", "async-done",
                                               "domain"})


def _kernel(key, src: str, name: str, ns: dict | None = None):
    """A kernel over the scalar helpers (and `ns`), compiled once per process per key."""
    return cached_kernel(("narrow",) + key, lambda: jit_source(
        src, name, {**cuda_namespace(), **(ns or {})}, filename=f"<xlaplug cuda narrow {key}>"))


# ---- rounding to the format ------------------------------------------------------------

def _round_source(t: str) -> str:
    if t in D.FLOAT_TYPES:
        if t not in NARROW_FORMATS:
            raise ExecutionError(f"{t} results of computing kernels are not supported on "
                                 "cuda (no rounding rule for the format)")
        m, e, mx, kind = NARROW_FORMATS[t]
        value = f"_xround(x[i], {m}, {e}, {mx!r}, {kind})"
    else:
        w = D.bit_width(t)
        value = (f"np.int8(_xws(np.int64(x[i]), {w}))" if D.is_signed(t) else
                 f"np.uint8(np.uint64(x[i]) & np.uint64({(1 << w) - 1}))")
    return f"def canon(x):\n    {stride_loop('x.shape[0]')}\n        x[i] = {value}\n"


def round_in_place(arr, t: str):
    """Round (floats) or wrap (integers) a device array to element type t's values."""
    k = _kernel(("round", t), _round_source(t), "canon")
    if arr.size:
        elementwise_launch(k, arr)
    return arr


def _narrow_leaves(shape, path=()) -> list:
    if shape.is_tuple:
        return [x for i, s in enumerate(shape.tuple_shapes)
                for x in _narrow_leaves(s, path + (i,))]
    return [(path, shape.element_type)] if shape.is_array and \
        shape.element_type in NARROW_TYPES else []


def canonicalizing(ins, fn):
    """fn, or fn followed by rounding its narrow results when its opcode may leave
    them wider than their type (see the module docstring)."""
    leaves = _narrow_leaves(ins.shape)
    if not leaves or ins.opcode in EXACT_OPCODES:
        return fn

    def run(ins, args, ctx):
        out = fn(ins, args, ctx)
        for path, t in leaves:
            leaf = out
            for i in path:
                leaf = leaf[i]
            round_in_place(leaf, t)
        return out
    run.__name__ = getattr(fn, "__name__", "kernel")
    run.__wrapped__ = fn
    return run


# ---- bit patterns (bitcast-convert) ------------------------------------------------------

def bits_dtype(t: str) -> np.dtype:
    """The unsigned dtype one bit pattern of narrow type t occupies on the device."""
    return np.dtype(np.uint16 if D.bit_width(t) == 16 else np.uint8)


def _table(t: str) -> tuple[np.ndarray, int]:
    """(float32 value of every bit pattern, as uint32 bits; the pattern NaN maps to)."""
    w = D.bit_width(t)
    dt = D.to_dtype(t)
    with np.errstate(all="ignore"):
        vals = np.arange(1 << w, dtype=np.uint8).view(dt).astype(np.float32)
        nan = np.array(np.nan, np.float32).astype(dt).view(np.uint8)
    return vals.view(np.uint32), int(nan.item())


_TO_BITS = {
    "bf16": "out[i] = np.uint16(np.uint32(_xbits32(x[i])) >> np.uint32(16))",
    "float": ("v = np.uint32(_xbits32(x[i]))\n"
              "        r = NAN\n"
              "        for k in range(TABLE.shape[0]):\n"
              "            if TABLE[k] == v:\n"
              "                r = k\n"
              "                break\n"
              "        out[i] = np.uint8(r)"),
    "int": "out[i] = np.uint8(np.uint64(np.int64(x[i])) & np.uint64(MASK))",
}
_FROM_BITS = {
    "bf16": "out[i] = _xfrom_bits32(np.int32(np.int64(np.uint32(x[i]) << np.uint32(16))))",
    "float": "out[i] = _xfrom_bits32(np.int32(np.int64(TABLE[np.int64(x[i]) & MASK])))",
    "int": "out[i] = np.int8(_xws(np.int64(x[i]) & np.int64(MASK), W))",
    "uint": "out[i] = np.uint8(np.uint64(x[i]) & np.uint64(MASK))",
}


def _form(t: str, from_bits: bool) -> str:
    if t == "bf16":
        return "bf16"
    if t in D.FLOAT_TYPES:
        return "float"
    return "uint" if from_bits and not D.is_signed(t) else "int"


def conversion_kernel(t: str, from_bits: bool):
    """conv(out, x): type t's values -> bit patterns, or (from_bits) back."""
    form = _form(t, from_bits)
    body = (_FROM_BITS if from_bits else _TO_BITS)[form]
    w = D.bit_width(t)
    ns = {"MASK": (1 << w) - 1, "W": w}
    if form == "float":
        ns["TABLE"], ns["NAN"] = _table(t)
    src = f"def conv(out, x):\n    {stride_loop('out.shape[0]')}\n        {body}\n"
    return _kernel(("from" if from_bits else "to", t), src, "conv", ns)


def _convert(t: str, x, out, from_bits: bool):
    return elementwise_launch(conversion_kernel(t, from_bits), out, x)


def to_bits(x, t: str):
    """Device array of type t's values -> a new flat array of its bit patterns."""
    out = cuda_module().device_array(int(x.size), bits_dtype(t))
    return _convert(t, flat(x), out, from_bits=False)


def from_bits(bits, t: str, dims: tuple):
    """Flat device array of type t's bit patterns -> a new array of its values."""
    from .launch import device_dtype
    out = cuda_module().device_array(tuple(dims), device_dtype(t))
    _convert(t, flat(bits), flat(out), from_bits=True)
    return out


__all__ = ["EXACT_OPCODES", "bits_dtype", "canonicalizing", "conversion_kernel", "from_bits",
           "round_in_place", "to_bits"]
