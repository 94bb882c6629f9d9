"""`fusion` on CUDA: a loop fusion (passes/loop_fusion.py, or XLA's kLoop) as one kernel.

The CPU's cpu/fused_loop.py, on the device: the fused computation becomes a numba.cuda
device function of one scalar per parameter (scalar_cuda, elementwise mode: the same
SCALAR_OPS code and FMA contraction), and each thread calls it on its elements:

    def fk(N, out, a0, s1):
        for i in range(cuda.grid(1), N, cuda.gridsize(1)):   # grid-stride
            out[i] = fn(a0[i], s1[0])      # a0: an array parameter, s1: a one-element one

so a chain of elementwise ops is one launch and one pass over device memory.  Other
fusions, fusions smaller than the run option `fusion_min_elements`, and bodies scalar code
cannot express run their computation kernel by kernel, as before.
"""
from __future__ import annotations

from ..common.fusion_contents import DEFAULT_MIN_ELEMENTS, element_index, loop_plan
from ..registry import kernel
from .launch import device_empty, flat, launch_stride_loop, stride_loop
from .reductions import gen_kernel, load, type_key


def _compile_body(comp, roles):
    from .scalar_cuda import compile_scalar_device_function
    return compile_scalar_device_function(comp, elementwise=True)


@kernel("fusion", device="cuda")
def _fusion(ins, args, ctx):
    comp = ins.attrs["calls"][0]
    n = ins.shape.num_elements() if ins.shape.is_array else 0
    plan = None
    if n >= ctx.options.get("fusion_min_elements", DEFAULT_MIN_ELEMENTS):
        plan = loop_plan(ctx, comp, _compile_body, "_cuda_fused_plans")
    if plan is None:
        return ctx.run(comp, args)
    fn, roles = plan
    out = device_empty(ins.shape)
    names = [f"a{k}" for k in range(len(roles))]
    loads = ", ".join(load(x, "0" if r == "scalar" else element_index(r), a.dtype)
                      for x, r, a in zip(names, roles, args))
    src = "\n".join([f"def fk(N, out{''.join(', ' + x for x in names)}):",
                     "    " + stride_loop("N"),
                     f"        out[i] = fn({loads})"]) + "\n"
    k = gen_kernel(("fusion", roles, type_key(args)), src, "fk", {"fn": fn})
    launch_stride_loop(k, n, n, flat(out), *[flat(a) for a in args])
    return out
