"""Products that the devices of a run compute together (backends/cpu/gang_gemm.py): devices
that take turns on one thread meet at each such dot, as at a collective, and the last to
arrive runs every member's gemm at once on numba's threads.  One thread then carries the
devices' Python with no GIL hand-offs between device threads (on a host where a system call
costs ~6 us, four device threads made the data-parallel MLP step 8.9 ms against 6.3 on one,
benchmarks/README.md), while their products -- most of such a step's work -- still overlap.

A dot may gang only if every device runs it exactly once per run, in the same order: it sits
in the entry computation or in a computation that only fusions and calls reach from there
(never a loop body, a branch, a reducer).  It must be a plain product numpy's matmul sends
to gemm (two f32 or two f64 matrices, no batch dimension, every dimension above 1) and large
enough that a meeting pays (GANG_FROM_FLOPS); every device decides the same from the module
alone, so all of them meet or none does.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...backends.cpu.blas_threads import cores, product_flops
from ...hlo.ir import Module

# 2*M*N*K of a product that gangs: ~20 us of one core's sgemm, against a meeting (greenlet
# switches) and a parallel region of numba's threads (~10 us).
GANG_FROM_FLOPS = 1 << 20

_THROUGH = frozenset({"fusion", "call"})  # run once per run of their caller


@dataclass(frozen=True)
class Gang:
    """What a device's Place carries: the dots that gang, the devices that meet (the run's),
    and the threads their gemms run on."""
    products: frozenset
    group: tuple[int, ...]
    threads: int


def lockstep_products(module: Module) -> frozenset:
    """The module's dots that may gang (see the module docstring)."""
    once, seen = [module.entry], {id(module.entry)}
    for comp in once:  # computations run once per run: the entry, then what it fuses / calls
        for ins in comp.instructions:
            if ins.opcode in _THROUGH:
                for c in ins.called_computations():
                    if id(c) not in seen:
                        seen.add(id(c))
                        once.append(c)
    other = set()  # computations also reached some other way (loops, branches, reducers...)
    stack = [c for comp in module.computations for ins in comp.instructions
             if ins.opcode not in _THROUGH for c in ins.called_computations()]
    while stack:
        c = stack.pop()
        if id(c) not in other:
            other.add(id(c))
            stack += [d for ins in c.instructions for d in ins.called_computations()]
    return frozenset(ins for comp in once if id(comp) not in other
                     for ins in comp.instructions if _gangs(ins))


def _gangs(ins) -> bool:
    if ins.opcode != "dot" or not ins.shape.is_array or len(ins.operands) != 2:
        return False
    lhs, rhs = (o.shape for o in ins.operands)
    a = ins.attrs
    if (a.get("lhs_batch_dims") or a.get("rhs_batch_dims") or len(lhs.dims) != 2
            or len(rhs.dims) != 2 or len(a.get("lhs_contracting_dims", ())) != 1
            or len(a.get("rhs_contracting_dims", ())) != 1):
        return False
    if not (lhs.element_type == rhs.element_type == ins.shape.element_type
            and lhs.element_type in ("f32", "f64")):
        return False
    if min(int(d) for d in (*lhs.dims, *rhs.dims)) < 2:
        return False
    return product_flops(ins)[0] >= GANG_FROM_FLOPS


def gang_for(module: Module, first: int, n: int, blas: int | None, table: dict) -> Gang | None:
    """The Gang of a run of devices first .. first + n - 1 taking turns on one thread, whose
    BLAS runs on `blas` threads; None when nothing gangs (one device or one core, products on
    several BLAS threads, no numpy BLAS to call, no product that may).  `table`: a kept dict (a
    context's kernel cache table) holding each module's products, found once."""
    from ...backends.cpu.gang_gemm import gemm_library
    threads = min(n, cores())
    if threads < 2 or blas != 1 or gemm_library() is None:
        return None  # (on one core the gemms could only take turns: a meeting for nothing)
    products = table.get(module)
    if products is None:
        products = table[module] = lockstep_products(module)
    if not products:
        return None
    return Gang(products, tuple(range(first, first + n)), threads)

