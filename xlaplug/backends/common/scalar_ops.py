"""SCALAR_OPS: per-opcode scalar implementations for code generators (scalar_jit, fusion).

Contract
--------
``SCALAR_OPS[opcode](sig) -> str`` where ``sig`` is a :class:`ScalarSig` (``result``: the
result's XLA element type, ``operands``: the operands' element types, ``attrs``: the
instruction's attribute dict).  The returned string is a Python expression template in which
``{0}``, ``{1}``, ... stand for the operand values.  Substitute plain names or constants only:
a placeholder may occur several times.

* Every value -- operands and the expression's result -- is a scalar of its element type's
  *compute type* (``SCALAR_COMPUTE_DTYPES``): f16, bf16, f8* and f4e2m1fn travel as float32
  holding a value exactly representable in the element type; s1/s2/s4 as int8 and u1/u2/u4
  as uint8 holding an in-range value; pred as bool; every other type as itself.  These are
  the travel types of jit_drivers.numba_dtype.
* The expression has the array kernels' semantics exactly (elementwise*.py): XLA's integer
  divide/remainder/power/shift rules, saturating float->int converts, flush-to-zero of
  subnormal f32/f64/bf16 operands and results, rounding back to the narrow type after each
  op.  Transcendentals agree with the array kernels to ~1 ULP, not always bit for bit.
* Names the expression uses live in ``SCALAR_NAMESPACE`` (``np``, ``math`` and the ``_x...``
  / ``_y...`` helpers of ``SCALAR_HELPER_MODULES``: scalar_int.py, scalar_float_*.py,
  scalar_complex*.py, scalar_libm.py).  The helpers are numba ``register_jitable``
  functions: the same generated source compiles under ``@njit(error_model="numpy")`` and
  also runs as plain Python on numpy scalars (integer wrap-around then raises numpy
  RuntimeWarnings -- run it under ``np.errstate(all="ignore")``; numpy's transcendentals may
  differ from numba's in the last place).
* ``emit`` raises :class:`ScalarOpError` (a ValueError naming the op and types) for any
  op/type combination it does not implement (e.g. f8e8m0fnu, size-changing bitcasts,
  complex min/max), so callers can fall back to the interpreter.
* One XLA:CPU behaviour spans instructions and is the generator's job: a multiply whose only
  user is an add/subtract is contracted into one FMA (``_xfma32`` / ``_xfma64``; see
  scalar_jit.py).

Example::

    emit = SCALAR_OPS["divide"](ScalarSig("s32", ("s32", "s32")))
    expr = emit.format("a", "b")   # np.int32(_xsdiv(np.int64(a), np.int64(b), ...))
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ...hlo import dtypes as D
from . import scalar_complex, scalar_complex_fn, scalar_float_approx32, scalar_float_bits
from . import scalar_float_math, scalar_float_round, scalar_inline, scalar_int, scalar_libm
from . import scalar_ops_complex as C
from .scalar_base import (SCALAR_COMPUTE_DTYPES, ScalarOpError, ScalarSig, _daz, _dazfp,
                          _fkind, _fres, _fres_norflush, _from_pat, _from_wide, _mask, _pat,
                          _w, _wide)
from .scalar_convert import _bitcast, _complex, _convert, _imag, _real, _reduce_precision
from .scalar_ops_logic import _bitwise, _clz, _compare, _not, _popcnt, _select, _shift
from .scalar_ops_unary import _UNARY_F, _abs, _is_finite, _negate, _sign, _unary_float


_BIN_PY = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/"}


def _arith(op: str):
    def emit(sig: ScalarSig) -> str:
        t = sig.result
        k = _fkind(t)
        if k == "pred":
            if op == "add":
                return "({0} | {1})"
            if op == "multiply":
                return "({0} & {1})"
            raise ScalarOpError(f"{op} is not defined on pred")
        if k == "int":
            a, b = _wide(t, "{0}"), _wide(t, "{1}")
            if op == "divide":
                if D.is_signed(t):
                    return _from_wide(t, f"_xsdiv({a}, {b}, np.int64({-(1 << (_w(t) - 1))}))")
                return _from_wide(t, f"_xudiv({a}, {b}, {_mask(t)})")
            if op == "remainder":
                if D.is_signed(t):
                    return _from_wide(t, f"_xsrem({a}, {b}, np.int64({-(1 << (_w(t) - 1))}))")
                return _from_wide(t, f"_xurem({a}, {b})")
            if op == "power":
                return _from_pat(t, f"_xipow({_pat(t, '{0}')}, {_pat(t, '{1}')}, {_mask(t)}, "
                                    f"{_w(t)})")
            if op == "atan2":
                raise ScalarOpError("atan2 is not defined on integers")
            if D.is_signed(t) and _w(t) == 64:
                return f"np.int64({a} {_BIN_PY[op]} {b})"
            return _from_wide(t, f"({a} {_BIN_PY[op]} {b})")
        if k == "complex":
            return C.binary(op, t)
        a, b = _daz(t, "{0}"), _daz(t, "{1}")
        if op == "remainder":  # exact fmod: only the divisor is flushed, not the result
            e = f"np.fmod(np.float64({{0}}), np.float64({b}))"
            return _fres_norflush(t, e)
        if op == "power":
            if t == "f64":
                return _fres(t, f"_xpow({{0}}, {{1}}, {float(np.finfo(np.float64).tiny)!r}, "
                                "-1075.0)")
            if t in ("f32", "bf16"):  # XLA: powf (bf16 widened to f32)
                return _fres(t, "_xpow32({0}, {1})")
            return _fres(t, "_xpow({0}, {1}, 0.0, 0.0)")
        if op == "atan2":  # XLA:CPU: libm's atan2 (f64), atan2f (f32 and narrower)
            if t == "f64":
                return _fres(t, f"math.atan2({a}, {b})")
            return _fres(t, f"_xatan2f({a}, {b})")
        a, b = _dazfp(t, "{0}"), _dazfp(t, "{1}")  # (read by the arithmetic alone)
        if t == "f64":
            return _fres(t, f"({a} {_BIN_PY[op]} {b})")
        # f32 and narrow floats: f32 arithmetic is exactly rounded once
        return _fres(t, f"(np.float32({a}) {_BIN_PY[op]} np.float32({b}))")
    return emit


def _minmax(op: str):
    def emit(sig: ScalarSig) -> str:
        t = sig.result
        k = _fkind(t)
        if k == "pred":
            return "({0} | {1})" if op == "maximum" else "({0} & {1})"
        if k == "int":
            c = ">=" if op == "maximum" else "<="
            return f"({{0}} if {{0}} {c} {{1}} else {{1}})"
        if k == "complex":
            raise ScalarOpError(f"{op} is not defined on complex numbers")
        f = "_xfmax" if op == "maximum" else "_xfmin"
        if t in ("f32", "bf16"):  # the operands flushed as DAZ reads them
            return _fres(t, f"{f}d32({{0}}, {{1}})")
        return _fres(t, f"{f}({_daz(t, '{0}')}, {_daz(t, '{1}')})")
    return emit


def _clamp(sig: ScalarSig) -> str:
    t = sig.result
    mn = _minmax("minimum")(ScalarSig(t, (t, t)))
    mx = _minmax("maximum")(ScalarSig(t, (t, t)))
    inner = mx.format("{0}", "{1}")
    return mn.format("{2}", "(" + inner + ")")


# -- the table ------------------------------------------------------------------------------

SCALAR_OPS: dict[str, Callable[[ScalarSig], str]] = {
    **{op: _arith(op) for op in ("add", "subtract", "multiply", "divide", "remainder", "power",
                                 "atan2")},
    "maximum": _minmax("maximum"), "minimum": _minmax("minimum"),
    "compare": _compare, "select": _select, "clamp": _clamp,
    "and": _bitwise("and"), "or": _bitwise("or"), "xor": _bitwise("xor"), "not": _not,
    "shift-left": _shift("shift-left"), "shift-right-logical": _shift("shift-right-logical"),
    "shift-right-arithmetic": _shift("shift-right-arithmetic"),
    "popcnt": _popcnt, "count-leading-zeros": _clz,
    "negate": _negate, "abs": _abs, "sign": _sign, "is-finite": _is_finite,
    **{op: _unary_float(op) for op in _UNARY_F},
    "convert": _convert, "bitcast-convert": _bitcast, "reduce-precision": _reduce_precision,
    "real": _real, "imag": _imag, "complex": _complex,
}

# The modules whose `_x` / `_y` helpers generated code calls (scalar_cuda.py compiles the same
# set for the GPU): one list, so a helper module added is seen by both backends.
SCALAR_HELPER_MODULES = (scalar_int, scalar_float_bits, scalar_float_round, scalar_float_math,
                         scalar_float_approx32, scalar_complex, scalar_complex_fn, scalar_libm)

SCALAR_NAMESPACE: dict[str, Any] = {"np": np, "math": math}
for _m in SCALAR_HELPER_MODULES:
    SCALAR_NAMESPACE.update({k: v for k, v in vars(_m).items()
                             if k.startswith(("_x", "_y")) and callable(v)})
# The globals of generated modules (cpu/jit_cache.py), which only numba runs: the loop
# helpers as their njit twins (scalar_inline.py), the flushes as intrinsics
# (scalar_float_round.GENERATED_FLUSHES).  SCALAR_NAMESPACE itself stays callable from plain
# Python (scalar_jit's `.py_func`, run uncompiled).
GENERATED_NAMESPACE: dict[str, Any] = {
    **SCALAR_NAMESPACE, **{k: v for k, v in scalar_inline.twins().items()
                           if k in SCALAR_NAMESPACE},
    **scalar_float_round.GENERATED_FLUSHES}

__all__ = ["SCALAR_OPS", "SCALAR_NAMESPACE", "GENERATED_NAMESPACE", "SCALAR_HELPER_MODULES",
           "SCALAR_COMPUTE_DTYPES", "ScalarOpError", "ScalarSig"]
