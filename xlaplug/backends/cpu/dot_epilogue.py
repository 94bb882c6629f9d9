"""An output fusion on the CPU: a product (dot or convolution) and its elementwise epilogue.

passes/dot_epilogue.py makes them (a product whose only reader was a loop fusion); XLA's own
kOutput fusions of the same form (a dot of parameters, elementwise ops after it) run the
same way.  The body is split into the product and the epilogue -- the rest of the body as a
loop fusion body of its own whose parameter 0 is the product -- and run as

    y = dot kernel(its operands)             # the kernel the product would run alone
    loop(out=y, y, other operands...)        # the compiled loop, in place on y

so the result takes one buffer, not the product's and the loop's: the loop reads each
element of y at its own index before writing it.  Both steps are the unfused ones (the same
kernel, resolved by the context as for an instruction of its own, with the denormal bits it
sets; the loop compiled from the same body), so the bits are the unfused sequence's.  Where
the product's result cannot be written (another element type than the epilogue's result, or
memory shared with an operand) the loop writes a new array; where the epilogue runs no loop
(small and not hot, `interpret_loops`, or not one loop) it is interpreted, as the loop
fusion would have been.

Why not the product in row blocks, each block's epilogue applied while it is still in cache:
measured with numpy on the session's 2-core machine (2026-12-05, load 5.7-6.1, f32,
relu epilogue), a product in blocks of 64 or 256 rows never beat the whole product followed
by the epilogue in place -- one BLAS thread: 1.01-1.24x slower (OpenBLAS repacks the whole
right-hand matrix for every block); the run's BLAS threads: 1.5-50x slower (the thread team
wakes for every block).  Nor are a block product's bits promised to be the whole product's
(OpenBLAS may pick another kernel for a smaller product), and they must be.
"""
from __future__ import annotations

import numpy as np

from ..common.fusion_contents import DEFAULT_MIN_ELEMENTS, loop_shape
from ...hlo.ir import Computation, Instruction
from ...hlo.rewrite import clone_instruction

_PRODUCTS = frozenset({"dot", "convolution"})


def split_output(comp: Computation):
    """(product, its operands' parameter numbers, epilogue, the epilogue's operands: each
    a parameter number of comp or -1 for the product) for a body holding one dot or
    convolution of parameters, read by elementwise loop code at the loop index; else None."""
    products = [i for i in comp.instructions if i.opcode in _PRODUCTS]
    if len(products) != 1 or comp.root is products[0]:
        return None
    d = products[0]
    if any(o.opcode != "parameter" for o in d.operands) or not d.shape.is_array:
        return None
    rest = [i for i in comp.instructions if i.opcode != "parameter" and i is not d]
    used: list[Instruction] = []  # the epilogue's outside values, product first
    mapping: dict[int, Instruction] = {}
    for v in [d] + [o for i in rest for o in i.operands if o.opcode == "parameter"]:
        if id(v) not in mapping:
            mapping[id(v)] = Instruction("epilogue_product" if v is d else v.name,
                                         "parameter", v.shape, parameter_number=len(used))
            used.append(v)
    body = list(mapping.values())
    for ins in rest:
        clone = clone_instruction(ins, [mapping[id(o)] for o in ins.operands], ins.name)
        mapping[id(ins)] = clone
        body.append(clone)
    epilogue = Computation(comp.name + ".epilogue", body, mapping[id(comp.root)])
    roles = loop_shape(epilogue)
    if roles is None or roles[0] != "array":
        return None
    return (d, [o.parameter_number for o in d.operands], epilogue,
            [-1 if v is d else v.parameter_number for v in used])


def output_compiled(ins) -> bool:
    """Whether the fusion runs with no buffers inside but its result's (the thunk
    builder's memory estimate): its epilogue a compiled loop at the default threshold."""
    n = ins.shape.num_elements() if ins.shape.is_array else 0
    return n >= DEFAULT_MIN_ELEMENTS and split_output(ins.attrs["calls"][0]) is not None


def _plan(ctx, comp):
    plans = ctx.kernel_cache.table("_output_fusion_plans")
    if id(comp) not in plans:
        split = split_output(comp)
        plans[id(comp)] = None if split is None else (ctx.resolve(split[0]),) + split
    return plans[id(comp)]


def run_output_fusion(ins, args, ctx, run_loop, loop_storage):
    """The fusion's result: the product by its own kernel, then the epilogue by `run_loop`
    (fused_loop.run_loop) in place on it where it can be written."""
    comp = ins.attrs["calls"][0]
    plan = _plan(ctx, comp)
    if plan is None or plan[0] is None:
        return ctx.run(comp, args)
    product_kernel, d, d_args, epilogue, e_args = plan
    y = product_kernel(d, [args[k] for k in d_args], ctx)
    e_vals = [y if k < 0 else args[k] for k in e_args]
    into, store = None, loop_storage(ins.shape.dtype)
    # The loop writes the product's buffer where the result has the product's type and the
    # loop stores that type as such (a bf16 one as its bits: fused_loop.loop_storage).
    if isinstance(y, np.ndarray) and y.dtype == ins.shape.dtype and \
            y.dtype.itemsize == store.itemsize and \
            y.flags.c_contiguous and y.flags.writeable and \
            not any(isinstance(a, np.ndarray) and np.may_share_memory(y, a) for a in args):
        into = y.reshape(-1).view(store)
    out = run_loop(epilogue, ins.shape, e_vals, ctx, into=into)
    if out is None:  # interpreted: on the product as its kernel gave it
        return ctx.run(epilogue, e_vals)
    return out
