"""The scalar op table's unary numeric ops (templates; scalar_ops.py has the contract):
negate, abs, sign, is-finite and the float functions (exp, log, tanh, ...).  Each float
function is routed to the formula XLA evaluates for its type -- XLA:CPU's own f32
approximations (scalar_float_approx32.py) where it has them, else numpy/libm in f64 --
and flushes its subnormal input or not as XLA does (_UNARY_NO_FLUSH)."""
from __future__ import annotations

from ...hlo import dtypes as D
from . import scalar_ops_complex as C
from .scalar_base import (ScalarOpError, ScalarSig, _ct, _daz, _dazfp, _fkind, _fres,
                          _from_wide, _w, _wide)


def _negate(sig: ScalarSig) -> str:
    t = sig.result
    k = _fkind(t)
    if k == "int":
        return _from_wide(t, f"(-{_wide(t, '{0}')})") if not (D.is_signed(t) and _w(t) == 64) \
            else "np.int64(-np.int64({0}))"
    if k in ("f32", "f64", "narrow", "complex"):
        return "(-{0})"
    raise ScalarOpError(f"negate is not defined on {t}")


def _abs(sig: ScalarSig) -> str:
    t = sig.operands[0]
    k = _fkind(t)
    if k == "int":
        return _from_wide(t, f"abs({_wide(t, '{0}')})") if D.is_signed(t) else "{0}"
    if k in ("f32", "f64", "narrow"):
        return f"{_ct(t)}(abs({{0}}))"
    if k == "complex":
        return C.absolute(t)
    raise ScalarOpError(f"abs is not defined on {t}")


def _sign(sig: ScalarSig) -> str:
    t = sig.result
    k = _fkind(t)
    if k == "int":
        if D.is_signed(t):
            return f"{_ct(t)}((1 if {{0}} > 0 else 0) - (1 if {{0}} < 0 else 0))"
        return f"{_ct(t)}(1 if {{0}} != 0 else 0)"
    if k == "f64":
        return "_xsign64(_xftz64({0}))"
    if k in ("f32", "narrow"):
        return f"np.float32(_xsign({_daz(t, 'np.float32({0})')}))"
    if k == "complex":
        return C.unary("sign", t)
    raise ScalarOpError(f"sign on {t} is not supported in compiled scalar code")

# (np.* rather than math.*: numpy returns NaN where math raises in plain Python.)
_UNARY_F = {
    "exponential": "np.exp({x})", "log": "np.log({x})", "sqrt": "np.sqrt({x})",
    "rsqrt": "(1.0 / np.sqrt({x}))", "cbrt": "_xcbrt({x})", "sine": "np.sin({x})",
    "cosine": "np.cos({x})", "tan": "np.tan({x})", "tanh": "np.tanh({x})",
    "erf": "math.erf({x})", "floor": "np.floor({x})", "ceil": "np.ceil({x})",
    "round-nearest-even": "np.rint({x})", "round-nearest-afz": "_xround_afz({x})",
    "exponential-minus-one": "_xexpm1({x})", "log-plus-one": "_xlog1p({x})",
    "logistic": "(1.0 / (1.0 + np.exp(-{x})))",
}

_UNARY_F32 = {"exponential-minus-one": "_xexpm1_32({x})", "log-plus-one": "_xlog1p32({x})",
              "tanh": "_xtanh32({x})", "exponential": "_xexp32({x})", "log": "_xlog32({x})",
              "logistic": "_xlogistic32({x})", "sine": "_xsin32({x})",
              "cosine": "_xcos32({x})", "erf": "_xerf32({x})"}
# f64 stays on libm (one call per element): XLA's inline f64 exp and tanh are 2-4 ULP from
# the true values, and the conformance suite holds us to 1 ULP there (XLA fails those
# cases; taking its f64 forms dropped 6 of ours: f64 tanh, expm1, logistic, sinh, c128 exp
# and cos).  XLA's f64 erf, log, sin, cos and pow are libm calls too.
# XLA passes subnormal inputs of these straight through (no flushing); f64 tanh flushes.
# (cosine: the cosine of a subnormal is 1, as of 0, and no cosine is subnormal -- flushing
# changes nothing, and left out, a sine and a cosine of one value share their reduction.)

_UNARY_NO_FLUSH = {"sine", "cosine", "tan", "tanh", "exponential-minus-one"}
# f32 forms that read their operand only through float instructions (compares, multiply-
# adds; a bit view only past a compare that has sent 0 elsewhere): see _dazfp.
_FLOAT_READS = {"exponential", "log", "sqrt", "rsqrt", "logistic"}


def _unary_float(op: str):
    def emit(sig: ScalarSig) -> str:
        t = sig.result
        k = _fkind(t)
        if k == "complex":
            return C.unary(op, t)
        if k not in ("f32", "f64", "narrow"):
            raise ScalarOpError(f"{op} on {t} is not supported in compiled scalar code")
        flush = op not in _UNARY_NO_FLUSH or (op == "tanh" and t == "f64")
        x = (_dazfp if op in _FLOAT_READS else _daz)(t, "{0}") if flush else "{0}"
        if t != "f64" and op in _UNARY_F32:  # XLA evaluates these formulas in f32
            e = _UNARY_F32[op].format(x=f"np.float32({x})")
        else:
            e = _UNARY_F[op].format(x=f"np.float64({x})")
        if not flush:
            if t == "f64":
                return f"np.float64({e})"
            if t == "f32":
                return f"np.float32({e})"
            return _fres(t, e).replace("_xftzr32(np.float32(", "(np.float32(", 1)
        return _fres(t, e)
    return emit


def _is_finite(sig: ScalarSig) -> str:
    return "(abs(np.float64({0})) < np.inf)"
