"""Custom-call lowering: each plugin op becomes a plugin thunk or its decomposition.

For every custom-call (and composite call) naming a plugin op:
  - check the plugin's shape rule against the declared shape;
  - a kernel for the session's device (the pass context's), with --prefer kernel: keep
    it, the executor runs the kernel as a plugin thunk;
  - else a decomposition: inline it in place as core HLO;
  - else (custom-call only): an error naming the target, the device and what the loaded
    plugins do provide.  A composite with no plugin keeps its body, like a call.
"""
from __future__ import annotations

import itertools

from dataclasses import dataclass
from typing import ClassVar

from ..hlo.builder import Builder
from ..hlo.errors import HloError
from ..hlo.ir import Instruction, Module
from ..hlo.rewrite import NameUniquer, replace_all_uses
from ..plugin.attrs import op_name
from ..plugin.registry import Registry
from ..hlo.opcodes import RUNTIME_CUSTOM_CALLS, SHARD_MAP_BODY, SHARD_MAP_TARGET
from ..plugin.rules import check_shape_rule, decompose_into
from .context import PassContext

# Custom-call targets XLA itself implements (not plugin ops), rewritten to core HLO:
#   Sharding / SPMDFullToShardShape / SPMDShardToFullShape (x)  -> x     (one device)
#   TopK(x) -> (values, indices)                                 -> topk(x), k=..., largest=true
def _lower_sharding(b: Builder, ins: Instruction):
    return ins.operands[0]


def _lower_topk(b: Builder, ins: Instruction):
    k = ins.shape.tuple_shapes[0].dims[-1]
    t = b.op("topk", ins.operands[0], shape=ins.shape, k=k, largest=True)
    return t


_BUILTIN_TARGETS = {"Sharding": _lower_sharding, "SPMDFullToShardShape": _lower_sharding,
                    "SPMDShardToFullShape": _lower_sharding, "TopK": _lower_topk}
# The custom calls of XLA's partitioners: GSPMD's, and Shardy's as jax prints a program before
# partitioning (`xla.sdy.GlobalToLocalShape`, ...).  For XLA on many devices they must stay:
# the identity they lower to here is right only for a program run on one device.
_SHARDING_TARGETS = frozenset({"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape"})


def is_sharding_target(name: str) -> bool:
    return name in _SHARDING_TARGETS or name.startswith("xla.sdy.")


def _region_devices(module: Module) -> dict[int, int]:
    """id -> devices of every computation that runs inside a jax shard_map region: the body
    (of an `xlaplug.shard_map` call, or of the `call` of `xla.sdy.manual_computation_body`
    jax prints) and all it calls.  The region runs on its mesh's devices as partitions
    (runtime/spmd/shard_map.py; XLA's partitioner alike), so a plugin op there is
    decomposed for them, not for the one device the program around it runs on."""
    from ..hlo.text.sdy import meshes_text, parse_meshes
    text = meshes_text(module)
    try:
        sizes = {m.size for m in parse_meshes(text).values()} if text else set()
    except HloError:
        return {}  # a mesh xlaplug cannot read: the sdy-shard-map pass reports it
    if len(sizes) != 1:
        return {}
    size = sizes.pop()
    stack = [c for comp in module.computations for i in comp.instructions
             for c in i.called_computations()
             if i.attrs.get("custom_call_target") == SHARD_MAP_TARGET or
             (i.opcode == "call" and c.name.startswith(SHARD_MAP_BODY))]
    found: dict[int, int] = {}
    while stack:
        c = stack.pop()
        if id(c) not in found:
            found[id(c)] = size
            stack += [d for i in c.instructions for d in i.called_computations()]
    return found


@dataclass
class CustomCallLowering:
    name: ClassVar[str] = "custom-call-lowering"
    # Lower every plugin op to core HLO, kernels or not: the portable artifact.
    decompose_all: bool = False
    # Leave XLA's partitioner custom calls (is_sharding_target) for XLA: a module for XLA's
    # SPMD partitioner (the portable artifact, `run --reference xla`).
    keep_sharding: bool = False

    def run(self, module: Module, ctx: PassContext) -> bool:
        uniq = NameUniquer(module)
        used = [int(i.attrs["channel_id"]) for c in module.computations
                for i in c.instructions if i.attrs.get("channel_id") is not None]
        channels = itertools.count(max(used, default=0) + 1)
        module_devices = {"replicas": int(module.attrs.get("replica_count", 1) or 1),
                          "partitions": int(module.attrs.get("num_partitions", 1) or 1),
                          "channel_ids": channels}
        regions = _region_devices(module)
        changed = False
        for comp in module.computations:
            devices = module_devices if id(comp) not in regions else \
                {"replicas": 1, "partitions": regions[id(comp)], "channel_ids": channels}
            for ins in list(comp.instructions):
                name = op_name(ins)
                if name is None or name in RUNTIME_CUSTOM_CALLS:  # the executor runs these
                    continue
                if self.keep_sharding and ins.opcode == "custom-call" and \
                        is_sharding_target(name):
                    continue
                reg: Registry = ctx.registry
                if ins.opcode == "custom-call" and name in _BUILTIN_TARGETS and \
                        reg.kernel_for(name, ctx.device) is None and name not in reg.decompositions:
                    b = Builder(name_hint=ins.name, uniquer=uniq)
                    new = _BUILTIN_TARGETS[name](b, ins)
                    pos = comp.instructions.index(ins)
                    comp.instructions[pos:pos] = b.instructions
                    replace_all_uses(comp, ins, new)
                    comp.instructions.remove(ins)
                    changed = True
                    continue
                check_shape_rule(ins, reg, devices["replicas"] * devices["partitions"])
                if not self.decompose_all and ctx.prefer == "kernel" and reg.kernel_for(name, ctx.device):
                    continue
                if name in reg.decompositions:
                    b = Builder(name_hint=ins.name, uniquer=uniq, **devices)
                    root = decompose_into(b, ins, list(ins.operands), reg)
                    pos = comp.instructions.index(ins)
                    comp.instructions[pos:pos] = b.instructions
                    at = module.computations.index(comp)
                    module.computations[at:at] = b.computations
                    replace_all_uses(comp, ins, root)
                    comp.instructions.remove(ins)
                    changed = True
                elif ins.opcode == "call":
                    if self.decompose_all:  # the composite's body is its decomposition
                        ins.attrs.pop("is_composite", None)
                        changed = True
                elif self.decompose_all and reg.kernel_for(name, ctx.device) is not None:
                    owner = reg.kernel_for(name, ctx.device).plugin.name
                    raise HloError(f"custom-call '{ins.name}': op {name} (plugin {owner}) has a "
                                   f"kernel for {ctx.device} but no decomposition, and "
                                   f"--decompose-all lowers every plugin op to core HLO",
                                   line=ins.line, column=ins.column)
                elif self.decompose_all or ins.opcode == "custom-call":
                    if reg.kernel_for(name, ctx.device) is None or self.decompose_all:
                        raise HloError(f"custom-call '{ins.name}': no plugin provides target "
                                       f"'{name}' on {ctx.device} (no kernel for {ctx.device}, no "
                                       f"decomposition); {reg.describe(name)}",
                                       line=ins.line, column=ins.column)
        return changed
