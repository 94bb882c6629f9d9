"""One rank's module for `--engine xla` under mpiexec: every collective becomes a typed-FFI
custom call that xlaplug's MPI communicator serves (xla/ffi/mpi_handler.py).

    all-reduce, all-gather, reduce-scatter, all-to-all, collective-permute,
    collective-broadcast (and the -start forms; -done becomes the start's value)
        -> custom-call "xlaplug.mpi.<kind>"
    a plugin custom call whose kernel takes a communicator (the Horovod ops), and an
    instruction of a core opcode whose plugin override takes one
        -> custom-call "xlaplug.mpi.kernel"
    replica-id, partition-id -> constants of this rank's device

Each call is `custom_call_has_side_effect=true` (XLA neither removes nor merges it) and
carries `backend_config={run = R : i64, index = I : i64, ...}`: the handler's binding of
the program (kept with its executable) and the original instruction it serves -- the
interpreter's own kernel runs for that instruction, so the engine's collectives are the
interpreter's: the same headers, timeouts, errors, reducers and rounding.

Order.  Every rank must issue its collectives in the same order, and XLA:CPU runs
independent thunks concurrently.  So the calls of a computation are chained: each takes,
as a last operand, a u32[] the previous call returns as its last result (the first takes a
constant) -- a data dependency XLA cannot reorder -- and the token goes through the whiles,
conditionals and calls whose computations hold calls, as data too (mpi_order.py).
"""
from __future__ import annotations

import numpy as np

from ..hlo.ir import Instruction, Module, Shape
from ..hlo.rewrite import NameUniquer, replace_all_uses
from ..plugin.attrs import op_name
from .engine import EngineError
from .mpi_order import enter, leave, ordered_call, roles, threaded, thread

TARGET = "xlaplug.mpi."
KINDS = {"all-reduce": "all_reduce", "all-reduce-start": "all_reduce",
         "all-gather": "all_gather", "all-gather-start": "all_gather",
         "reduce-scatter": "reduce_scatter", "all-to-all": "all_to_all",
         "collective-permute": "collective_permute",
         "collective-permute-start": "collective_permute",
         "collective-broadcast": "collective_broadcast"}
TARGETS = sorted({TARGET + k for k in KINDS.values()} | {TARGET + "kernel"})
DONES = ("all-reduce-done", "all-gather-done", "collective-permute-done")


def mpi_handler():
    """This process's MPI handler (ffi/mpi_handler.py), serving TARGETS: made and registered
    with jax the first time, the same object after (one per process, as XLA's targets)."""
    from .ffi.mpi_handler import MpiHandler
    from .ffi.register import serve_own
    return serve_own(TARGETS, lambda: MpiHandler(compiled=True))


def _kind(ins, registry, comm_overrides: frozenset = frozenset()) -> str | None:
    """The target suffix of an instruction the communicator serves, else None
    (`comm_overrides`: ids of the instructions whose core opcode a plugin overrides with a
    kernel that takes a communicator, where XLA runs them as code)."""
    if ins.opcode in KINDS:
        return KINDS[ins.opcode]
    if id(ins) in comm_overrides:
        return "kernel"
    if ins.opcode == "custom-call":
        entry = registry.kernel_for(op_name(ins), "cpu") if op_name(ins) else None
        if entry is not None and entry.communicator:
            return "kernel"
    return None


def _leaves(ins, where: str = "over MPI") -> list[Shape]:
    """The result buffers: the array, or a flat tuple's elements (`where`: how the error
    names the run)."""
    if not ins.shape.is_tuple:
        return [ins.shape]
    if any(s.is_tuple or s.is_token for s in ins.shape.tuple_shapes):
        what = "collectives" if where == "over MPI" else "communicator calls"
        raise EngineError(f"{ins.opcode} '{ins.name}': --engine xla {where} serves "
                          f"{what} with array or flat-tuple results, not {ins.shape}",
                          line=ins.line, column=ins.column)
    return list(ins.shape.tuple_shapes)


def _order(comps, registry, comm) -> tuple[list, set]:
    """(each computation's instructions in a topological order stable w.r.t. the text's,
    the computations that hold communicator calls, directly or through their callees)."""
    holds: set = set()
    changed = True
    while changed:  # to the fixpoint: a callee listed after its caller
        changed = False
        for comp in comps:
            if id(comp) in holds:
                continue
            if any(_kind(i, registry, comm) or any(id(c) in holds for c in i.called_computations())
                   for i in comp.instructions):
                holds.add(id(comp))
                changed = True
    orders = []
    for comp in comps:
        seen, out = set(), []

        def visit(ins):
            stack = [(ins, iter(ins.operands + ins.control_predecessors))]
            seen.add(id(ins))
            while stack:
                top, it = stack[-1]
                nxt = next((o for o in it if id(o) not in seen), None)
                if nxt is None:
                    stack.pop()
                    out.append(top)
                else:
                    seen.add(id(nxt))
                    stack.append((nxt, iter(nxt.operands + nxt.control_predecessors)))
        for ins in comp.instructions:
            if id(ins) not in seen:
                visit(ins)
        orders.append(out)
    return orders, holds


def rewrite_for_mpi(module: Module, place, registry, run: int,
                    sites: int = 0) -> list[Instruction]:
    """Rewrite `module` (a copy: the originals stay with the interpreter's kernels) in place
    for the device at `place` (kernels.Place), its calls bound to handler run `run`; returns
    the copy's instructions that the calls' `index` attributes name, in index order (the
    caller maps them to their originals: `twins`); `sites`: the compiled handler's registry
    address (ffi/mpi_native.py), 0 where the handler is Python only."""
    served: list[Instruction] = []
    uniq = NameUniquer(module)
    comps = list(module.computations)
    for comp in comps:  # this rank's device's ids, wherever they are asked for
        for ins in comp.instructions:
            if ins.opcode in ("replica-id", "partition-id"):
                value = place.replica if ins.opcode == "replica-id" else place.partition
                ins.opcode, ins.attrs, ins.literal = "constant", {}, np.array(value, np.uint32)
    from .override_rewrite import overridden
    comm = frozenset(id(i) for _c, i, e in overridden(module, registry) if e.communicator)
    orders, holds = _order(comps, registry, comm)
    role_of = roles(module, holds)
    for comp, order in zip(comps, orders):
        role = role_of.get(id(comp))
        if id(comp) not in holds and role is None:
            continue
        token, new = enter(comp, role, uniq)
        for ins in order:
            if ins.opcode in DONES:  # its start was rewritten above: the start's value
                _done(ins, comp, uniq, new)
                continue
            kind = _kind(ins, registry, comm)
            if kind is None:
                if threaded(ins, holds):  # a while / conditional / call: takes the token
                    token = thread(ins, comp, token, uniq, new)
                else:
                    new.append(ins)
                continue
            made, value, token = ordered_call(ins, uniq, TARGET + kind, "mpi",
                                              list(ins.operands) + [token], _leaves(ins),
                                              run, len(served), sites)
            served.append(ins)
            new += made
            replace_all_uses(comp, ins, value)
        leave(comp, role, token, uniq, new)
        comp.instructions = new
    return served


def _done(ins, comp, uniq, new) -> None:
    """An async -done of a rewritten -start: the start's value (all-reduce), or its element
    1 (all-gather, collective-permute)."""
    start = ins.operands[0]
    value = start if ins.opcode == "all-reduce-done" else \
        Instruction(uniq(f"{ins.name}.value"), "get-tuple-element", ins.shape, [start],
                    {"index": 1})
    if value is not start:
        new.append(value)
    replace_all_uses(comp, ins, value)


def twins(copy: Module, original: Module) -> dict[int, Instruction]:
    """id(an instruction of `copy`) -> the same instruction of `original` (copy.deepcopy's)."""
    return {id(a): b for ca, cb in zip(copy.computations, original.computations)
            for a, b in zip(ca.instructions, cb.instructions)}
