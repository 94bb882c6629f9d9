"""Shape rules of the opcodes that apply a computation to elements: reduce, reduce-window,
select-and-scatter, sort, topk, map; and XLA's reducer check (`verify_reducer`)."""
from __future__ import annotations

from ..attr_types import Window
from ..ir import UNBOUNDED, Computation, Shape
from .common import (_array, _attr, _check_range, _check_unique, _comp, _err, _int_attr, _ints_attr,
                     _is_scalar, _j, _one_dim_attr, _ops, _scalar, _shape, compatible,
                     program_shape, rule, s, same_dims, same_type_ignoring_fp)
from .dot_conv import window_output_dims


def verify_reducer(comp: Computation, inits: list[Shape], input_types: list[str],
                   what: str) -> list[Shape]:
    """XLA's VerifyReducerShape; returns the accumulator shapes."""
    n = len(inits)
    params, result = program_shape(comp)
    if len(params) != 2 * n:
        raise _err(f"{what} computation '{comp.name}' must take {2 * n} parameters, but takes "
                   f"{len(params)}")
    if result.is_tuple:
        accs = list(result.tuple_shapes)
        if len(accs) != n:
            raise _err(f"{what} computation '{comp.name}' must return a tuple of {n} scalars, "
                       f"returns {s(result)}")
    else:
        if n != 1:
            raise _err(f"{what} computation '{comp.name}' must return a tuple of {n} scalars, "
                       f"returns {s(result)}")
        accs = [result]
    for a in accs:
        if not _is_scalar(a):
            raise _err(f"{what} computation '{comp.name}' must return scalars, returns {s(result)}")
    for i in range(n):
        if not compatible(accs[i], params[i]):
            raise _err(f"{what} computation '{comp.name}' parameter {i} is {s(params[i])} but "
                       f"its result {i} is {s(accs[i])}")
        if not compatible(accs[i], inits[i], ignore_fp=True):
            raise _err(f"{what} computation '{comp.name}' result {i} is {s(accs[i])} but the "
                       f"init value {i} is {s(inits[i])}")
        elem = _scalar(input_types[i])
        if not compatible(elem, params[n + i], ignore_fp=True):
            raise _err(f"{what} computation '{comp.name}' parameter {n + i} is "
                       f"{s(params[n + i])} but input {i} has element type {input_types[i]}")
        if not compatible(accs[i], params[n + i], ignore_fp=True):
            raise _err(f"{what} computation '{comp.name}' parameter {n + i} is "
                       f"{s(params[n + i])} but its result {i} is {s(accs[i])}")
    return accs


@rule("reduce")
def _reduce(ins):
    shapes = _ops(ins)
    n = len(shapes) // 2
    inputs, inits = shapes[:n], shapes[n:]
    first = _array(inputs[0], "input 0 of reduce")
    for i, x in enumerate(inputs[1:], 1):
        _array(x, f"input {i} of reduce")
        if not same_dims(x, first):
            raise _err(f"reduce inputs must have the same dimensions: {s(first)} and {s(x)}")
    dims = _ints_attr(ins, "dimensions")
    _check_range(dims, first.rank, lambda: f"reduce dimension (operand {s(first)})")
    _check_unique(dims, "reduce dimensions")
    comp = _comp(ins, "to_apply")
    verify_reducer(comp, inits, [x.element_type for x in inputs], "reduce")
    keep = [i for i in range(first.rank) if i not in set(dims)]
    out_dims = [first.dims[i] for i in keep]
    out_dyn = [first.dynamic[i] for i in keep]
    _, result = program_shape(comp)
    if result.is_tuple:
        return Shape.tuple_of(_shape(r.element_type, out_dims, out_dyn) for r in result.tuple_shapes)
    return _shape(result.element_type, out_dims, out_dyn)


@rule("reduce-window")
def _reduce_window(ins):
    shapes = _ops(ins)
    n = len(shapes) // 2
    inputs, inits = shapes[:n], shapes[n:]
    first = _array(inputs[0], "input 0 of reduce-window")
    for i, x in enumerate(inputs[1:], 1):
        _array(x, f"input {i} of reduce-window")
        if not same_dims(x, first):
            raise _err(f"reduce-window inputs must have the same dimensions: {s(first)} and "
                       f"{s(x)}")
    comp = _comp(ins, "to_apply")
    verify_reducer(comp, inits, [x.element_type for x in inputs], "reduce-window")
    window = _attr(ins, "window")
    if not isinstance(window, Window):
        raise _err(f"attribute 'window' must be a window, got {window}")
    outs = []
    for x, init in zip(inputs, inits):
        dims = window_output_dims(x, window, "reduce-window")
        outs.append(_shape(init.element_type, dims, x.dynamic))
    return outs[0] if n == 1 else Shape.tuple_of(outs)


@rule("select-and-scatter")
def _select_and_scatter(ins):
    op, src, init = _ops(ins)
    _array(op, "the operand of select-and-scatter")
    select = _comp(ins, "select")
    scatter = _comp(ins, "scatter")
    sparams, sresult = program_shape(select)
    if len(sparams) != 2:
        raise _err(f"select computation '{select.name}' must take 2 parameters, but takes "
                   f"{len(sparams)}")
    if not compatible(sresult, _scalar("pred")):
        raise _err(f"select computation '{select.name}' must return pred[], returns "
                   f"{s(sresult)}")
    elem = _scalar(op.element_type)
    for i in range(2):
        if not compatible(elem, sparams[i], ignore_fp=True):
            raise _err(f"select computation '{select.name}' parameter {i} is {s(sparams[i])} "
                       f"but the operand's element type is {op.element_type}")
    verify_reducer(scatter, [init], [src.element_type], "scatter")
    window = _attr(ins, "window")
    if not isinstance(window, Window):
        raise _err(f"attribute 'window' must be a window, got {window}")
    wdims = window_output_dims(op, window, "select-and-scatter")
    expect = _shape(op.element_type, wdims)
    if not compatible(src, expect, ignore_fp=True):
        raise _err(f"select-and-scatter source {s(src)} does not match the windowed operand "
                   f"shape {s(expect)}")
    return op


@rule("sort")
def _sort(ins):
    shapes = _ops(ins)
    first = _array(shapes[0], "operand 0 of sort")
    comp = _comp(ins, "to_apply")
    params, result = program_shape(comp)
    if not compatible(result, _scalar("pred")):
        raise _err(f"sort comparator '{comp.name}' must return pred[], returns {s(result)}")
    if len(params) != 2 * len(shapes):
        raise _err(f"sort comparator '{comp.name}' must take {2 * len(shapes)} parameters, but "
                   f"takes {len(params)}")
    for i, p in enumerate(params):
        want = _scalar(shapes[i // 2].element_type)
        if not compatible(want, p, ignore_fp=True):
            raise _err(f"sort comparator '{comp.name}' parameter {i} is {s(p)}, expected {s(want)}")
    for i, x in enumerate(shapes[1:], 1):
        _array(x, f"operand {i} of sort")
        if not same_dims(x, first):
            raise _err(f"sort operands must have the same dimensions: {s(first)} and {s(x)}")
    d = _one_dim_attr(ins)
    if d < 0 or d >= first.rank:
        raise _err(f"sort dimension {d} is out of range for {s(first)}")
    return shapes[0] if len(shapes) == 1 else Shape.tuple_of(shapes)


@rule("topk")
def _topk(ins):
    op = _array(ins.operands[0].shape, "the operand of topk")
    k = _int_attr(ins, "k")
    if op.rank < 1:
        raise _err(f"topk operand must have rank >= 1, got {s(op)}")
    if k < 0 or (op.dims[-1] != UNBOUNDED and k > op.dims[-1]):
        raise _err(f"topk k={k} is out of range for the last dimension of {s(op)}")
    dims = op.dims[:-1] + (k,)
    dyn = op.dynamic
    return Shape.tuple_of([_shape(op.element_type, dims, dyn), _shape("s32", dims, dyn)])


@rule("map")
def _map(ins):
    shapes = _ops(ins)
    comp = _comp(ins, "to_apply")
    params, result = program_shape(comp)
    arg = _array(shapes[0], "operand 0 of map")
    for i, x in enumerate(shapes[1:], 1):
        _array(x, f"operand {i} of map")
        if same_dims(x, arg):
            continue
        raise _err(f"map operands must have the same dimensions, got "
                   f"{', '.join(s(y) for y in shapes)}")
    dims = ins.attrs.get("dimensions")
    if dims is not None and tuple(dims) != tuple(range(arg.rank)):
        raise _err(f"map dimensions must be {{{_j(range(arg.rank))}}}, got {{{_j(dims)}}}")
    if len(params) != len(shapes):
        raise _err(f"to_apply computation '{comp.name}' takes {len(params)} parameters but map "
                   f"has {len(shapes)} operands")
    if not _is_scalar(result):
        raise _err(f"map computation '{comp.name}' must return a scalar, returns {s(result)}")
    for i, (p, x) in enumerate(zip(params, shapes)):
        if not _is_scalar(p):
            raise _err(f"map computation '{comp.name}' parameter {i} must be a scalar, is {s(p)}")
        if not same_type_ignoring_fp(p.element_type, x.element_type):
            raise _err(f"map computation '{comp.name}' parameter {i} is {s(p)} but operand {i} "
                       f"is {s(x)}")
    return _shape(result.element_type, arg.dims, arg.dynamic)
