"""The module XLA runs on its host devices (runtime/engine_devices.py) with its communicator
kernels -- the plugin ops whose kernels take a `comm`, the Horovod ops -- served by
xlaplug's in-process communicator from inside XLA (ffi/devices_handler.py).

XLA:CPU runs each device of an execution on its own thread, at once (measured: four
devices each in a 0.5 s kernel, 0.50 s a run), so the handlers of one call on every device
can meet, as the interpreter's device threads do.  Each communicator call becomes

    custom-call "xlaplug.devices.kernel"(operands..., replica-id, partition-id, token)
        -> (results..., token)

with `backend_config={run = R : i64, index = I : i64, op = "..."}` (the handler's binding
of the program and the original instruction, whose interpreter kernel runs): the device's
ids are operands, read at run time, since XLA compiles one program for every device.
Core collectives stay XLA's own.  A device's calls are chained by the order token that
mpi_rewrite.py threads under mpiexec (mpi_order.py): XLA:CPU runs independent thunks
concurrently, and every device must reach its communicator calls in the same order.

A core opcode a plugin overrides (override_rewrite.py) is served the same way, where XLA
runs it as code: each device's call runs the override kernel in that device's interpreter
context -- as the interpreter's device threads do -- so an override that takes a
communicator (a ring all-reduce replacing `all-reduce`) meets the other devices too.  Its
result buffers are row-major, as the override handler's.
"""
from __future__ import annotations

from ..hlo.ir import Instruction, Module, Shape
from ..hlo.rewrite import NameUniquer, replace_all_uses
from ..plugin.attrs import op_name
from .mpi_order import enter, leave, ordered_call, roles, thread, threaded
from .mpi_rewrite import _leaves, _order
from .override_rewrite import _refuse, _row_major, overridden

TARGET = "xlaplug.devices.kernel"
WHERE = "on many devices"  # (what the errors of the order token's threading say)
ID = Shape.array("u32", ())


def communicates(ins, registry) -> bool:
    """A plugin custom call whose CPU kernel takes a communicator."""
    if ins.opcode != "custom-call" or not op_name(ins):
        return False
    entry = registry.kernel_for(op_name(ins), "cpu")
    return entry is not None and entry.communicator


def overrides_served(module: Module, registry) -> dict:
    """{id(instruction): its override OpEntry} of the overridden core instructions XLA runs
    as code, each checked servable as a custom call (override_rewrite: one-line errors)."""
    found = overridden(module, registry)
    for _comp, ins, entry in found:
        _refuse(ins, entry)
    return {id(ins): entry for _comp, ins, entry in found}


def needs_handler(module: Module, registry) -> bool:
    """Whether the module has calls this handler serves: communicator calls or overrides."""
    return any(communicates(i, registry) for c in module.computations
               for i in c.instructions) or bool(overridden(module, registry))


def plan(module: Module, registry) -> tuple[frozenset, set, dict]:
    """(ids of the overridden instructions served, the computations holding served calls,
    the role of each computation the order token goes through); every error the rewrite
    can raise, raised here -- before a worker process gets the module (its positions are
    the file's only here)."""
    over = frozenset(overrides_served(module, registry))
    for comp in module.computations:
        for ins in comp.instructions:
            if communicates(ins, registry):
                _leaves(ins, WHERE)  # (array or flat-tuple results)
    holds = _holds(list(module.computations), registry, over)
    return over, holds, roles(module, holds, WHERE)


def devices_handler():
    """This process's handler of TARGET (ffi/devices_handler.py): made and registered with
    jax the first time, the same object after."""
    from .ffi.devices_handler import DevicesHandler
    from .ffi.register import serve_own
    return serve_own([TARGET], DevicesHandler)


def _holds(comps, registry, over: frozenset) -> set:
    """The computations holding communicator calls or overrides served (`over`), directly
    or through their callees."""
    holds: set = set()
    changed = True
    while changed:
        changed = False
        for comp in comps:
            if id(comp) not in holds and any(
                    communicates(i, registry) or id(i) in over
                    or any(id(c) in holds for c in i.called_computations())
                    for i in comp.instructions):
                holds.add(id(comp))
                changed = True
    return holds


def rewrite_for_devices(module: Module, registry, run: int) -> list[Instruction]:
    """Rewrite `module` (a copy: the originals stay with the interpreter's kernels) in place,
    its communicator calls bound to handler run `run`; returns the copy's instructions that
    the calls' `index` attributes name, in index order (mpi_rewrite.twins maps them)."""
    served: list[Instruction] = []
    uniq = NameUniquer(module)
    comps = list(module.computations)
    over, holds, role_of = plan(module, registry)
    orders, _ = _order(comps, registry, over)
    for comp, order in zip(comps, orders):
        role = role_of.get(id(comp))
        if id(comp) not in holds and role is None:
            continue
        token, new = enter(comp, role, uniq)
        for ins in order:
            if not communicates(ins, registry) and id(ins) not in over:
                if threaded(ins, holds):  # a while / conditional / call: takes the token
                    token = thread(ins, comp, token, uniq, new)
                else:
                    new.append(ins)
                continue
            leaves = _leaves(ins, WHERE)
            if id(ins) in over:  # (the override handler's views: row-major buffers)
                leaves = [_row_major(s) for s in leaves]
            ids = [Instruction(uniq(f"{ins.name}.{what}"), what, ID, [])
                   for what in ("replica-id", "partition-id")]
            made, value, token = ordered_call(ins, uniq, TARGET, "devices",
                                              list(ins.operands) + ids + [token], leaves,
                                              run, len(served))
            served.append(ins)
            new += ids + made
            replace_all_uses(comp, ins, value)
        leave(comp, role, token, uniq, new)
        comp.instructions = new
    return served
