"""Custom-call lowering: each plugin op becomes a plugin thunk or its decomposition.

For every custom-call (and composite call) naming a plugin op:
  - check the plugin's shape rule against the declared shape;
  - a kernel for the session's device (and --prefer kernel): keep it, the executor runs
    the kernel as a plugin thunk;
  - else a decomposition: inline it in place as core HLO;
  - else (custom-call only): an error naming the target, the device and what the loaded
    plugins do provide.  A composite with no plugin keeps its body, like a call.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..hlo.builder import Builder
from ..hlo.errors import HloError
from ..hlo.ir import Computation, Instruction, Module, Shape
from ..hlo.rewrite import NameUniquer, replace_all_uses
from ..plugin.loader import PluginError, Registry, bind_call
from ..plugin.attrs import call_kwargs, op_name
from .manager import register_pass



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


def _call_rule(fn, what: str, ins: Instruction, args: list, kwargs: dict):
    """A plugin's shape rule or decomposition: its errors name it and point at `ins`."""
    try:
        return bind_call(fn, what, args, kwargs)
    except HloError as e:
        if not e.line:
            e.message = f"instruction '{ins.name}': {e.message}"
            e.args = (e.message,)
            e.line, e.column = ins.line, ins.column
        raise
    except Exception as e:  # the plugin's own bug or refusal: no traceback at the CLI
        raise PluginError(f"{what} raised {type(e).__name__}: {e} (instruction '{ins.name}')",
                          line=ins.line, column=ins.column) from e


def check_shape_rule(ins: Instruction, registry: Registry) -> None:
    name = op_name(ins)
    entry = registry.shapes.get(name)
    if entry is None:
        return
    shapes = [o.shape for o in ins.operands]
    got = _call_rule(entry.fn, f"plugin '{entry.plugin.name}' shape rule for '{name}'", ins,
                     shapes, call_kwargs(ins))
    if isinstance(got, tuple) and not isinstance(got, Shape):
        got = Shape.tuple_of(got)
    if not isinstance(got, Shape) or not got.compatible(ins.shape):
        raise PluginError(f"plugin '{entry.plugin.name}' shape rule for '{name}' gives {got} but "
                          f"instruction '{ins.name}' declares {ins.shape}", line=ins.line,
                          column=ins.column)


def _decompose_into(b: Builder, ins: Instruction, operands: list, registry: Registry):
    name = op_name(ins)
    entry = registry.decompositions[name]
    out = _call_rule(entry.fn, f"plugin '{entry.plugin.name}' decomposition of '{name}'", ins,
                     [b, *operands], call_kwargs(ins))
    if isinstance(out, (tuple, list)):
        out = b.tuple(*out)
    if not isinstance(out, Instruction) or not out.shape.compatible(ins.shape):
        got = out.shape if isinstance(out, Instruction) else type(out).__name__
        raise PluginError(f"plugin '{entry.plugin.name}' decomposition of '{name}' gives {got} but "
                          f"instruction '{ins.name}' declares {ins.shape}", line=ins.line,
                          column=ins.column)
    return out


def build_decomposition(ins: Instruction, registry: Registry) -> Computation:
    """The decomposition as a stand-alone computation over the instruction's operands."""
    b = Builder(name_hint=ins.name)
    params = [b.parameter(k, o.shape) for k, o in enumerate(ins.operands)]
    root = _decompose_into(b, ins, params, registry)
    return Computation(f"{ins.name}.decomposition", b.instructions, root)


@dataclass
class CustomCallLowering:
    name: str = "custom-call-lowering"
    session: object = None
    decompose_all: bool = False

    def run(self, module: Module) -> bool:
        from ..plugin.session import ACTIVE
        s = self.session or ACTIVE
        uniq = NameUniquer(module)
        changed = False
        for comp in module.computations:
            for ins in list(comp.instructions):
                name = op_name(ins)
                if name is None:
                    continue
                reg: Registry = s.registry
                if ins.opcode == "custom-call" and name in _BUILTIN_TARGETS and \
                        reg.kernel_for(name, s.device) is None and name not in reg.decompositions:
                    b = Builder(name_hint=ins.name, uniquer=uniq)
                    new = _BUILTIN_TARGETS[name](b, ins)
                    pos = comp.instructions.index(ins)
                    comp.instructions[pos:pos] = b.instructions
                    replace_all_uses(comp, ins, new)
                    comp.instructions.remove(ins)
                    changed = True
                    continue
                check_shape_rule(ins, reg)
                if not self.decompose_all and s.prefer == "kernel" and reg.kernel_for(name, s.device):
                    continue
                if name in reg.decompositions:
                    b = Builder(name_hint=ins.name, uniquer=uniq)
                    root = _decompose_into(b, ins, list(ins.operands), reg)
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
                elif self.decompose_all or ins.opcode == "custom-call":
                    if reg.kernel_for(name, s.device) is None or self.decompose_all:
                        raise HloError(f"custom-call '{ins.name}': no plugin provides target "
                                       f"'{name}' on {s.device} (no kernel for {s.device}, no "
                                       f"decomposition); {reg.describe(name)}",
                                       line=ins.line, column=ins.column)
        return changed


register_pass("custom-call-lowering", CustomCallLowering)
