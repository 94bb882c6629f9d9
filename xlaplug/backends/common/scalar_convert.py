"""Scalar emitters for convert, bitcast-convert, reduce-precision, real, imag, complex (part of
SCALAR_OPS; see scalar_ops.py for the contract)."""
from __future__ import annotations

from ...hlo import dtypes as D
from .scalar_base import (ScalarOpError, ScalarSig, _ct, _daz,
                                      _fkind, _fres_norflush, _from_pat, _from_wide, _pat,
                                      _w, _wide)


def _convert(sig: ScalarSig) -> str:
    f, t = sig.operands[0], sig.result
    kf, kt = _fkind(f), _fkind(t)
    if f == t:
        return "{0}"
    if kf == "complex":
        comp = "f32" if f == "c64" else "f64"
        if kt == "complex":
            if t == "c128":
                return "np.complex128(complex(_xftz64(np.float64(_xftz32({0}.real))), " \
                       "_xftz64(np.float64(_xftz32({0}.imag)))))"
            return "np.complex64(complex(_xftz32(np.float32({0}.real)), " \
                   "_xftz32(np.float32({0}.imag))))"
        inner = _convert(ScalarSig(t, (comp,)))
        return inner.replace("{0}", f"{_ct(comp)}({{0}}.real)")
    if kt == "complex":
        comp = "f32" if t == "c64" else "f64"
        inner = _convert(ScalarSig(comp, (f,))) if f != comp else "{0}"
        return f"{_ct(t)}({inner})"
    if kt == "pred":
        if kf in ("int", "pred"):
            return "({0} != 0)"
        return f"({_daz(f, '{0}') if f != 'bf16' else '{0}'} != 0)"
    if kf == "pred":
        return _convert(ScalarSig(t, ("u8",))).replace("{0}", "np.uint8({0})")
    if kf == "int":
        if kt == "int":
            return _from_wide(t, _wide(f, "{0}"))
        if t in ("f32", "f64"):
            return f"{_ct(t)}({_wide(f, '{0}')})"
        # narrow floats: round the exact integer once (via f64: exact there, or rounded to
        # odd past 2^53 so the second rounding is the correct one; see int_to_f64_odd)
        if _w(f) <= 53:
            return _fres_norflush(t, "np.float64({0})")
        odd = "_xs64_odd" if D.is_signed(f) else "_xu64_odd"
        return _fres_norflush(t, f"{odd}({_wide(f, '{0}')})")
    # float source
    if kt == "int":
        w = _w(t)
        src = "{0}"
        if f == "f4e2m1fn":  # XLA reads +-6 as +-inf here
            src = "(np.float32({0}) * np.float32(np.inf) if abs({0}) == 6.0 else {0})"
        if D.is_signed(t):
            return _from_wide(t, f"_xf2s({src}, {-(1 << (w - 1))}, {(1 << (w - 1)) - 1})")
        return _from_wide(t, f"_xf2u({src}, {(1 << w) - 1})")
    if t == "f64":
        return f"np.float64({_daz('f32', '{0}') if f in ('f32', 'bf16') else '{0}'})"
    if t == "f32":
        return "_xftz32(np.float32({0}))" if f == "f64" else "np.float32({0})"
    if t == "f8e8m0fnu" or f == "f8e8m0fnu":
        raise ScalarOpError("f8e8m0fnu is not supported in compiled scalar code")
    if t == "bf16" and f == "f64":  # XLA: fptrunc to f32 (flushed), then f32 -> bf16
        return _fres_norflush(t, "_xftz32(np.float32({0}))")
    return _fres_norflush(t, "{0}")

_RP = {"f16": (16, 5, 10), "bf16": (16, 8, 7), "f32": (32, 8, 23), "f64": (64, 11, 52)}


def _reduce_precision(sig: ScalarSig) -> str:
    t = sig.result
    if t not in _RP:
        raise ScalarOpError(f"reduce-precision on {t} is not supported in compiled scalar code")
    n, e, m = _RP[t]
    eb, mb = int(sig.attrs["exponent_bits"]), int(sig.attrs["mantissa_bits"])
    if t == "f32":
        return (f"_xfrom_bits32(np.int32(np.int64(_xreduce_prec(np.uint64(np.int64(_xbits32("
                f"{{0}})) & np.int64(0xFFFFFFFF)), {n}, {e}, {m}, {eb}, {mb}))))")
    if t == "f64":
        return (f"_xfrom_bits64(np.int64(_xreduce_prec(np.uint64(_xbits64({{0}})), {n}, {e}, "
                f"{m}, {eb}, {mb})))")
    if t == "bf16":
        return (f"_xfrom_bits32(np.int32(np.int64(_xreduce_prec(np.uint64((np.int64(_xbits32("
                f"{{0}})) >> np.int64(16)) & np.int64(0xFFFF)), {n}, {e}, {m}, {eb}, {mb})) "
                f"<< np.int64(16)))")
    return f"_xf16_value(_xreduce_prec(_xf16_bits({{0}}), {n}, {e}, {m}, {eb}, {mb}))"


def _bitcast(sig: ScalarSig) -> str:
    f, t = sig.operands[0], sig.result
    if _w(f) != _w(t):
        raise ScalarOpError("size-changing bitcast-convert has no scalar form")
    if f == t:
        return "{0}"
    # source -> pattern (uint64)
    if f == "f32":
        p = "(np.uint64(np.int64(_xbits32({0}))) & np.uint64(0xFFFFFFFF))"
    elif f == "f64":
        p = "np.uint64(_xbits64({0}))"
    elif f == "bf16":
        p = "((np.uint64(np.int64(_xbits32({0}))) >> np.uint64(16)) & np.uint64(0xFFFF))"
    elif f == "f16":
        p = "_xf16_bits({0})"
    elif _fkind(f) == "int":
        p = _pat(f, "{0}")
    else:
        raise ScalarOpError(f"bitcast-convert from {f} has no scalar form")
    if t == "f32":
        return f"_xfrom_bits32(np.int32(np.int64({p})))"
    if t == "f64":
        return f"_xfrom_bits64(np.int64({p}))"
    if t == "bf16":
        return f"_xfrom_bits32(np.int32(np.int64({p} << np.uint64(16))))"
    if t == "f16":
        return f"_xf16_value({p})"
    if _fkind(t) == "int":
        return _from_pat(t, p)
    raise ScalarOpError(f"bitcast-convert to {t} has no scalar form")


def _real(sig: ScalarSig) -> str:
    f = sig.operands[0]
    if _fkind(f) == "complex":
        return f"{_ct(sig.result)}({{0}}.real)"
    return "{0}"


def _imag(sig: ScalarSig) -> str:
    f = sig.operands[0]
    if _fkind(f) == "complex":
        return f"{_ct(sig.result)}({{0}}.imag)"
    return f"{_ct(sig.result)}(0)"


def _complex(sig: ScalarSig) -> str:
    return f"{_ct(sig.result)}(complex({{0}}, {{1}}))"
