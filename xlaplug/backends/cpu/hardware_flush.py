"""Fused loops that flush subnormals with the MXCSR's FTZ and DAZ bits, as XLA:CPU runs them.

XLA:CPU runs a module with FTZ and DAZ set: every float instruction reads a subnormal
operand as a signed 0 and writes a subnormal result as one.  The generated loops do it in
software (the SCALAR_OPS templates' `_xftz32`: an integer test and a select per operand and
per result); in the elementwise benchmark's chain (tanh, multiply, exp, max, sqrt: 8 ops
over f32[2048,2048]) those flushes took half of the loop's time, one core: 4.35 ms with
them, 2.30 without any, XLA:CPU 2.97 (2026-12-06, load 0.5).

Here the loop sets both bits on each thread for each block of elements it runs (and puts
the thread's own MXCSR back after it), and two kinds of flush become the identity: a
result's (`_xftzr32`: the arithmetic that made the value flushed it) and an operand's where
the op reads it only through float instructions (`_xftzd32`: add, multiply, an FMA, a
compare, exp, log, sqrt, rsqrt, logistic -- DAZ reads a subnormal as 0 there).  The other
operand flushes (`_xftz32`) stay: a max, a select or a bit view may pass an operand on
through no float instruction at all, where XLA's op reads it through one.  The bits are
XLA's: FTZ flushes a result whose value, rounded with an
unbounded exponent, is under the smallest normal -- so 0.99999994 * 2^-126 is 0, as in
XLA, where the software flush (after rounding to the subnormal grid: 2^-126) kept it.

Only loops made of ops whose code is float arithmetic, compares, selects and bit views
(`ELIGIBLE`), over f32 and bf16 values: a libm call (sin, pow, erf, ...) under these bits
would read and round its own intermediate values differently, and narrow formats round in
f64.  Only on x86-64 (the bits are SSE's).
"""
from __future__ import annotations

import hashlib
import platform
from pathlib import Path

from ...hlo.ir import Computation

# Ops whose templates are float arithmetic, compares, selects and bit operations only.
ELIGIBLE = frozenset({
    "parameter", "constant", "broadcast", "reshape", "copy", "add", "subtract", "multiply",
    "divide", "maximum", "minimum", "negate", "abs", "exponential", "tanh", "logistic",
    "sqrt", "rsqrt", "log", "select", "compare", "clamp", "convert", "and", "or", "not"})
_TYPES = frozenset({"f32", "bf16", "pred", "s32"})
# Elements a thread runs between setting the bits and putting its MXCSR back (two register
# writes, a few dozen cycles each: nothing against 16,384 elements).
BLOCK = 16384
_INTRINSICS = Path(__file__).with_name("gang_intrinsics.py")
_DIGEST = hashlib.sha256(_INTRINSICS.read_bytes()).hexdigest()[:16]
# (the cached loops' keys are their text: a change to ftz_forms.py changes them)
_FORMS_DIGEST = hashlib.sha256(_INTRINSICS.with_name("ftz_forms.py").read_bytes()).hexdigest()[:16]
# The module lines a hardware-flushed loop's text starts with: the MXCSR intrinsics, the
# result and float-read operand flushes bound to the identity for the functions defined in
# that module, and f32 exp, logistic, maximum and minimum as XLA's loops compute them under
# the bits (ftz_forms.py).
PRELUDE = ("from xlaplug.backends.cpu.gang_intrinsics import flush_on as _xflush_on, "
           f"mxcsr_set as _xmxcsr_set  # {_DIGEST}\n"
           "from xlaplug.backends.cpu.ftz_forms import xexp32_ftz as _xexp32, "
           "xlogistic32_ftz as _xlogistic32, xmaximum32_ftz as _xfmaxd32, "
           f"xminimum32_ftz as _xfmind32  # {_FORMS_DIGEST}\n"
           "_xftzr32 = _xkeep\n_xftzr64 = _xkeep\n_xftzd32 = _xkeep\n_xftzd64 = _xkeep\n")


def available() -> bool:
    """x86-64: the MXCSR and its FTZ and DAZ bits exist."""
    return platform.machine().lower() in ("x86_64", "amd64")


def eligible(comp: Computation) -> bool:
    """Whether fusion body `comp` may run under the bits (see the module docstring): its
    ops, and a row fusion's reduces with a reducer of such ops."""
    if not available():
        return False
    for ins in comp.instructions:
        if not ins.shape.is_array or ins.shape.element_type not in _TYPES:
            return False
        if ins.opcode == "reduce":
            if len(ins.operands) != 2 or not eligible(ins.attrs["to_apply"]):
                return False
        elif ins.opcode not in ELIGIBLE:
            return False
    return True


def wrap(lines: list[str], pad: str) -> list[str]:
    """`lines` (one block's work, at indent `pad`, each ending in a newline) between setting
    the bits and putting the thread's MXCSR back."""
    return [f"{pad}mx = _xflush_on()\n", *lines, f"{pad}_xmxcsr_set(mx)\n"]
