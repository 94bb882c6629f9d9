"""Elementwise CUDA kernels: one generated numba.cuda kernel per (opcode, operand types,
result type, attributes, broadcast pattern), compiled lazily and cached.

Each kernel body is the SCALAR_OPS expression (common/scalar_ops.py) of the op -- the
same templates scalar_jit inlines into numba loops on the CPU -- evaluated per element:

    def _ew(out, a0, a1):
        for i in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):   # grid-stride
            x0 = np.float32(a0[i])           # operand -> its compute type (f16 as f32)
            x1 = np.float32(a1[0])           # a broadcast scalar operand reads element 0
            out[i] = <expression over x0, x1>  # stored in the result's dtype

so the results have the CPU kernels' XLA:CPU semantics: integer divide/remainder/shift/power
rules, saturating float->int converts, flush-to-zero of f32/f64 (and complex) operands and
results where XLA:CPU flushes, f16 rounded after each op, TOTALORDER compares.  Transcendental
functions run in float64 (libdevice) and are rounded once, as the CPU kernels compute them.

Complex ops are SCALAR_OPS templates too: XLA's formulas, written once in
common/scalar_complex{,_fn}.py for every path.  Ops SCALAR_OPS does not express, or
expresses differently from the array kernels, have their own emitters here: f16 expm1 and
logistic (XLA evaluates them in f16 steps), reduce-precision (on the bit patterns),
stochastic-convert.  bitcast-convert is a
device-to-device copy through a reinterpreting view (any widths, bits exact); narrow types go
through their bit patterns (cuda/narrow.py).

Operands are device arrays of the result's dims, except the scalar operands select and
clamp may broadcast (a rank-0 predicate / bound).  bf16, f8/f4 and sub-byte integer operands
arrive as float32 / int8 / uint8 values (launch.device_dtype) -- their SCALAR_OPS compute
types -- and results are rounded to their type by the templates themselves.
"""
from __future__ import annotations

import numpy as np

from ...hlo import dtypes as D
from ...hlo.opcodes import EXPANDED_UNARY, ELEMENTWISE
from ..common.scalar_ops import SCALAR_COMPUTE_DTYPES, SCALAR_OPS, ScalarOpError, ScalarSig
from ..common.scalar_base import NARROW_FORMATS
from ..common.errors import ExecutionError
from ..registry import kernel
from .launch import (NARROW_TYPES, cached_kernel, device_empty, elementwise_launch, flat,
                     jit_source, simulating, stride_loop)
from .scalar_cuda import cuda_namespace

# opcodes.ELEMENTWISE less copy (data_movement.py's), map (reductions.py's) and erf-inv (no
# CUDA kernel); bitcast-convert and reduce-precision have kernels of their own below.
# (EXPANDED_UNARY ops run as their expansion: common/elementwise_expanded.py)
OPCODES = tuple(sorted(ELEMENTWISE - {"copy", "map", "erf-inv"} - EXPANDED_UNARY))
_GENERATED = tuple(op for op in OPCODES if op not in ("bitcast-convert", "reduce-precision"))

# Attributes that change the generated code.
_ATTRS = ("direction", "type", "exponent_bits", "mantissa_bits")

# The generated sources by kernel key, for compiled_kernels() (the kernels themselves are
# in launch.py's table).  Written under that table's lock, by _compiled's make.
_SOURCES: dict[tuple, str] = {}


def _compiled(key: tuple, label: str, source):
    """The "_ew" kernel of `source()` -> (its source, extra globals), compiled once per key
    in launch.py's table, with scalar_cuda's namespace as its globals."""
    def make():
        src, consts = source()
        ns = dict(cuda_namespace())
        ns.update(consts)
        _SOURCES[key] = src
        return jit_source(src, "_ew", ns, filename=f"<xlaplug cuda {label} {len(_SOURCES)}>")
    return cached_kernel(("elementwise",) + key, make)


# ---- expression emitters ---------------------------------------------------------------------

class _Emit:
    """Statements and the final expression of one element's computation."""

    def __init__(self):
        self.lines: list[str] = []
        self.consts: dict[str, object] = {}

    def const(self, value) -> str:
        name = f"_C{len(self.consts)}"
        self.consts[name] = value
        return name


def _f16_round(x: str) -> str:
    m, e, mx, k = NARROW_FORMATS["f16"]
    return f"_xround({x}, {m}, {e}, {mx!r}, {k})"


def _emit_f16_formula(op: str, x: str, em: _Emit) -> str:
    """XLA evaluates f16 expm1 and logistic in f16 arithmetic, each step rounded."""
    R = _f16_round
    if op == "logistic":
        em.lines.append(f"e = {R(f'np.exp(-np.float64({x}))')}")
        em.lines.append(f"s = {R('np.float64(1.0) + np.float64(e)')}")
        return R("np.float64(1.0) / np.float64(s)")
    em.lines.append(f"h = {R(f'np.float64({x}) * np.float64(0.5)')}")
    em.lines.append(f"e = {R(f'np.exp(np.float64({x}))')}")
    em.lines.append("if h == 0:\n    r = np.float32(" + x + ")\n"
                    "elif abs(" + x + ") > np.float32(0.5):\n    r = "
                    + R("np.float64(e) - np.float64(1.0)") + "\nelse:\n    r = "
                    + R(f"np.float64({R('np.tanh(np.float64(h))')}) * "
                        f"np.float64({R('np.float64(e) + np.float64(1.0)')})"))
    return "r"


def _wrap_int(t: str, x: str) -> str:
    """An int64 value -> t's compute type, wrapping to t's width."""
    w = D.bit_width(t)
    ct = "np." + SCALAR_COMPUTE_DTYPES[t].name
    if D.is_signed(t):
        return f"{ct}(np.int64({x}))" if w == 64 else f"{ct}(_xws(np.int64({x}), {w}))"
    return f"{ct}(np.uint64(np.int64({x})) & np.uint64({(1 << w) - 1}))"


def _emit_stochastic_convert(f: str, rt: str, t: str, x: str, r: str, em: _Emit) -> str:
    """cpu/elementwise_convert.stochastic_convert_array on one element."""
    if not (D.is_signed(t) and f in ("f16", "f32", "f64")):
        raise ScalarOpError(f"stochastic-convert from {f} to {t} is not supported (XLA "
                            "decomposes float -> signed integer only)")
    daz = {"f64": "_xftz64({0})", "f32": "_xftz32({0})"}.get(f, "{0}")
    S = SCALAR_OPS
    em.lines.append(f"xc = {daz.format(x)}")
    em.lines.append("neg = False if xc != xc else xc < 0")
    em.lines.append(f"ab = abs({x})")
    em.lines.append(f"tr = {S['floor'](ScalarSig(f, (f,))).format('ab')}")
    em.lines.append(f"frac = {S['subtract'](ScalarSig(f, (f, f))).format('ab', 'tr')}")
    ft = "f32" if f == "f16" else f
    ct = "np." + SCALAR_COMPUTE_DTYPES[ft].name
    scale = em.const(SCALAR_COMPUTE_DTYPES[ft].type(2.0 ** D.bit_width(rt)))
    em.lines.append(f"fixed = {S['multiply'](ScalarSig(ft, (ft, ft))).format(f'{ct}(frac)', scale)}")
    em.lines.append(f"up = np.uint64({r}) < np.uint64({S['convert'](ScalarSig(rt, (ft,))).format('fixed')})")
    em.lines.append(f"ti = np.int64({S['convert'](ScalarSig(t, (f,))).format('tr')})")
    em.lines.append(f"ti = np.int64({_wrap_int(t, 'ti + np.int64(1) if up else ti')})")
    em.lines.append("res = -ti if neg else ti")
    w = D.bit_width(t)
    with np.errstate(all="ignore"):
        lo = float(np.asarray(-(1 << (w - 1))).astype(D.to_dtype(f)))
        hi = float(np.asarray((1 << (w - 1)) - 1).astype(D.to_dtype(f)))
    lo_c, hi_c = em.const(np.float64(lo)), em.const(np.float64(hi))
    em.lines.append(f"if np.float64(xc) <= {lo_c}:\n    res = np.int64({-(1 << (w - 1))})")
    em.lines.append(f"if np.float64(xc) >= {hi_c}:\n    res = np.int64({(1 << (w - 1)) - 1})")
    return _wrap_int(t, "res")


def _emit(op: str, result: str, operands: tuple[str, ...], attrs: dict, xs: list[str],
          em: _Emit) -> str:
    """The expression of `op` over operand names xs (statements go to em.lines)."""
    t0 = operands[0] if operands else result
    if op in ("exponential-minus-one", "logistic") and t0 == "f16":
        return _emit_f16_formula(op, xs[0], em)
    if op == "is-finite" and t0 not in ("f16", "f32", "f64"):
        raise ScalarOpError(f"is-finite is defined on real floats, not {t0}")
    if op == "stochastic-convert":
        return _emit_stochastic_convert(operands[0], operands[1], result, xs[0], xs[1], em)
    emit = SCALAR_OPS.get(op)
    if emit is None:
        raise ScalarOpError(f"no scalar form for {op}")
    return emit(ScalarSig(result, operands, attrs)).format(*xs)


# ---- kernel generation -----------------------------------------------------------------------

def _load(t: str, a: str, idx: str) -> str:
    if t == "f16":
        return f"np.float32({a}[{idx}])"
    return f"{a}[{idx}]"


def kernel_source(op: str, operands: tuple[str, ...], result: str, attrs: dict,
                  scalar: tuple[bool, ...], sim: bool | None = None) -> tuple[str, dict]:
    """(Python source of kernel `_ew(out, a0, a1, ...)`, constants it reads)."""
    sim = simulating() if sim is None else sim
    em = _Emit()
    xs = [f"x{k}" for k in range(len(operands))]
    expr = _emit(op, result, operands, attrs, xs, em)
    body = [f"{x} = {_load(t, f'a{k}', '0' if s else 'i')}"
            for k, (x, t, s) in enumerate(zip(xs, operands, scalar))]
    for ln in em.lines:
        body.extend(ln.split("\n"))
    body.append(f"out[i] = {expr}")
    args = "".join(f", a{k}" for k in range(len(operands)))
    head = [f"def _ew(out{args}):"]
    if sim:  # numpy scalars warn on wrap-around / NaN: not a GPU's behaviour
        head.append("    with _np_real.errstate(all='ignore'):")
    head.append(" " * (4 * len(head)) + stride_loop("out.shape[0]"))
    ind = " " * (4 * len(head))
    return "\n".join(head + [ind + ln for ln in body]) + "\n", em.consts


def _attr_key(attrs: dict) -> tuple:
    return tuple((k, str(attrs[k])) for k in _ATTRS if attrs.get(k) is not None)


def get_kernel(op: str, operands: tuple[str, ...], result: str, attrs: dict,
               scalar: tuple[bool, ...]):
    """The compiled (lazily, on first launch) kernel for this signature; cached."""
    def source():
        src, consts = kernel_source(op, operands, result, attrs, scalar)
        return src, {**consts, "_np_real": np}
    return _compiled((op, operands, result, _attr_key(attrs), scalar), op, source)


def _size(shape) -> int:
    return int(np.prod(shape)) if len(shape) else 1


def _signature(ins):
    return (tuple(o.shape.element_type for o in ins.operands), ins.shape.element_type)


@kernel(*_GENERATED, device="cuda")
def _elementwise(ins, args, ctx):
    operands, result = _signature(ins)
    out = device_empty(ins.shape)
    n = _size(out.shape)
    if n == 0:
        return out
    scalar = tuple(_size(a.shape) == 1 and n != 1 for a in args)
    try:
        k = get_kernel(ins.opcode, operands, result, dict(ins.attrs), scalar)
    except ScalarOpError as e:
        raise ExecutionError(f"{ins.opcode} (instruction '{ins.name}') on "
                             f"{', '.join(operands)} -> {result} is not supported on cuda: "
                             f"{e}") from None
    return elementwise_launch(k, out, *args)


# ---- bit-pattern ops -------------------------------------------------------------------------

@kernel("bitcast-convert", device="cuda")
def _bitcast_convert(ins, args, ctx):
    """Reinterpret the bytes: a view of the operand in the result's dtype, copied on the
    device (widths may differ: the minor dimension splits or merges, as on the CPU)."""
    from . import narrow
    src_t, dst_t = ins.operands[0].shape.element_type, ins.shape.element_type
    if _size(args[0].shape) == 0:
        return device_empty(ins.shape)
    sub_byte = [t for t in (src_t, dst_t) if D.bit_width(t) < 8]
    if sub_byte and D.bit_width(src_t) != D.bit_width(dst_t):
        raise ExecutionError(f"bitcast-convert '{ins.name}': {src_t} -> {dst_t} packs "
                             "sub-byte elements, which is not supported on cuda")
    bits = narrow.to_bits(args[0], src_t) if src_t in NARROW_TYPES else flat(args[0])
    if dst_t in NARROW_TYPES:
        return narrow.from_bits(bits.view(narrow.bits_dtype(dst_t)), dst_t, ins.shape.dims)
    out = device_empty(ins.shape)
    flat(out).copy_to_device(bits.view(out.dtype))
    return out


_RP = {"f16": (16, 5, 10), "f32": (32, 8, 23), "f64": (64, 11, 52)}


def _reduce_precision_source(n: int, e: int, m: int, eb: int, mb: int) -> str:
    lines = ["def _ew(out, a0):", "    " + stride_loop("out.shape[0]"),
             f"        out[i] = np.uint{n}(_xreduce_prec(np.uint64(a0[i]), {n}, {e}, {m}, "
             f"{eb}, {mb}))"]
    return "\n".join(lines) + "\n"


@kernel("reduce-precision", device="cuda")
def _reduce_precision(ins, args, ctx):
    """XLA's ReducePrecision on the operand's bit patterns (unsigned views), NaNs kept."""
    t = ins.shape.element_type
    if t in NARROW_TYPES and t in D.FLOAT_TYPES:
        # Values are float32: reducing their float32 patterns rounds the same real
        # numbers; the result is then rounded back to t (cuda/narrow.py).
        t = "f32"
    if t not in _RP:
        raise ExecutionError(f"reduce-precision (instruction '{ins.name}') on {t} is not "
                             "supported on cuda")
    n, e, m = _RP[t]
    eb, mb = int(ins.attrs["exponent_bits"]), int(ins.attrs["mantissa_bits"])
    k = _compiled(("reduce-precision", t, eb, mb), f"reduce-precision {t}",
                  lambda: (_reduce_precision_source(n, e, m, eb, mb), {}))
    out = device_empty(ins.shape)
    if _size(out.shape):
        u = np.dtype(f"uint{n}")
        elementwise_launch(k, flat(out).view(u), flat(args[0]).view(u))
    return out


def compiled_kernels() -> dict[tuple, str]:
    """The sources of the kernels compiled so far, by signature key (for diagnostics)."""
    return dict(_SOURCES)  # (one C-level copy under the GIL: no insertion lands mid-way)


__all__ = ["OPCODES", "compiled_kernels", "get_kernel", "kernel_source"]
