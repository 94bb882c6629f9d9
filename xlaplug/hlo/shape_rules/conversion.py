"""Shape rules of the element-type conversions: convert, bitcast-convert, stochastic-convert,
reduce-precision, and bitcast (any shape of the same byte size)."""
from __future__ import annotations

from .. import dtypes
from .common import (_array, _err, _int_attr, _ops, _shape, _with_type, bit_width, dim_eq,
                     has_unbounded, is_complex, is_floating, rule, s, same_dims)


@rule("convert")
def _convert(ins):
    op = _array(ins.operands[0].shape, "the operand of convert")
    if not ins.shape.is_array:
        raise _err(f"convert result must be an array, declared {s(ins.shape)}")
    return _with_type(op, ins.shape.element_type)


@rule("bitcast-convert")
def _bitcast_convert(ins):
    op = ins.operands[0].shape
    new = ins.shape.element_type
    if not op.is_array or not ins.shape.is_array:
        raise _err(f"bitcast-convert needs arrays, got {s(op)} to {s(ins.shape)}")
    old = op.element_type
    if is_complex(old) != is_complex(new):
        raise _err(f"bitcast-convert between complex and real types: {s(op)} to {new}")
    a, b = bit_width(old), bit_width(new)
    if max(a, b) % min(a, b):
        raise _err(f"bitcast-convert between types of indivisible bit widths: {old} ({a} bits) "
                   f"to {new} ({b} bits)")
    ratio = max(a, b) // min(a, b)
    if a > b:
        return _shape(new, op.dims + (ratio,), op.dynamic + (False,))
    if a < b:
        if op.rank < 1 or not dim_eq(op.dims[-1], ratio):
            raise _err(f"bitcast-convert from {old} to {new} needs a last dimension of {ratio}, "
                       f"operand is {s(op)}")
        return _shape(new, op.dims[:-1], op.dynamic[:-1])
    return _with_type(op, new)


@rule("stochastic-convert")
def _stochastic_convert(ins):
    op, rnd = _ops(ins)
    _array(op, "the operand of stochastic-convert")
    _array(rnd, "the random operand of stochastic-convert")
    if rnd.element_type not in dtypes.UNSIGNED_TYPES:
        raise _err(f"stochastic-convert random bits must be unsigned integers, got {s(rnd)}")
    if not is_floating(op.element_type):
        raise _err(f"stochastic-convert needs a floating-point operand, got {s(op)}")
    if bit_width(op.element_type) != bit_width(rnd.element_type):
        raise _err(f"stochastic-convert random bits {s(rnd)} must be as wide as the operand {s(op)}")
    if not same_dims(op, rnd):
        raise _err(f"stochastic-convert operand {s(op)} and random bits {s(rnd)} differ in shape")
    return _with_type(op, ins.shape.element_type)


@rule("reduce-precision")
def _reduce_precision(ins):
    op = _array(ins.operands[0].shape, "the operand of reduce-precision")
    if not is_floating(op.element_type):
        raise _err(f"reduce-precision needs a floating-point operand, got {s(op)}")
    e = _int_attr(ins, "exponent_bits")
    m = _int_attr(ins, "mantissa_bits")
    if e < 1:
        raise _err(f"reduce-precision exponent_bits must be >= 1, got {e}")
    if m < 0:
        raise _err(f"reduce-precision mantissa_bits must be >= 0, got {m}")
    return op


@rule("bitcast")
def _bitcast(ins):
    op = ins.operands[0].shape
    if not has_unbounded(op) and not has_unbounded(ins.shape) and \
            op.byte_size() != ins.shape.byte_size():
        raise _err(f"bitcast changes the byte size: operand {s(op)} is {op.byte_size()} bytes, "
                   f"declared {s(ins.shape)} is {ins.shape.byte_size()} bytes")
    return ins.shape
