"""Shape rules of dot and convolution, and the window arithmetic (`window_output_dims`) that
reduce-window and select-and-scatter share."""
from __future__ import annotations

from ..attr_types import ConvDims, Window
from ..ir import UNBOUNDED, Shape
from .common import (_array, _attr, _check_range, _check_unique, _err, _int_attr, _ints_attr,
                     _merge_dim, _ops, _shape, bit_width, dim_eq, higher_precision, is_floating,
                     rule, s)


def _upcast(from_type: str, preferred: str, opcode: str) -> str:
    if preferred != from_type and not is_floating(from_type) and \
            bit_width(preferred) < bit_width(from_type):
        raise _err(f"{opcode} result type {preferred} must not be narrower than the operand "
                   f"type {from_type}")
    return preferred


@rule("dot")
def _dot(ins):
    if "sparsity" in ins.attrs:
        return ins.shape  # sparse dot: metadata operands, compressed lhs -- trusted
    lhs, rhs = _ops(ins)
    _array(lhs, "the lhs of dot")
    _array(rhs, "the rhs of dot")
    lc = _ints_attr(ins, "lhs_contracting_dims", ())
    rc = _ints_attr(ins, "rhs_contracting_dims", ())
    lb = _ints_attr(ins, "lhs_batch_dims", ())
    rb = _ints_attr(ins, "rhs_batch_dims", ())
    _check_range(lc + lb, lhs.rank, lambda: f"dot lhs dimension (lhs is {s(lhs)})")
    _check_range(rc + rb, rhs.rank, lambda: f"dot rhs dimension (rhs is {s(rhs)})")
    _check_unique(lc + lb, "dot lhs contracting and batch dimensions")
    _check_unique(rc + rb, "dot rhs contracting and batch dimensions")
    if len(lc) != len(rc):
        raise _err(f"dot has {len(lc)} lhs but {len(rc)} rhs contracting dimensions")
    for a, b in zip(lc, rc):
        if not dim_eq(lhs.dims[a], rhs.dims[b]):
            raise _err(f"dot contracting dimensions differ in size: lhs {s(lhs)} dimension {a} "
                       f"vs rhs {s(rhs)} dimension {b}")
    if len(lb) != len(rb):
        raise _err(f"dot has {len(lb)} lhs but {len(rb)} rhs batch dimensions")
    for a, b in zip(lb, rb):
        if not dim_eq(lhs.dims[a], rhs.dims[b]):
            raise _err(f"dot batch dimensions differ in size: lhs {s(lhs)} dimension {a} vs "
                       f"rhs {s(rhs)} dimension {b}")
    dims = [_merge_dim(lhs.dims[a], rhs.dims[b]) for a, b in zip(lb, rb)]
    dyn = [lhs.dynamic[a] for a in lb]
    for x, skip in ((lhs, set(lc) | set(lb)), (rhs, set(rc) | set(rb))):
        for i in range(x.rank):
            if i not in skip:
                dims.append(x.dims[i])
                dyn.append(x.dynamic[i])
    etype = higher_precision(lhs.element_type, rhs.element_type)
    if ins.shape is not None and ins.shape.is_array:  # the declared type is dot's "preferred element type"
        etype = _upcast(etype, ins.shape.element_type, "dot")
    return _shape(etype, dims, dyn)


@rule("scaled-dot")
def _scaled_dot(ins):
    """scaled-dot(lhs, lhs_scale, rhs, rhs_scale): XLA infers the dot of lhs and rhs (the
    scales do not change the shape) and takes the declared element type as given."""
    _ops(ins)  # the operand count
    plain = type(ins)(ins.name, "dot", None)
    plain.operands, plain.attrs = [ins.operands[0], ins.operands[2]], ins.attrs
    out = _dot(plain)
    if ins.shape is not None and ins.shape.is_array:
        return _shape(ins.shape.element_type, out.dims, out.dynamic)
    return out


def _dilated(bound: int, dilation: int) -> int:
    if bound == UNBOUNDED:
        return UNBOUNDED
    return 0 if bound == 0 else (bound - 1) * dilation + 1


def _strided(bound: int, window: int, stride: int) -> int:
    if window > bound:
        return 0
    return (bound - window) // stride + 1


def window_output_dims(base: Shape, window: Window, what: str) -> list[int]:
    if len(window.dims) != base.rank:
        raise _err(f"{what} window has {len(window.dims)} dimensions but the operand {s(base)} "
                   f"has rank {base.rank}")
    out = []
    for i, w in enumerate(window.dims):
        if w.size <= 0:
            raise _err(f"{what} window size {w.size} in dimension {i} must be positive")
        if w.stride <= 0:
            raise _err(f"{what} window stride {w.stride} in dimension {i} must be positive")
        if w.lhs_dilate < 1 or w.rhs_dilate < 1:
            raise _err(f"{what} window dilation in dimension {i} must be >= 1")
        if base.dims[i] == UNBOUNDED:
            out.append(UNBOUNDED)
            continue
        padded = w.pad_lo + _dilated(base.dims[i], w.lhs_dilate) + w.pad_hi
        out.append(_strided(padded, _dilated(w.size, w.rhs_dilate), w.stride))
    return out


@rule("convolution")
def _convolution(ins):
    lhs, rhs = _ops(ins)
    _array(lhs, "the lhs of convolution")
    _array(rhs, "the rhs of convolution")
    fgc = _int_attr(ins, "feature_group_count", 1)
    bgc = _int_attr(ins, "batch_group_count", 1)
    if fgc <= 0:
        raise _err(f"feature_group_count must be positive, got {fgc}")
    if bgc <= 0:
        raise _err(f"batch_group_count must be positive, got {bgc}")
    if fgc > 1 and bgc > 1:
        raise _err(f"feature_group_count ({fgc}) and batch_group_count ({bgc}) cannot both "
                   f"exceed 1")
    dn = _attr(ins, "dim_labels")
    if not isinstance(dn, ConvDims):
        raise _err(f"attribute 'dim_labels' must be convolution dimension labels, got {dn}")
    window = _attr(ins, "window", Window())
    if not isinstance(window, Window):
        raise _err(f"attribute 'window' must be a window, got {window}")
    nsp = len(dn.input_spatial)
    if len(window.dims) != nsp:
        raise _err(f"convolution window has {len(window.dims)} dimensions but dim_labels "
                   f"'{dn.text}' have {nsp} spatial dimensions")
    nd = nsp + 2
    if lhs.rank != nd:
        raise _err(f"convolution lhs {s(lhs)} must have rank {nd} (dim_labels '{dn.text}')")
    if rhs.rank != nd:
        raise _err(f"convolution rhs {s(rhs)} must have rank {nd} (dim_labels '{dn.text}')")
    in_sp = [lhs.dims[d] for d in dn.input_spatial]
    in_f = lhs.dims[dn.input_feature]
    in_b = lhs.dims[dn.input_batch]
    k_sp = [rhs.dims[d] for d in dn.kernel_spatial]
    k_in = rhs.dims[dn.kernel_input_feature]
    k_out = rhs.dims[dn.kernel_output_feature]
    if k_out != UNBOUNDED and k_out % bgc:
        raise _err(f"convolution output features {k_out} ({s(rhs)}) must be a multiple of "
                   f"batch_group_count {bgc}")
    if in_f != UNBOUNDED and (in_f % fgc or not dim_eq(in_f // fgc, k_in)):
        raise _err(f"convolution input features {in_f} ({s(lhs)}) divided by "
                   f"feature_group_count {fgc} must equal the kernel input features {k_in} "
                   f"({s(rhs)})")
    if k_out != UNBOUNDED and k_out % fgc:
        raise _err(f"convolution output features {k_out} ({s(rhs)}) must be a multiple of "
                   f"feature_group_count {fgc}")
    if in_b != UNBOUNDED and in_b % bgc:
        raise _err(f"convolution batch {in_b} ({s(lhs)}) must be a multiple of "
                   f"batch_group_count {bgc}")
    sizes = [w.size for w in window.dims]
    if len(k_sp) != len(sizes) or not all(dim_eq(a, b) for a, b in zip(k_sp, sizes)):
        raise _err(f"convolution window sizes {'x'.join(map(str, sizes))} do not match the "
                   f"kernel spatial dimensions {'x'.join(map(str, k_sp))} ({s(rhs)})")
    out_sp = window_output_dims(_shape(lhs.element_type, in_sp), window, "convolution")
    dims = [0] * nd
    dyn = [False] * nd
    dims[dn.output_batch] = UNBOUNDED if in_b == UNBOUNDED else in_b // bgc
    dims[dn.output_feature] = k_out
    dyn[dn.output_batch] = lhs.dynamic[dn.input_batch]
    for i, d in enumerate(dn.output_spatial):
        dims[d] = out_sp[i]
        dyn[d] = lhs.dynamic[dn.input_spatial[i]] or rhs.dynamic[dn.kernel_spatial[i]]
    etype = higher_precision(lhs.element_type, rhs.element_type)
    if ins.shape is not None and ins.shape.is_array:
        etype = _upcast(etype, ins.shape.element_type, "convolution")
    return _shape(etype, dims, dyn)
