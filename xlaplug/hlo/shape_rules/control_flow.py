"""Shape rules of the opcodes that call computations: call, while, conditional, fusion."""
from __future__ import annotations

from ..ir import Computation
from .common import (_comp, _err, _is_scalar, _ops, _scalar, compatible, expect_params,
                     program_shape, rule, s)


@rule("call")
def _call(ins):
    comp = _comp(ins, "to_apply")
    params, result = program_shape(comp)
    shapes = _ops(ins)
    if len(params) != len(shapes):
        raise _err(f"to_apply computation '{comp.name}' takes {len(params)} parameters but the "
                   f"call has {len(shapes)} operands")
    for i, (p, x) in enumerate(zip(params, shapes)):
        if not compatible(p, x):
            raise _err(f"call operand {i} is {s(x)} but computation '{comp.name}' parameter {i} "
                       f"is {s(p)}")
    return result


@rule("while")
def _while(ins):
    body = _comp(ins, "body")
    cond = _comp(ins, "condition")
    (bparam,) = expect_params(body, 1, "body")
    (cparam,) = expect_params(cond, 1, "condition")
    _, bresult = program_shape(body)
    _, cresult = program_shape(cond)
    init = ins.operands[0].shape
    if not compatible(cresult, _scalar("pred")):
        raise _err(f"condition computation '{cond.name}' must return pred[], returns "
                   f"{s(cresult)}")
    if not compatible(init, bparam):
        raise _err(f"while operand is {s(init)} but body computation '{body.name}' takes "
                   f"{s(bparam)}")
    if not compatible(init, cparam):
        raise _err(f"while operand is {s(init)} but condition computation '{cond.name}' takes "
                   f"{s(cparam)}")
    if not compatible(bresult, bparam):
        raise _err(f"body computation '{body.name}' returns {s(bresult)} but takes "
                   f"{s(bparam)}: the loop state must keep its shape")
    return bresult


def branch_computations(ins) -> list[Computation]:
    if "branch_computations" in ins.attrs:
        comps = ins.attrs["branch_computations"]
        if not isinstance(comps, list) or not all(isinstance(c, Computation) for c in comps):
            raise _err(f"attribute 'branch_computations' must name computations, got {comps}")
        return list(comps)
    if "true_computation" in ins.attrs or "false_computation" in ins.attrs:
        return [_comp(ins, "true_computation"), _comp(ins, "false_computation")]
    raise _err("conditional has neither branch_computations nor true/false_computation")


@rule("conditional")
def _conditional(ins):
    shapes = _ops(ins)
    index = shapes[0]
    if not _is_scalar(index):
        raise _err(f"conditional branch index must be a scalar, got {s(index)}")
    comps = branch_computations(ins)
    if index.element_type == "pred":
        if "branch_computations" in ins.attrs:
            # XLA's parser: a pred-indexed conditional takes true_computation and
            # false_computation; branch_computations is for an s32 index.
            raise _err("conditional with a pred index needs true_computation and "
                       "false_computation, not branch_computations")
        if len(comps) != 2:
            raise _err(f"conditional with a pred index needs 2 branches, has {len(comps)}")
    elif index.element_type == "s32":
        if not comps:
            raise _err("conditional needs at least one branch")
    else:
        raise _err(f"conditional branch index must be pred[] or s32[], got {s(index)}")
    if len(shapes) != len(comps) + 1:
        raise _err(f"conditional with {len(comps)} branches expects {len(comps) + 1} operands, "
                   f"but has {len(shapes)}")
    results = []
    for j, c in enumerate(comps):
        (p,) = expect_params(c, 1, f"branch {j}")
        if not compatible(p, shapes[j + 1]):
            raise _err(f"conditional operand {j + 1} is {s(shapes[j + 1])} but branch {j} "
                       f"computation '{c.name}' takes {s(p)}")
        results.append(program_shape(c)[1])
    for j, r in enumerate(results[1:], 1):
        if not compatible(results[0], r):
            raise _err(f"conditional branches return different shapes: branch 0 "
                       f"'{comps[0].name}' returns {s(results[0])} but branch {j} "
                       f"'{comps[j].name}' returns {s(r)}")
    return results[0]


@rule("fusion")
def _fusion(ins):
    comps = ins.called_computations()
    if len(comps) != 1:
        raise _err(f"fusion must call exactly one computation, calls {len(comps)}")
    comp = comps[0]
    params, result = program_shape(comp)
    if len(params) > len(ins.operands):
        raise _err(f"fused computation '{comp.name}' takes {len(params)} parameters but the "
                   f"fusion has {len(ins.operands)} operands")
    for i, p in enumerate(params):
        if not compatible(p, ins.operands[i].shape):
            raise _err(f"fusion operand {i} is {s(ins.operands[i].shape)} but fused computation "
                       f"'{comp.name}' parameter {i} is {s(p)}")
    return result
