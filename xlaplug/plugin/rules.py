"""Calling a plugin's shape rule and decomposition for one instruction.

Used by the custom-call lowering pass (check the declared shape, inline the decomposition)
and by the run-time session (a failing kernel falls back to its decomposition, built here as
a stand-alone computation).  A rule's errors name the plugin and point at the instruction.
"""
from __future__ import annotations

from ..hlo.builder import Builder
from ..hlo.errors import HloError
from ..hlo.ir import Computation, Instruction, Shape
from .api import PluginError, bind_call
from .attrs import call_kwargs, op_name
from .registry import Registry


def call_rule(fn, what: str, ins: Instruction, args: list, kwargs: dict):
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


def shape_rule_kwargs(fn, attrs: dict, num_devices: int) -> dict:
    """A shape rule's keyword arguments: the op's attributes, and `num_devices` (the run's
    device count) when the rule names it -- e.g. an all-gather's result depends on it."""
    from .api import _signature_names
    return {**attrs, "num_devices": num_devices} if "num_devices" in _signature_names(fn) \
        else attrs


def check_shape_rule(ins: Instruction, registry: Registry, num_devices: int = 1) -> None:
    name = op_name(ins)
    entry = registry.shapes.get(name)
    if entry is None:
        return
    shapes = [o.shape for o in ins.operands]
    got = call_rule(entry.fn, f"plugin '{entry.plugin.name}' shape rule for '{name}'", ins,
                    shapes, shape_rule_kwargs(entry.fn, call_kwargs(ins), num_devices))
    if isinstance(got, tuple) and not isinstance(got, Shape):
        got = Shape.tuple_of(got)
    if not isinstance(got, Shape) or not got.compatible(ins.shape):
        raise PluginError(f"plugin '{entry.plugin.name}' shape rule for '{name}' gives {got} but "
                          f"instruction '{ins.name}' declares {ins.shape}", line=ins.line,
                          column=ins.column)


def decompose_into(b: Builder, ins: Instruction, operands: list, registry: Registry):
    """Build the instruction's decomposition with `b` over `operands`; its root."""
    name = op_name(ins)
    entry = registry.decompositions[name]
    from .api import _signature_names
    kwargs = call_kwargs(ins)
    if "result_shape" in _signature_names(entry.fn):  # where the attributes leave it open
        kwargs["result_shape"] = ins.shape
    out = call_rule(entry.fn, f"plugin '{entry.plugin.name}' decomposition of '{name}'", ins,
                    [b, *operands], kwargs)
    if isinstance(out, (tuple, list)):
        out = b.tuple(*out)
    if not isinstance(out, Instruction) or not out.shape.compatible(ins.shape):
        got = out.shape if isinstance(out, Instruction) else type(out).__name__
        raise PluginError(f"plugin '{entry.plugin.name}' decomposition of '{name}' gives {got} but "
                          f"instruction '{ins.name}' declares {ins.shape}", line=ins.line,
                          column=ins.column)
    return out


def build_decomposition(ins: Instruction, registry: Registry, replicas: int = 1,
                        partitions: int = 1) -> Computation:
    """The decomposition as a stand-alone computation over the instruction's operands, for a
    run on replicas x partitions devices."""
    b = Builder(name_hint=ins.name, replicas=replicas, partitions=partitions)
    params = [b.parameter(k, o.shape) for k, o in enumerate(ins.operands)]
    root = decompose_into(b, ins, params, registry)
    return Computation(f"{ins.name}.decomposition", b.instructions, root)
