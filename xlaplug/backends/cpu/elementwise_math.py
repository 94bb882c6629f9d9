"""Unary float kernels (XLA:CPU semantics; see elementwise.py): the transcendentals, rounding,
sign, abs, negate and is-finite.  The binary arithmetic is elementwise_arith.py's.

f32 exp, log, tanh and erf are XLA:CPU's own approximations and f32 sin and cos the libm's
sinf and cosf, which XLA calls (in long loops glibc's written out in f64 lanes, where this
process's libm is that: trig_vector.py): XLA's bits (f64 erf is libm's, as XLA's).  Other
transcendentals (tan, cbrt ...) are computed here (nearly) correctly rounded -- f32 through
f64 -- so they agree with XLA to a few ULP (tests/test_elementwise.py ULP_BOUNDS).
Ops XLA defines by a formula -- logistic = 1/(1+exp(-x)), expm1, log1p -- follow that formula
step by step, flushing as XLA does; complex ops run the scalar table's formulas (written
once, common/scalar_complex{,_fn}.py) in numba loops (elementwise_complex.py).
"""
from __future__ import annotations

import numpy as np

from ...hlo import dtypes as D
from ..registry import kernel
from .elementwise import (F32, F64, et, fin, flush, fout, iin, iout, is_complex, is_float, is_int,
                          is_signed, result)
from . import elementwise_complex as C, trig_vector


def _via64(fn):
    """A libm-like function: f32 computed in f64 then rounded (closer to XLA's f32 kernels
    than numpy's own f32 loops)."""
    def g(x):
        if x.dtype == F32:
            return fn(x.astype(F64)).astype(F32)
        return fn(x)
    return g


def _expm1(x):
    # XLA: |x| > 0.5 -> exp(x) - 1; x/2 == 0 -> x; else tanh(x/2) * (exp(x) + 1).
    one, half = x.dtype.type(1), x.dtype.type(0.5)
    e = flush(_exp(x))
    t = flush(_tanh(flush(x * half)))
    small = flush(t * flush(e + one))
    r = np.where(np.abs(x) > half, e - one, small)
    return np.where(flush(x * half) == 0, x, r)


def _log1p(x):
    """XLA: |x| < sqrt(2)-1 -> x - x^2/2 + x^3 * P(x)/Q(x) (Cephes, Horner steps fused
    into FMAs, which numpy cannot do array-wise); else log(x + 1).  The scalar helpers
    (common.scalar_float_approx32._xlog1p32 / scalar_float_math._xlog1p) in a loop."""
    return _f32_loop("log1p", x) if x.dtype == F32 else _f32_loop("log1p", x, f64=True)


def _exp(x):
    """f32: XLA:CPU's own exp (common.scalar_float_approx32._xexp32); f64: libm's; f16
    (logistic and expm1 step in f16): the f32 exp, rounded."""
    return _by_width(x, "exp", "math.exp")


def _log(x):
    """f32: XLA:CPU's own log (common.scalar_float_approx32._xlog32: Cephes' logf,
    FMAs); f64: libm's."""
    return _by_width(x, "log", "math.log")


def _tanh(x):
    """f32: XLA:CPU's own approximation, bit for bit (see
    common.scalar_float_approx32._xtanh32 for the formula); f64: libm's."""
    return _by_width(x, "tanh", "math.tanh")


def _by_width(x, name: str, f64_fn: str):
    """f64: `f64_fn` (libm); f32: XLA's own `_x{name}32`; narrower: that, rounded back."""
    if x.dtype == F64:
        return _libm(f64_fn)(x)
    if x.dtype == F32:
        return _f32_loop(name, x)
    return _f32_loop(name, x.astype(F32)).astype(x.dtype)


def _f32_loop(name: str, x, f64: bool = False):
    """XLA:CPU's f32 `name` (an `_x{name}32` scalar helper; with `f64`, `_x{name}` on an f64
    array) over an array."""
    helper = f"_x{name}" if f64 else f"_x{name}32"
    return _scalar_loop(helper, x, F64 if f64 else F32)


def _libm(fn: str):
    """An f64 function as a scalar call in a loop (C's libm, or a scalar helper such as
    `_xcbrt`).  numpy's own f64 loops are not used: on AVX-512 machines numpy calls Intel's
    SVML for exp, log, sin, cos, tan, tanh and cbrt, which rounds differently from libm, so
    the same module would give other bits on another CPU (and other bits fused and
    unfused: the fused loops call libm)."""
    return lambda x: _scalar_loop(fn, x, F64)


def _scalar_loop(fn: str, x, out_dtype):
    """`out[i] = fn(x[i])` as a numba loop in a generated module cached on disk
    (jit_cache.py): a later process loads the machine code instead of compiling it
    (numba's start-up stays off the import path)."""
    from .jit_cache import cached_function
    # error_model="numpy": numba's default checks every float division for a zero divisor,
    # a branch that keeps the loop from vectorizing (tanh: 120 us for 32k values, 10 us
    # vectorized); the helpers divide as IEEE does and want no exception.
    src = f"def loop(x, out):\n    for i in range(x.shape[0]):\n        out[i] = {fn}(x[i])\n"
    if x.size >= trig_vector.LONG_LOOP:  # f32 sine, cosine: vector code (trig_vector.py)
        src = trig_vector.long_loop(src)
    loop = cached_function(src, {}, "loop", nogil=True, error_model="numpy")
    out = np.empty(x.size, out_dtype)
    loop(np.ascontiguousarray(x).reshape(-1), out)
    return out.reshape(x.shape)


def _sin(x):
    """f32: the libm's sinf, which XLA:CPU calls (common.scalar_libm._xsin32; vector code in
    long loops, trig_vector.py); f64: libm's sin."""
    return _by_width(x, "sin", "math.sin")


def _cos(x):
    return _by_width(x, "cos", "math.cos")


def _rsqrt(x):
    # XLA's rsqrt is correctly rounded in practice; 1/sqrt(x) in the same precision is not.
    wide = F64 if x.dtype == F32 else np.longdouble
    return (1 / np.sqrt(x.astype(wide))).astype(x.dtype)


def _logistic(x):
    one = x.dtype.type(1)
    return one / flush(one + flush(_exp(-x)))


def _round_afz(x):
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= x.dtype.type(0.5), t + np.copysign(x.dtype.type(1), x), t)


def _sign(x):
    s = np.where(x != 0, np.copysign(x.dtype.type(1), x), x)
    return np.where(np.isnan(x), x, s)


FLOAT_UNARY = {
    "exponential": _exp,
    "exponential-minus-one": _expm1,
    "log": _log,
    "log-plus-one": _log1p,
    "logistic": _logistic,
    "sqrt": np.sqrt,
    "rsqrt": _rsqrt,
    "cbrt": _via64(_libm("_xcbrt")),
    "sine": _sin,
    "cosine": _cos,
    "tan": _via64(_libm("math.tan")),
    "tanh": _tanh,
    "erf": lambda x: _by_width(x, "erf", "math.erf"),
    "floor": np.floor,
    "ceil": np.ceil,
    "round-nearest-even": np.rint,
    "round-nearest-afz": _round_afz,
    "sign": _sign,
}


# XLA returns x itself for tiny |x| (a select, not arithmetic): subnormals pass unflushed.
# (f64 tanh does flush.)  A cosine is 1 for a subnormal as for 0: flushing changes nothing.
NO_FLUSH = frozenset({"sine", "cosine", "tan", "tanh", "exponential-minus-one"})
# XLA expands these into f16 arithmetic for f16 (each step rounded to f16), not f32.
F16_FORMULAS = frozenset({"exponential-minus-one", "logistic"})


# From this many elements an f32/f64 function runs as one compiled loop of the scalar table's
# expression -- the fused loops' own, its flushes inline -- where the array form makes three
# passes over memory (flush in, the function, flush out): f32 erf of 4M elements took 6.0 ms
# that way against XLA's 1.5 (benchmarks/erf_loop.py).  Over numba's threads from the fused
# loops' size on, as theirs (fused_loop.run_loop), unless devices running at once already
# fill the cores: serial, f32[4M] erf took 2.85 ms on 13 quiet cores where the fused loop
# took 0.64 and XLA 0.76 (2026-12-06, load 0).
LOOP_FROM_ELEMENTS = 4096


def _unary_loop(op: str, x: np.ndarray, t: str, ctx) -> np.ndarray:
    from ..common.fusion_contents import DEFAULT_MIN_ELEMENTS
    from ..common.scalar_ops import SCALAR_OPS, ScalarSig
    from .blas_threads import devices_at_once
    from .jit_cache import cached_function
    parallel = x.size >= DEFAULT_MIN_ELEMENTS and not devices_at_once(ctx)
    expr = SCALAR_OPS[op](ScalarSig(t, (t,))).format("x[i]")
    src = (f"def loop(x, out):\n    for i in {'prange' if parallel else 'range'}"
           f"(out.shape[0]):\n        out[i] = {expr}\n")
    # (a long loop: f32 sine and cosine as vector code, trig_vector.py)
    loop = cached_function(trig_vector.long_loop(src), {}, "loop", nogil=True,
                           parallel=parallel, error_model="numpy")
    out = np.empty(x.size, x.dtype)
    if parallel:  # on the team XLA's cost model gives one op (team_size.py)
        from .team_size import TRANSCENDENTAL, loop_spread
        cost = (0, x.size) if op in TRANSCENDENTAL else (x.size, 0)
        with loop_spread(ctx, x.size, (*cost, 2 * x.nbytes)):
            loop(np.ascontiguousarray(x).reshape(-1), out)
    else:
        loop(np.ascontiguousarray(x).reshape(-1), out)
    return out.reshape(x.shape)


@kernel(*FLOAT_UNARY)
def _float_unary(ins, args, ctx):
    t = et(ins, 0)
    x = args[0]
    op = ins.opcode
    if is_int(t) or t == "pred":
        if ins.opcode != "sign":
            raise ValueError(f"{ins.opcode} is not defined on {t}")
        v = iin(x, t)
        return result(ins, iout(np.sign(v) if is_signed(t) else (v != 0), t))
    if is_complex(t):
        with np.errstate(all="ignore"):
            return result(ins, C.apply(op, ins, [x]))
    x = np.asarray(x)
    if (t in ("f32", "f64") and x.size >= LOOP_FROM_ELEMENTS and x.dtype == D.to_dtype(t)
            and (op, t) != ("rsqrt", "f64")):  # (the table's f64 1/sqrt rounds twice)
        return result(ins, _unary_loop(op, x, t, ctx))
    with np.errstate(all="ignore"):
        if t == "f16" and op in F16_FORMULAS:
            return result(ins, FLOAT_UNARY[op](np.asarray(x)).astype(np.float16))
        ok = op not in NO_FLUSH or (op == "tanh" and t == "f64")
        return result(ins, fout(FLOAT_UNARY[op](fin(x, t, daz=ok)), t, ftz=ok))


@kernel("abs")
def _abs(ins, args, ctx):
    t = et(ins, 0)
    x = np.asarray(args[0])
    if is_complex(t):
        with np.errstate(all="ignore"):
            return result(ins, C.apply("abs", ins, [x]))
    if is_float(t):
        return result(ins, np.abs(x))  # a bit operation: no flushing
    return result(ins, iout(np.abs(iin(x, t)), t))


@kernel("negate")
def _negate(ins, args, ctx):
    t = et(ins, 0)
    x = np.asarray(args[0])
    if is_float(t) or is_complex(t):
        return result(ins, -x)  # sign-bit flip, no flushing
    with np.errstate(all="ignore"):
        return result(ins, iout(-iin(x, t).astype(np.int64 if is_signed(t) else np.uint64), t))


@kernel("is-finite")
def _is_finite(ins, args, ctx):
    return result(ins, np.isfinite(np.asarray(args[0]).astype(F32)
                                   if et(ins, 0) not in ("f32", "f64") else args[0]))
