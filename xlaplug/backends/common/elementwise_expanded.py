"""acos, acosh, asin, asinh, atanh, cosh, sinh: run as the expansion XLA computes for them.

XLA:CPU has no code for these opcodes: an HLO module using them fails to compile there
("UNIMPLEMENTED: acosh", jaxlib 0.10.2).  What XLA does compute is jax's `jnp.arccosh` and
friends, which reach it as `chlo.acosh` and are expanded, before HLO, into core ops.  These
kernels run that same expansion (learned from the HLO XLA prints for it, per element type)
as a small computation through the base ops' own kernels, so the results are those of our
`log`, `sqrt`, `atan2`, ... -- each already checked against XLA -- composed as XLA composes
them.  The same kernels serve the CPU and CUDA (the computation runs on the device).

The expansions, for real floating-point x (M the largest finite value of the type, ln2 and
thresholds rounded to the type; cosh and sinh of f16/bf16 are computed in f32):
  acos(x)  = atan2(sqrt((1 - x) * (x + 1)), x)
  asin(x)  = 2 atan2(x, 1 + sqrt((1 - x) * (x + 1)))      (as atan2 + atan2)
  acosh(x) = x >= M/2 ? log(x) + ln2 : log1p(sqrt(x - 1) * (sqrt(x + 1) + sqrt(x - 1)))
  asinh(x) = sign(x) * (|x| >= sqrt(M) ? log|x| + ln2
                                       : log1p(|x| + x^2 / (sqrt(x^2 + 1) + 1)))
  atanh(x) = |x| > 1 ? nan : (log1p(x) - log1p(-x)) * 0.5
  cosh(x)  = exp(x - ln2) + exp(-ln2 - x)
  sinh(x)  = |x| < 1 ? (e + e / (e + 1)) * 0.5 with e = expm1(x)
                     : exp(x - ln2) - exp(-ln2 - x)
Complex operands are not supported (a clear error naming the opcode).
"""
from __future__ import annotations

import math
import threading

import numpy as np

from ...hlo import dtypes as D
from ...hlo.attr_types import Word
from ...hlo.builder import Builder
from ...hlo.ir import Computation, Shape
from .structural import kernel  # both devices: the expansion runs where the values are
from .errors import ExecutionError

OPCODES = ("acos", "acosh", "asin", "asinh", "atanh", "cosh", "sinh")
_LOCK = threading.Lock()
_COMPS: dict[tuple, Computation] = {}


def _largest(t: str) -> float:
    import ml_dtypes
    return float(ml_dtypes.finfo(D.to_dtype(t)).max)


def _expand(opcode: str, b: Builder, x, t: str):
    def c(v):
        return b.constant(np.asarray(v).astype(D.to_dtype(t)), t)

    def cmp(a, k, direction):
        return b.compare(a, k, direction=Word(direction))

    ln2 = math.log(2.0)
    if opcode in ("acos", "asin"):
        one = c(1)
        root = b.sqrt(b.multiply(b.subtract(one, x), b.add(x, one)))
        if opcode == "acos":
            return b.atan2(root, x)
        half = b.atan2(x, b.add(root, one))
        return b.add(half, half)
    if opcode == "acosh":
        one = c(1)
        big = cmp(x, c(_largest(t) / 2), "GE")
        below = b.sqrt(b.subtract(x, one))
        small = b.log_plus_one(b.multiply(below, b.add(b.sqrt(b.add(x, one)), below)))
        return b.select(big, b.add(b.log(x), c(ln2)), small)
    if opcode == "asinh":
        one = c(1)
        a = b.abs(x)
        big = cmp(a, c(math.sqrt(_largest(t))), "GE")
        sq = b.multiply(a, a)
        small = b.log_plus_one(b.add(a, b.divide(sq, b.add(b.sqrt(b.add(sq, one)), one))))
        return b.multiply(b.sign(x), b.select(big, b.add(b.log(a), c(ln2)), small))
    if opcode == "atanh":
        out = b.multiply(b.subtract(b.log_plus_one(x), b.log_plus_one(b.negate(x))), c(0.5))
        return b.select(cmp(b.abs(x), c(1), "GT"), c(np.nan), out)
    # cosh, sinh: f16 and bf16 go through f32, as XLA's expansion converts them.
    wide = t if t in ("f32", "f64") else "f32"
    y = x if wide == t else b.convert(x, wide)

    def cw(v):
        return b.constant(np.asarray(v).astype(D.to_dtype(wide)), wide)

    mln2 = cw(-ln2)
    up, down = b.exponential(b.add(y, mln2)), b.exponential(b.subtract(mln2, y))
    if opcode == "cosh":
        out = b.add(up, down)
    else:
        one = cw(1)
        e = b.exponential_minus_one(y)
        near = b.multiply(b.add(e, b.divide(e, b.add(e, one))), cw(0.5))
        out = b.select(cmp(b.abs(y), one, "LT"), near, b.subtract(up, down))
    return out if wide == t else b.convert(out, t)


def expansion(opcode: str, shape: Shape) -> Computation:
    """The computation `opcode` runs for operands of `shape` (cached per opcode and shape)."""
    key = (opcode, shape.element_type, shape.dims)
    with _LOCK:
        comp = _COMPS.get(key)
        if comp is None:
            b = Builder(f"{opcode}.expanded")
            x = b.parameter(0, Shape.array(shape.element_type, shape.dims), name="x")
            root = _expand(opcode, b, x, shape.element_type)
            comp = Computation(f"{opcode}.expanded", list(b.instructions), root)
            _COMPS[key] = comp
    return comp


@kernel(*OPCODES)
def _expanded(ins, args, ctx):
    t = ins.operands[0].shape.element_type
    if t not in ("f16", "bf16", "f32", "f64"):
        raise ExecutionError(f"{ins.opcode} on {t} is not supported (xlaplug runs it for f16, "
                             f"bf16, f32 and f64; XLA:CPU does not run this opcode at all)")
    return ctx.run(expansion(ins.opcode, ins.operands[0].shape), args)
