"""`check-plugins --reference xla`: a plugin op's decomposition, built as a module of its
own and run by XLA:CPU, is the reference its kernel is held against."""
from __future__ import annotations

from ..hlo.ir import Module


def decomposition_module(entry, op: str, shapes, attrs) -> Module:
    """The decomposition of `op` on operands of `shapes` as a module: its entry takes the
    operands as parameters and returns what the decomposition returns."""
    from ..plugin.check import decomposition_computation
    comp, made = decomposition_computation(entry, op, shapes, attrs,
                                           f"{op.replace('.', '_')}_decomposition")
    return Module(f"check_{op.replace('.', '_')}", [*made, comp], comp)


def run_decomposition_on_xla(entry, op: str, shapes, arrays, attrs, ctx=None):
    """XLA:CPU's result of the decomposition on `arrays`: one array, or a tuple of them
    (as the decomposition returns)."""
    from ..hlo.text.printer import module_to_text
    from .jaxlib_names import run_on_xla_cpu
    module = decomposition_module(entry, op, shapes, attrs)
    (outs,) = run_on_xla_cpu(module_to_text(module), [list(arrays)],
                             what="check-plugins --reference xla")
    return tuple(outs) if module.entry.root.shape.is_tuple else outs[0]


run_decomposition_on_xla.where = " on XLA:CPU"  # in check-plugins' detail line
