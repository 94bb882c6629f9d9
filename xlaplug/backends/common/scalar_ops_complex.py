"""The scalar op table's complex templates: each op is one call of its helper in
scalar_complex.py / scalar_complex_fn.py (XLA's formula, written once), its operands read
as denormals-are-zero parts and its result packed and flushed -- so fused loops, compiled
reducers, the CPU's array kernels and CUDA all compute it the same way."""
from __future__ import annotations

from .scalar_base import ScalarOpError

# op -> helper on the (re, im) parts of one operand
UNARY_FN = {"exponential": "_ycexp", "exponential-minus-one": "_ycexpm1", "log": "_yclog",
            "log-plus-one": "_yclog1p", "sqrt": "_ycsqrt", "rsqrt": "_ycrsqrt",
            "tanh": "_yctanh", "tan": "_yctan", "sign": "_ycsign"}
# op -> helper on the parts of two operands
BINARY_FN = {"add": "_ycadd", "subtract": "_ycsub", "multiply": "_ycmul", "divide": "_ycdiv",
             "power": "_ycpow"}


def _parts(t: str, k: int) -> str:
    is32 = t == "c64"
    return f"_yre({{{k}}}, {is32}), _yim({{{k}}}, {is32})"


def _pack(t: str, parts: str) -> str:
    return f"_ypack64({parts})" if t == "c64" else f"_ypack128({parts})"


def unary(op: str, t: str) -> str:
    """The template of unary `op` on complex type t (a complex result)."""
    is32 = t == "c64"
    if op in ("sine", "cosine"):
        return _pack(t, f"_ycsincos({_parts(t, 0)}, {is32}, {op == 'sine'})")
    if op not in UNARY_FN:
        raise ScalarOpError(f"{op} on {t} is not supported in compiled scalar code")
    return _pack(t, f"{UNARY_FN[op]}({_parts(t, 0)}, {is32})")


def binary(op: str, t: str) -> str:
    is32 = t == "c64"
    if op not in BINARY_FN:
        raise ScalarOpError(f"{op} on {t} is not supported in compiled scalar code")
    return _pack(t, f"{BINARY_FN[op]}({_parts(t, 0)}, {_parts(t, 1)}, {is32})")


def absolute(t: str) -> str:
    """|z| in the component type (flushed)."""
    is32 = t == "c64"
    comp = "np.float32" if is32 else "np.float64"
    return f"{comp}(_yfl(_ycabs({_parts(t, 0)}, {is32}), {is32}))"
