"""f32 sine and cosine as XLA:CPU computes them: glibc's sinf and cosf, written out.

XLA:CPU emits `llvm.sin.f32` / `llvm.cos.f32` for an f32 sine or cosine (vectors of them
in its loops), which LLVM lowers to scalar calls of the process's libm -- `sinf`, `cosf`, or
one `sincosf` for a sine and a cosine of one value (read in jax 0.10.2's IR and object code
for jit(sin), a fused sin*2 and a fori_loop of sin and cos; their results equal glibc's
sinf on 4M random bit patterns).  glibc's sinf/cosf/sincosf (2.28 on; ARM's optimized
routines) work in f64: |x| < 2^-12 gives x (sine) or 1 (cosine); |x| < pi/4 a polynomial
in x; |x| < 120 one reduction x - n pi/2 (n from x 2^24 2/pi truncated, rounded by adding
2^23 and shifting) and the sine or cosine polynomial by the quadrant; larger finite x a
reduction by 4/pi to 192 bits in 64-bit integers; inf and NaN give NaN.  glibc on an FMA
machine (x86-64 with AVX2: __sinf_fma, read in libm.so.6 of glibc 2.36) contracts each
polynomial step `a + b c` into one FMA and the reduction into x - n pi/2 as one FMA; so
is it written here, every case computed and one selected, so that a loop of sines and
cosines vectorizes (f64 lanes, no calls) where XLA's makes a libm call per element.
Bit for bit glibc's on every f32 (tests/test_libm32.py checks against jax).

Two forms, the same bits where glibc's FMA variant is the process's libm: `_xsin32` /
`_xcos32` call the libm (the SCALAR_OPS templates name these; safe on any machine), and
`_xsin32v` / `_xcos32v` are the written-out vector form.  The vector form computes all
three reductions for every element, so it wins in long loops (f32[4M]: 6.7 ms against
sinf's 29), not in short ones, where sincosf's single path for the element's range is
quicker (a 2,000-step loop over f32[16]: 1.41x XLA with calls, 1.66x vector); and it is
glibc's FMA variant, which another machine's libm need not be.  So code generators that
know a loop is long rename the calls to the vector form, and only where a self-check in
this process found it equal to the libm (cpu/trig_vector.py).  The helpers are plain
register_jitable functions, not inlined in numba's IR: LLVM inlines them into the loop and
vectorizes it all the same, and numba compiles each once a process instead of typing the
whole expansion at every call (the self-check's loops: 16 s -> 2 s at load 12).

The plain functions are what plain Python and CUDA run (cuda/scalar_cuda.py re-executes
their source: the f64 function rounded -- within 1 ULP); numba on the CPU compiles the
overloads.  Subnormal inputs: the sine is x unchanged (callers do not flush it); the cosine
1, as of 0.

(XLA's f32 tan is libm's tanf too, but tan stays f64 rounded -- within 1 ULP of XLA: tanf's
bits fail the conformance suite's tan_float32_20_20_chlo, as XLA does, which f64 passes.)
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir as llvm_ir
from numba.core import types
from numba.extending import intrinsic, overload, register_jitable

from .scalar_float_bits import _llvm_bitcast


def _xsin32(x):
    return np.float32(np.sin(np.float64(x)))


def _xcos32(x):
    return np.float32(np.cos(np.float64(x)))


def _xsin32v(x):
    return np.float32(np.sin(np.float64(x)))


def _xcos32v(x):
    return np.float32(np.cos(np.float64(x)))


# The libm form: numpy's f32 scalar function, which numba lowers to llvm.sin.f32 /
# llvm.cos.f32 -- the process's sinf, cosf (or one sincosf for both), as XLA's code.
@overload(_xsin32)
def _sin32_libm(x):
    return lambda x: np.sin(np.float32(x))


@overload(_xcos32)
def _cos32_libm(x):
    return lambda x: np.cos(np.float32(x))


@intrinsic
def _llvm_fma_f64(typingctx, a, b, c):
    """llvm.fma.f64: a*b + c rounded once (the hardware FMA)."""
    if not all(isinstance(t, types.Float) and t.bitwidth == 64 for t in (a, b, c)):
        return None

    def codegen(context, builder, sig, args):
        dbl = llvm_ir.DoubleType()
        fn = builder.module.declare_intrinsic(
            "llvm.fma", [dbl], fnty=llvm_ir.FunctionType(dbl, [dbl, dbl, dbl]))
        return builder.call(fn, args)
    return types.float64(types.float64, types.float64, types.float64), codegen


@intrinsic
def _llvm_select(typingctx, c, a, b):
    """LLVM's select: a if c else b, both computed, no branch.  (A conditional expression is
    a branch in numba's IR; in a loop that also or-s a flag (trig_vector.far_loop), LLVM's
    jump threading left those branches in place and the loop did not vectorize: 35 ns an
    element, against 1.3 with selects.)"""
    if not isinstance(c, types.Boolean) or a != b:
        return None

    def codegen(context, builder, sig, args):
        return builder.select(args[0], args[1], args[2])
    return a(c, a, b), codegen


# (_SC_: these names join the CUDA helpers' shared namespace, cuda/scalar_cuda.py.)
# glibc's __sincosf_table[0] (the second entry is the same with the cosine's coefficients
# negated: its cosine polynomial is the first's negated, exactly) and __inv_pio4.
_SC_HPI_INV = float.fromhex("0x1.45f306dc9c883p+23")  # 2/pi 2^24
_SC_HPI = float.fromhex("0x1.921fb54442d18p+0")
_SC_PI64 = float.fromhex("0x1.921fb54442d18p-62")  # pi 2^-63 (glibc's pi64)
_SC_C0, _SC_C1, _SC_C2, _SC_C3, _SC_C4 = (
    1.0, float.fromhex("-0x1.ffffffd0c621cp-2"), float.fromhex("0x1.55553e1068f19p-5"),
    float.fromhex("-0x1.6c087e89a359dp-10"), float.fromhex("0x1.99343027bf8c3p-16"))
_SC_S1, _SC_S2, _SC_S3 = (
    float.fromhex("-0x1.555545995a603p-3"), float.fromhex("0x1.1107605230bc4p-7"),
    float.fromhex("-0x1.994eb3774cf24p-13"))
_SC_INV_PIO4 = np.array([
    0xa2, 0xa2f9, 0xa2f983, 0xa2f9836e, 0xf9836e4e, 0x836e4e44, 0x6e4e4415, 0x4e441529,
    0x441529fc, 0x1529fc27, 0x29fc2757, 0xfc2757d1, 0x2757d1f5, 0x57d1f534, 0xd1f534dd,
    0xf534ddc0, 0x34ddc0db, 0xddc0db62, 0xc0db6295, 0xdb629599, 0x6295993c, 0x95993c43,
    0x993c4390, 0x3c439041], np.uint64)


@register_jitable
def _polys(r, q, n):
    """(sine polynomial, cosine polynomial, odd quadrant) of the reduced r in quadrant q
    (n: the reduction's count, whose parity picks the polynomial)."""
    # the sine's sign by quadrant q: + - - +; the cosine's table negated from q & 2
    xs = _llvm_select(((q ^ (q >> np.int64(1))) & np.int64(1)) != 0, -r, r)
    x2 = r * r
    x3 = xs * x2
    ps = _llvm_fma_f64(_llvm_fma_f64(x2, _SC_S3, _SC_S2), x3 * x2, _llvm_fma_f64(x3, _SC_S1, xs))
    x4 = x2 * x2
    c = _llvm_fma_f64(x4, _SC_C2, _llvm_fma_f64(x2, _SC_C1, _SC_C0))
    pc = _llvm_fma_f64(_llvm_fma_f64(x2, _SC_C4, _SC_C3), x4 * x2, c)
    pc = _llvm_select((q & np.int64(2)) != 0, -pc, pc)
    return ps, pc, (n & np.int64(1)) != 0


@register_jitable
def _top(y):
    """The top 12 bits of |f32 y| as glibc's sinf compares them (exponent, 3 bits more)."""
    return (np.uint64(np.uint32(_llvm_bitcast(y, np.int32))) >> np.uint64(20)) & np.uint64(0x7FF)


@register_jitable
def _medium(x, top):
    """|y| < 120: n = ((int)(x 2^24 2/pi) + 2^23) >> 24; r = x - n pi/2 (one FMA); below
    pi/4 (its top bits) no reduction.  (x is 0 for a larger |y|: no overflow to convert.)"""
    xm = _llvm_select(top < np.uint64(0x42F), x, 0.0)
    nm = (np.int64(np.int32(xm * _SC_HPI_INV)) + np.int64(0x800000)) >> np.int64(24)
    rm = _llvm_fma_f64(-np.float64(nm), _SC_HPI, xm)
    small = top < np.uint64(0x3F4)
    return _llvm_select(small, x, rm), _llvm_select(small, np.int64(0), nm)


@register_jitable
def _sincos_parts(y):
    """(sine polynomial, cosine polynomial, odd quadrant, top 12 bits of |y|) of f32 y:
    glibc's three reductions all computed, the one for |y| selected.  The sine of y is the
    first for an even quadrant, else the second; the cosine the other way round."""
    m32 = np.uint64(0xFFFFFFFF)
    u = np.uint64(np.uint32(_llvm_bitcast(y, np.int32)))
    top = _top(y)
    rm, nm = _medium(np.float64(y), top)
    # larger: y's 24-bit mantissa times 4/pi (96 of its bits, from the table), modulo 4
    k = np.int64((u >> np.uint64(26)) & np.uint64(15))
    xi = ((((u & np.uint64(0xFFFFFF)) | np.uint64(0x800000))
           << ((u >> np.uint64(23)) & np.uint64(7))) & m32)
    res0 = (xi * _SC_INV_PIO4[k]) & m32
    res1 = xi * _SC_INV_PIO4[k + 4]
    res2 = xi * _SC_INV_PIO4[k + 8]
    res0 = ((res2 >> np.uint64(32)) | (res0 << np.uint64(32))) + res1
    nl = (res0 + np.uint64(1 << 61)) >> np.uint64(62)
    res0 = res0 - (nl << np.uint64(62))
    rl = np.float64(np.int64(res0)) * _SC_PI64
    medium = top < np.uint64(0x42F)
    r = _llvm_select(medium, rm, rl)
    n = _llvm_select(medium, nm, np.int64(nl))
    q = _llvm_select(medium, n, n + np.int64(u >> np.uint64(31)))  # y's sign, mod 4
    ps, pc, odd = _polys(r, q, n)
    return ps, pc, odd, top


@register_jitable
def _sin_of(y, ps, pc, odd, top):
    r = np.float32(_llvm_select(odd, pc, ps))
    r = _llvm_select(top < np.uint64(0x398), y, r)  # |y| < 2^-12: y itself
    return _llvm_select(top < np.uint64(0x7F8), r, y - y)  # inf, NaN: NaN


@register_jitable
def _cos_of(y, ps, pc, odd, top):
    r = np.float32(_llvm_select(odd, ps, pc))
    r = _llvm_select(top < np.uint64(0x398), np.float32(1.0), r)
    return _llvm_select(top < np.uint64(0x7F8), r, y - y)


def _trig_from(parts, of):
    """The f32 sine or cosine (`of`: _sin_of, _cos_of) from `parts` (_sincos_parts, every
    range; _medium_parts, |y| < 120 only): one implementation for the four overloads."""
    def trig32(x):
        y = np.float32(x)
        ps, pc, odd, top = parts(y)
        return of(y, ps, pc, odd, top)
    return trig32


@overload(_xsin32v)
def _sin32_glibc(x):
    return _trig_from(_sincos_parts, _sin_of)


@overload(_xcos32v)
def _cos32_glibc(x):
    return _trig_from(_sincos_parts, _cos_of)


# The medium-range form: glibc's result for |x| < 120 only (the one-step reduction, no
# 4/pi table: a third of the vector form's work), and the test for the rest.  A loop
# computes it for every element and, if any element was outside, runs again with the libm
# calls (cpu/trig_vector.py).
def _xsin32m(x):
    return np.float32(np.sin(np.float64(x)))


def _xcos32m(x):
    return np.float32(np.cos(np.float64(x)))


def _xtrig_far(x):
    return not abs(np.float64(x)) < 120.0


@register_jitable
def _medium_parts(y):
    """_sincos_parts for |y| < 120 only: the one-step reduction, no 4/pi table."""
    top = _top(y)
    r, n = _medium(np.float64(y), top)
    ps, pc, odd = _polys(r, n, n)
    return ps, pc, odd, top


@overload(_xsin32m)
def _sin32_medium(x):
    return _trig_from(_medium_parts, _sin_of)


@overload(_xcos32m)
def _cos32_medium(x):
    return _trig_from(_medium_parts, _cos_of)


@overload(_xtrig_far)
def _trig_far(x):
    return lambda x: _top(np.float32(x)) >= np.uint64(0x42F)
