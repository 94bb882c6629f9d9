"""The scalar op table's comparisons, select and integer bit ops (templates; scalar_ops.py
has the contract), apart from the arithmetic because none of them rounds or flushes a
result: compare (float operands flushed first, as XLA:CPU's; TOTALORDER through the
_xkey32/_xkey64 keys; UNSIGNED and signed integer orders; complex EQ/NE only), select,
and/or/xor/not (pred as bool, integers widened to 64 bits and wrapped back), the shifts
with XLA's out-of-range counts (_xshl/_xsrl/_xsra of scalar_int.py), popcnt and
count-leading-zeros on the bit pattern."""
from __future__ import annotations

from ...hlo import dtypes as D
from .scalar_base import (ScalarOpError, ScalarSig, _dazfp, _fkind, _from_pat, _from_wide,
                          _mask, _pat, _w, _wide)

_CMP_PY = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}


def _compare(sig: ScalarSig) -> str:
    t = sig.operands[0]
    d = str(sig.attrs.get("direction", ""))
    if d not in _CMP_PY:
        raise ScalarOpError(f"compare direction {d!r}")
    c = _CMP_PY[d]
    ctype = str(sig.attrs.get("type", "") or "")
    k = _fkind(t)
    if k in ("f32", "f64", "narrow") and ctype == "TOTALORDER":
        key = "_xkey64" if t == "f64" else "_xkey32"
        return f"({key}({{0}}) {c} {key}({{1}}))"
    if k in ("f32", "f64", "narrow"):
        return f"({_dazfp(t, '{0}')} {c} {_dazfp(t, '{1}')})"  # (a float compare reads them)
    if k == "complex":
        if d not in ("EQ", "NE"):
            raise ScalarOpError(f"complex compare {d}")
        fl = "_xcflush64" if t == "c64" else ""
        return f"({fl}({{0}}) {c} {fl}({{1}}))"
    if k == "pred":
        return f"({{0}} {c} {{1}})"
    if ctype == "UNSIGNED" or (not ctype and not D.is_signed(t)):
        return f"({_pat(t, '{0}')} {c} {_pat(t, '{1}')})"
    return f"(np.int64({{0}}) {c} np.int64({{1}}))"


def _bitwise(op: str):
    sym = {"and": "&", "or": "|", "xor": "^"}[op]

    def emit(sig: ScalarSig) -> str:
        t = sig.result
        k = _fkind(t)
        if k == "pred":
            return f"({{0}} {sym} {{1}})"
        if k != "int":
            raise ScalarOpError(f"{op} is not defined on {t}")
        return _from_wide(t, f"({_wide(t, '{0}')} {sym} {_wide(t, '{1}')})")
    return emit


def _not(sig: ScalarSig) -> str:
    t = sig.result
    k = _fkind(t)
    if k == "pred":
        return "(not {0})"
    if k != "int":
        raise ScalarOpError(f"not is not defined on {t}")
    return _from_wide(t, f"(~{_wide(t, '{0}')})")


def _shift(op: str):
    def emit(sig: ScalarSig) -> str:
        t = sig.result
        if _fkind(t) != "int":
            raise ScalarOpError(f"{op} is not defined on {t}")
        p, c, w, m = _pat(t, "{0}"), _pat(t, "{1}"), _w(t), _mask(t)
        if op == "shift-left":
            r = f"_xshl({p}, {c}, {w}, {m})"
        elif op == "shift-right-logical":
            r = f"_xsrl({p}, {c}, {w})"
        else:
            r = f"_xsra({p}, {c}, {w}, {m})"
        return _from_pat(t, r)
    return emit


def _popcnt(sig: ScalarSig) -> str:
    t = sig.result
    if _fkind(t) != "int":
        raise ScalarOpError(f"popcnt is not defined on {t}")
    p = "(np.uint64(np.int64({0})) & np.uint64(255))" if D.is_signed(t) and _w(t) < 8 \
        else _pat(t, "{0}")
    return _from_wide(t, f"_xpopcnt({p})")


def _clz(sig: ScalarSig) -> str:
    t = sig.result
    if _fkind(t) != "int":
        raise ScalarOpError(f"count-leading-zeros is not defined on {t}")
    return _from_wide(t, f"_xclz({_pat(t, '{0}')}, {_w(t)})")


def _select(sig: ScalarSig) -> str:
    return "({1} if {0} else {2})"
