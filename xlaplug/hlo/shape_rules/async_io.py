"""Shape rules of the asynchronous pairs (async-start/update/done, copy-start/done), of
send/recv, infeed/outfeed, and of the token opcodes (after-all, add-dependency)."""
from __future__ import annotations

from ..ir import Computation, Shape
from .common import TOKEN, _err, _ops, _scalar, compatible, program_shape, rule, s


def _wrapped(ins) -> Computation | None:
    comps = ins.called_computations()
    if not comps and ins.opcode in ("async-update", "async-done"):
        # Printed without `calls=`: the computation is the one its async-start wraps.
        start = ins.operands[0] if ins.operands else None
        while start is not None and start.opcode == "async-update" and start.operands:
            start = start.operands[0]
        if start is not None and start.opcode == "async-start":
            comps = start.called_computations()
    return comps[0] if len(comps) == 1 else None


def _bound_prefix(ins, bound: list[Shape], params: list[Shape], comp: Computation) -> None:
    """Late binding: an async-start (or -update) may give the first operands of the wrapped
    computation and later updates the rest; what is bound must match those parameters."""
    if len(bound) > len(params):
        raise _err(f"async computation '{comp.name}' takes {len(params)} parameters but "
                   f"{len(bound)} operands are bound")
    for i, (p, x) in enumerate(zip(params, bound)):
        if not compatible(p, x):
            raise _err(f"{ins.opcode} operand {i} is {s(x)} but '{comp.name}' parameter {i} is "
                       f"{s(p)}")


def _async_shape_check(ins, async_shape: Shape, comp: Computation | None,
                       complete: bool = True) -> None:
    if not async_shape.is_tuple or len(async_shape.tuple_shapes) < 2:
        raise _err(f"{ins.opcode} expects an async tuple of at least 2 elements, got "
                   f"{s(async_shape)}")
    if comp is None:
        return
    params, result = program_shape(comp)
    bound = async_shape.tuple_shapes[0]
    if not complete and bound.is_tuple:  # an update of a late-bound start: a prefix so far
        _bound_prefix(ins, list(bound.tuple_shapes), params, comp)
    elif not compatible(bound, Shape.tuple_of(params)):
        raise _err(f"{ins.opcode} async tuple element 0 {s(async_shape.tuple_shapes[0])} does "
                   f"not match the parameters of '{comp.name}' {s(Shape.tuple_of(params))}")
    if not compatible(async_shape.tuple_shapes[1], result):
        raise _err(f"{ins.opcode} async tuple element 1 {s(async_shape.tuple_shapes[1])} does "
                   f"not match the result of '{comp.name}' {s(result)}")


@rule("async-start")
def _async_start(ins):
    comp = _wrapped(ins)
    if comp is None:
        raise _err("async-start must call exactly one computation")
    params, result = program_shape(comp)
    shapes = _ops(ins)
    _bound_prefix(ins, shapes, params, comp)  # fewer operands: bound later by async-update
    extra = ins.shape.tuple_shapes[2:] if ins.shape is not None and ins.shape.is_tuple else ()
    return Shape.tuple_of([Shape.tuple_of(shapes), result, *extra])


@rule("async-update")
def _async_update(ins):
    op = ins.operands[0].shape
    comp = _wrapped(ins)
    _async_shape_check(ins, op, comp, complete=False)
    more = [o.shape for o in ins.operands[1:]]
    if not more:
        return op
    bound = list(op.tuple_shapes[0].tuple_shapes) + more  # late binding: operands added
    if comp is not None:
        _bound_prefix(ins, bound, program_shape(comp)[0], comp)
    return Shape.tuple_of([Shape.tuple_of(bound), *op.tuple_shapes[1:]])


@rule("async-done")
def _async_done(ins):
    op = ins.operands[0].shape
    _async_shape_check(ins, op, _wrapped(ins))
    return op.tuple_shapes[1]


@rule("copy-start")
def _copy_start(ins):
    op = ins.operands[0].shape
    return Shape.tuple_of([op, op, _scalar("u32")])


@rule("copy-done")
def _copy_done(ins):
    op = ins.operands[0].shape
    if not op.is_tuple or len(op.tuple_shapes) < 2:
        raise _err(f"copy-done operand must be a copy-start tuple, got {s(op)}")
    if not compatible(op.tuple_shapes[0], op.tuple_shapes[1]):
        raise _err(f"copy-done source and destination differ: {s(op)}")
    return op.tuple_shapes[0]


def _token_operand(ins, i: int) -> None:
    x = ins.operands[i].shape
    if not x.is_token:
        raise _err(f"{ins.opcode} operand {i} must be a token, got {s(x)}")


@rule("send")
def _send(ins):
    _token_operand(ins, 1)
    return Shape.tuple_of([ins.operands[0].shape, _scalar("u32"), TOKEN])


@rule("send-done")
def _send_done(ins):
    return TOKEN


@rule("recv")
def _recv(ins):
    _token_operand(ins, 0)
    if not ins.shape.is_tuple or not ins.shape.tuple_shapes:
        raise _err(f"recv result must be a (data, u32[], token) tuple, declared {s(ins.shape)}")
    return Shape.tuple_of([ins.shape.tuple_shapes[0], _scalar("u32"), TOKEN])


@rule("recv-done")
def _recv_done(ins):
    op = ins.operands[0].shape
    if not op.is_tuple or not op.tuple_shapes:
        raise _err(f"recv-done operand must be a recv tuple, got {s(op)}")
    return Shape.tuple_of([op.tuple_shapes[0], TOKEN])


@rule("infeed")
def _infeed(ins):
    _token_operand(ins, 0)
    if not ins.shape.is_tuple or not ins.shape.tuple_shapes:
        raise _err(f"infeed result must be a (data, token) tuple, declared {s(ins.shape)}")
    return Shape.tuple_of([ins.shape.tuple_shapes[0], TOKEN])


@rule("outfeed")
def _outfeed(ins):
    _token_operand(ins, 1)
    raw = ins.attrs.get("outfeed_shape")
    if raw is not None:
        # The parser types the value as a Shape; anything else was not parsed from text.
        want = raw if isinstance(raw, Shape) else None
        if want is not None and not compatible(want, ins.operands[0].shape):
            raise _err(f"outfeed_shape {s(want)} does not match the operand "
                       f"{s(ins.operands[0].shape)}")
    return TOKEN


@rule("after-all")
def _after_all(ins):
    return TOKEN


@rule("add-dependency")
def _add_dependency(ins):
    _token_operand(ins, 1)
    return ins.operands[0].shape
