"""Shape rules of the random-number opcodes (rng, rng-bit-generator, rng-get-and-update-state),
fft, the linear-algebra ones (cholesky, triangular-solve) and batch normalization."""
from __future__ import annotations

from .. import dtypes
from ..ir import Shape
from .common import (_array, _attr, _err, _int_attr, _ints_attr, _is_scalar, _j, _ops, _shape,
                     dim_eq, is_complex, is_floating, is_integral, rule, s, same_dims,
                     same_type_ignoring_fp)


@rule("rng-get-and-update-state")
def _rng_state(ins):
    return _shape("u64", (2,))


@rule("rng")
def _rng(ins):
    a, b = _ops(ins)
    if not _is_scalar(a) or not _is_scalar(b):
        raise _err(f"rng operands must be scalars, got {s(a)} and {s(b)}")
    if a.element_type != b.element_type:
        raise _err(f"rng operands must have the same element type, got {s(a)} and {s(b)}")
    t = a.element_type
    dist = str(_attr(ins, "distribution"))
    if dist == "rng_uniform":
        if not (is_floating(t) or is_integral(t) or t == "pred"):
            raise _err(f"rng_uniform needs floating-point, integral or pred operands, got {t}")
    elif dist == "rng_normal":
        if not is_floating(t):
            raise _err(f"rng_normal needs floating-point operands, got {t}")
    else:
        raise _err(f"unknown rng distribution {dist}")
    if not ins.shape.is_array:
        raise _err(f"rng result must be an array, declared {s(ins.shape)}")
    return Shape(t, ins.shape.dims, ins.shape.dynamic)


@rule("rng-bit-generator")
def _rng_bit_generator(ins):
    state = _array(ins.operands[0].shape, "the state of rng-bit-generator")
    out = ins.shape
    if not out.is_tuple:
        return out
    if len(out.tuple_shapes) != 2:
        raise _err(f"rng-bit-generator must return a (state, bits) tuple, declared {s(out)}")
    bits = out.tuple_shapes[1]
    if not bits.is_array or not (is_integral(bits.element_type) or
                                 is_floating(bits.element_type)):
        raise _err(f"rng-bit-generator bits must be an integral array, declared {s(bits)}")
    return Shape.tuple_of([state, bits])


@rule("fft")
def _fft(ins):
    op = _array(ins.operands[0].shape, "the operand of fft")
    kind = str(_attr(ins, "fft_type"))
    length = _ints_attr(ins, "fft_length")
    n = len(length)
    if n < 1 or n > 3:
        raise _err(f"fft_length must have 1 to 3 entries, has {n}")
    t = op.element_type
    if op.rank < n:
        raise _err(f"fft of rank {n} needs an operand of at least rank {n}, got {s(op)}")
    inner = op.dims[op.rank - n:]
    if kind in ("FFT", "IFFT"):
        if not is_complex(t):
            raise _err(f"{kind} needs a complex operand, got {s(op)}")
        return op
    if kind == "RFFT":
        if t not in ("f32", "f64"):
            raise _err(f"RFFT needs an f32 or f64 operand, got {s(op)}")
        if not all(dim_eq(a, b) for a, b in zip(inner, length)):
            raise _err(f"RFFT innermost dimensions of {s(op)} must equal fft_length "
                       f"{{{_j(length)}}}")
        dims = list(op.dims)
        if length[-1] != 0:
            dims[-1] = length[-1] // 2 + 1
        return _shape("c64" if t == "f32" else "c128", dims, op.dynamic)
    if kind == "IRFFT":
        if not is_complex(t):
            raise _err(f"IRFFT needs a complex operand, got {s(op)}")
        if not all(dim_eq(a, b) for a, b in zip(inner[:-1], length[:-1])):
            raise _err(f"IRFFT innermost dimensions of {s(op)} (all but the last) must equal "
                       f"fft_length {{{_j(length)}}}")
        last = op.dims[-1]
        if (last != 0 or length[-1] != 0) and not dim_eq(last, length[-1] // 2 + 1):
            raise _err(f"IRFFT last dimension of {s(op)} must be fft_length/2+1 = "
                       f"{length[-1] // 2 + 1}")
        dims = list(op.dims)
        dims[-1] = length[-1]
        return _shape(dtypes.complex_component(t), dims, op.dynamic)
    raise _err(f"unknown fft_type {kind}")


@rule("cholesky")
def _cholesky(ins):
    a = _array(ins.operands[0].shape, "the operand of cholesky")
    if not (is_floating(a.element_type) or is_complex(a.element_type)):
        raise _err(f"cholesky needs a floating-point or complex operand, got {s(a)}")
    if a.rank < 2:
        raise _err(f"cholesky operand must have rank >= 2, got {s(a)}")
    if not dim_eq(a.dims[-1], a.dims[-2]):
        raise _err(f"cholesky operand must be square in its two minor dimensions, got {s(a)}")
    return a


@rule("triangular-solve")
def _triangular_solve(ins):
    a, b = _ops(ins)
    _array(a, "the matrix of triangular-solve")
    _array(b, "the right-hand side of triangular-solve")
    if not (is_floating(a.element_type) or is_complex(a.element_type)) or \
            a.element_type != b.element_type:
        raise _err(f"triangular-solve needs identical floating-point or complex element types, "
                   f"got {s(a)} and {s(b)}")
    if a.rank < 2:
        raise _err(f"triangular-solve matrix must have rank >= 2, got {s(a)}")
    if b.rank != a.rank:
        raise _err(f"triangular-solve operands must have the same rank, got {s(a)} and {s(b)}")
    if not dim_eq(a.dims[-1], a.dims[-2]):
        raise _err(f"triangular-solve matrix must be square in its two minor dimensions, got "
                   f"{s(a)}")
    left = bool(ins.attrs.get("left_side", False))
    if not dim_eq(a.dims[-1], b.dims[-2 if left else -1]):
        raise _err(f"triangular-solve shared dimension of {s(a)} and {s(b)} does not match "
                   f"(left_side={'true' if left else 'false'})")
    if not all(dim_eq(x, y) for x, y in zip(a.dims[:-2], b.dims[:-2])):
        raise _err(f"triangular-solve batch dimensions differ: {s(a)} and {s(b)}")
    t = str(ins.attrs.get("transpose_a", "NO_TRANSPOSE"))
    if t not in ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"):
        raise _err(f"triangular-solve transpose_a must be NO_TRANSPOSE, TRANSPOSE or ADJOINT, "
                   f"got {t}")
    return b


def _bn_common(ins, operand: Shape, others: list[tuple[Shape, str]]) -> int:
    f = _int_attr(ins, "feature_index")
    _array(operand, f"the operand of {ins.opcode}")
    if f < 0 or f >= operand.rank:
        raise _err(f"{ins.opcode} feature_index {f} is out of range for {s(operand)}")
    if not is_floating(operand.element_type):
        raise _err(f"{ins.opcode} needs a floating-point operand, got {s(operand)}")
    n = operand.dims[f]
    for x, what in others:
        _array(x, f"the {what} of {ins.opcode}")
        if x.rank != 1:
            raise _err(f"{ins.opcode} {what} must have rank 1, got {s(x)}")
        if not same_type_ignoring_fp(x.element_type, operand.element_type):
            raise _err(f"{ins.opcode} {what} {s(x)} and operand {s(operand)} have different "
                       f"element types")
        if not dim_eq(x.dims[0], n):
            raise _err(f"{ins.opcode} {what} {s(x)} must have the feature count {n}")
    return n


@rule("batch-norm-training")
def _bn_training(ins):
    op, scale, offset = _ops(ins)
    n = _bn_common(ins, op, [(scale, "scale"), (offset, "offset")])
    feat = _shape(op.element_type, (n,))
    return Shape.tuple_of([op, feat, feat])


@rule("batch-norm-inference")
def _bn_inference(ins):
    op, scale, offset, mean, var = _ops(ins)
    _bn_common(ins, op, [(scale, "scale"), (offset, "offset"), (mean, "mean"),
                         (var, "variance")])
    return op


@rule("batch-norm-grad")
def _bn_grad(ins):
    op, scale, mean, var, grad = _ops(ins)
    n = _bn_common(ins, op, [(scale, "scale"), (mean, "mean"), (var, "variance")])
    _array(grad, "the output gradient of batch-norm-grad")
    if not same_dims(grad, op) or not same_type_ignoring_fp(grad.element_type, op.element_type):
        raise _err(f"batch-norm-grad output gradient {s(grad)} must match the operand {s(op)}")
    feat = _shape(op.element_type, (n,))
    return Shape.tuple_of([op, feat, feat])
