"""Complex elementwise kernels: one numba loop per (op, type), each element computed by the
scalar op table's template -- XLA's formula as the helpers of common/scalar_complex{,_fn}.py
write it, the very code fused loops, compiled reducers and CUDA run, so a complex op gives
the same bits on every path.

A loop is a module cached on disk like a fused loop's (jit_cache.py), so a later process
loads its machine code instead of compiling it.
"""
from __future__ import annotations

import threading

import numpy as np

from ...hlo import dtypes as D
from ..common.scalar_ops import SCALAR_OPS, ScalarSig
from .jit_cache import cached_function

UNARY = frozenset({"exponential", "exponential-minus-one", "log", "log-plus-one", "sqrt",
                   "rsqrt", "sine", "cosine", "tanh", "tan", "sign", "abs"})
BINARY = frozenset({"add", "subtract", "multiply", "divide", "power"})

_LOCK = threading.Lock()
_LOOPS: dict[tuple, object] = {}


def _loop(op: str, result: str, operands: tuple[str, ...]):
    key = (op, result, operands)
    with _LOCK:
        fn = _LOOPS.get(key)
    if fn is None:
        xs = [f"x{k}" for k in range(len(operands))]
        expr = SCALAR_OPS[op](ScalarSig(result, operands)).format(*xs)
        args = "".join(f", a{k}" for k in range(len(operands)))
        reads = "".join(f"        x{k} = a{k}[i]\n" for k in range(len(operands)))
        src = (f"def loop(out{args}):\n    for i in range(out.shape[0]):\n{reads}"
               f"        out[i] = {expr}\n")
        fn = cached_function(src, {}, "loop", nogil=True, error_model="numpy")
        with _LOCK:
            fn = _LOOPS.setdefault(key, fn)
    return fn


def apply(op: str, ins, args) -> np.ndarray:
    """`op` on complex operands (same shape) with the result type of `ins`."""
    result = ins.shape.element_type
    operands = tuple(o.shape.element_type for o in ins.operands)
    flat = [np.ascontiguousarray(a).reshape(-1) for a in args]
    out = np.empty(flat[0].size, D.to_dtype(result))
    with np.errstate(all="ignore"):
        _loop(op, result, operands)(out, *flat)
    return out.reshape(np.shape(args[0]))
