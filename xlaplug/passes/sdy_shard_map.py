"""sdy-shard-map: jax's shard_map regions in a program before partitioning become one
`xlaplug.shard_map` custom call each, which the executor runs on every device of the mesh.

jax prints a region as
    l = custom-call(args...), custom_call_target="xla.sdy.GlobalToLocalShape", in_shardings
    c = call(l), to_apply=xla.sdy.manual_computation_body...      (+ get-tuple-elements)
    g = custom-call(results...), custom_call_target="xla.sdy.LocalToGlobalShape", out_shardings
and this pass replaces the three by
    g = custom-call(args...), custom_call_target="xlaplug.shard_map",
        called_computations={body}, frontend_attributes={mesh, in/out shardings}
`xla.sdy.FuncResultSharding` (a marker on results) becomes its operand.  The rest of the
program runs as written on one device: `sharding=` annotations do not change values.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..hlo.errors import HloError
from ..hlo.ir import Instruction, Module
from ..hlo.opcodes import SHARD_MAP_TARGET
from ..hlo.rewrite import replace_all_uses
from ..hlo.text.sdy import meshes_text
from .context import PassContext

_TO_LOCAL, _TO_GLOBAL = "xla.sdy.GlobalToLocalShape", "xla.sdy.LocalToGlobalShape"
_MARKERS = frozenset({"xla.sdy.FuncResultSharding"})


def _target(ins: Instruction) -> str | None:
    return ins.attrs.get("custom_call_target") if ins.opcode == "custom-call" else None


def _users(comp, ins) -> list[Instruction]:
    return [u for u in comp.instructions if any(o is ins for o in u.operands)]


def _error(ins: Instruction, msg: str) -> HloError:
    return HloError(f"shard_map region at '{ins.name}': {msg}", line=ins.line,
                    column=ins.column)


@dataclass
class SdyShardMap:
    name: ClassVar[str] = "sdy-shard-map"

    def run(self, module: Module, ctx: PassContext) -> bool:
        changed = False
        for comp in module.computations:
            for ins in list(comp.instructions):
                if _target(ins) in _MARKERS and len(ins.operands) == 1:
                    replace_all_uses(comp, ins, ins.operands[0])
                    if comp.root is ins:
                        comp.root = ins.operands[0]
                    comp.instructions.remove(ins)
                    changed = True
                elif _target(ins) == _TO_LOCAL:
                    self._rewrite(module, comp, ins)
                    changed = True
        return changed

    def _rewrite(self, module: Module, comp, to_local: Instruction) -> None:
        users = _users(comp, to_local)
        ins_gtes = []
        if users and all(u.opcode == "get-tuple-element" for u in users):  # several operands
            ins_gtes = users
            users = list({id(c): c for g in users for c in _users(comp, g)}.values())
        if len(users) != 1 or users[0].opcode != "call":
            raise _error(to_local, "expected one call of the region's body to use it")
        call = users[0]
        if ins_gtes and [o.attrs.get("index") for o in call.operands] != \
                list(range(len(call.operands))):
            raise _error(to_local, "the body's operands are not the region's, in order")
        gtes = _users(comp, call)
        if gtes and all(u.opcode == "get-tuple-element" for u in gtes):
            later = {id(u) for g in gtes for u in _users(comp, g)}
            to_global = [u for u in comp.instructions if id(u) in later]
        else:
            to_global = gtes
        if len(to_global) != 1 or _target(to_global[0]) != _TO_GLOBAL:
            raise _error(to_local, "expected its results to meet in one "
                                   f"{_TO_GLOBAL} custom call")
        to_global = to_global[0]
        fa_in = to_local.attrs.get("frontend_attributes") or {}
        fa_out = to_global.attrs.get("frontend_attributes") or {}
        body = call.attrs["to_apply"]
        # The body's results in the order LocalToGlobalShape takes them.
        order = [g.attrs["index"] for g in to_global.operands] if gtes and to_global.operands \
            and all(o.opcode == "get-tuple-element" for o in to_global.operands) else None
        if order is not None and order != list(range(len(order))):
            raise _error(to_local, "the body's results reach LocalToGlobalShape out of order")
        fa = {"xlaplug.meshes": meshes_text(module),
              "xla.sdy.in_shardings": fa_in.get("xla.sdy.in_shardings", ""),
              "xla.sdy.out_shardings": fa_out.get("xla.sdy.out_shardings", ""),
              "xla.sdy.manual_axes": fa_in.get("xla.sdy.manual_axes", "")}
        region = Instruction(to_global.name, "custom-call", to_global.shape,
                             list(to_local.operands),
                             {"custom_call_target": SHARD_MAP_TARGET,
                              "called_computations": [body], "frontend_attributes": fa})
        region.line, region.column = to_local.line, to_local.column
        at = comp.instructions.index(to_global)
        comp.instructions[at] = region
        replace_all_uses(comp, to_global, region)
        if comp.root is to_global:
            comp.root = region
        dead = {id(to_local), id(call), *(id(g) for g in gtes + ins_gtes)}
        comp.instructions = [i for i in comp.instructions if id(i) not in dead]
