"""The HLO verifier: structure plus XLA's shape rules (shape_inference.py).

`verify_module(module)` raises an HloVerifyError, positioned at the offending instruction, on
the first problem; `verify_module_all(module)` returns every problem (at most one per
instruction).  What is checked, as XLA's HloVerifier does with its default options
(layout-insensitive, no mixed precision):

* the module has an entry computation, and its root/parameters agree with the header's
  `entry_computation_layout` when there is one (layouts ignored);
* every computation has a ROOT, and its parameter numbers are exactly 0..n-1;
* no instruction depends on itself or uses an instruction defined after it (through operands
  or control predecessors), and the call graph has no cycle (verifier_graph.py; XLA's parser
  and verifier reject all three);
* every instruction's operands live in its own computation and its called computations in
  the module; its operand count fits its opcode;
* every instruction's declared shape equals the shape its opcode's rule infers
  (`instruction 'NAME' (opcode): inferred shape f32[2,3] but declared f32[3,2]`), compared
  like XLA's ShapeUtil::Compatible: layouts ignored, a bounded dynamic dimension `<=N`
  matches a static `N` (XLA does not compare dynamism) and `?` matches any size;
* called computations have the parameter counts and signatures their callers need (while,
  conditional, call, map, reduce, sort, scatter, fusion, async...), inside the rules;
* floating-point operands of one instruction share one precision, except for the opcodes
  XLA allow-lists (dot, convolution, tuple, call, ...), unless `allow_mixed_precision`;
* a `?` dimension is declared only where an operand is unbounded (or the opcode's size is
  known only at run time: parameter, custom-call, call, ...): `pred[?] compare(x, x)` of a
  static `x`, or `s32[?,6] broadcast(s32[6])`, is an error, as in XLA's shape inference;
* with `allow_unbounded_dynamism=False` (XLA's default), no `?` dimension at all.  Ours
  defaults to True: jax's shape-polymorphic exports (and the conformance suite) use `?`; a
  `?` size then matches any size in every check, as in XLA's unbounded-dynamism rules.
"""
from __future__ import annotations

from typing import Iterator

from .attr_types import ComputationLayout
from .dtypes import FLOAT_TYPES
from .errors import HloVerifyError
from .ir import UNBOUNDED, Computation, Instruction, Module
from .opcodes import MIXED_PRECISION_OK
from .shape_inference import ShapeInferenceError, compatible, infer_shape, s
from .verifier_graph import (call_graph_cycle_problem, in_definition_order,
                             instruction_cycle_problem, use_before_definition_problem)

# Opcodes whose result may be unbounded with bounded operands: its size comes from the
# inputs (parameter), a computation, or code the verifier does not see.
SIZED_AT_RUN_TIME = frozenset({
    "parameter", "custom-call", "fusion", "call", "conditional", "while", "dynamic-reshape",
    "infeed", "recv", "recv-done", "async-start", "async-update", "async-done",
})


def verify_module(module: Module, *, allow_mixed_precision: bool = False,
                  allow_unbounded_dynamism: bool = True) -> None:
    """Raise HloVerifyError on the first problem in `module`."""
    for err in _problems(module, allow_mixed_precision, allow_unbounded_dynamism):
        raise err


def verify_module_all(module: Module, *, allow_mixed_precision: bool = False,
                      allow_unbounded_dynamism: bool = True) -> list[HloVerifyError]:
    """Every problem in `module` (at most one per instruction), in text order."""
    return list(_problems(module, allow_mixed_precision, allow_unbounded_dynamism))


def verify_instruction(ins: Instruction, *, allow_mixed_precision: bool = False) -> str | None:
    """The problem with one instruction's shape, as a message, or None."""
    try:
        inferred = infer_shape(ins)
    except ShapeInferenceError as e:
        return f"instruction '{ins.name}' ({ins.opcode}): {e}"
    if not allow_mixed_precision and ins.opcode not in MIXED_PRECISION_OK:
        seen = None
        for o in ins.operands:
            shape = o.shape
            for leaf in (shape.leaves() if shape.tuple_shapes else (shape,)):
                t = leaf.element_type
                if t in FLOAT_TYPES:  # is_floating
                    if seen is None:
                        seen = t
                    elif t != seen:
                        return (f"instruction '{ins.name}' ({ins.opcode}): operands mix "
                                f"floating-point types {seen} and {t}, but mixed precision is "
                                f"not allowed")
    # XLA's ShapeUtil::Compatible, a superset of Shape.compatible: it also lets a bounded
    # dynamic dimension match a static one and `?` match any size.
    if not compatible(inferred, ins.shape):
        return (f"instruction '{ins.name}' ({ins.opcode}): inferred shape {s(inferred)} but "
                f"declared {s(ins.shape)}")
    if ins.opcode not in SIZED_AT_RUN_TIME and not any(map(_has_unbounded, ins.operands)):
        k = _first_unbounded(ins.shape)
        if k is not None:
            return (f"instruction '{ins.name}' ({ins.opcode}): dimension {k} is declared "
                    f"unbounded ('?') but no operand is unbounded, so nothing gives its "
                    f"size (inferred {s(inferred)}, declared {s(ins.shape)})")
    return None


def _has_unbounded(o: Instruction) -> bool:
    shape = o.shape
    if not shape.tuple_shapes:
        return UNBOUNDED in shape.dims
    return any(UNBOUNDED in leaf.dims for leaf in shape.leaves())


def _first_unbounded(shape) -> int | None:
    """The first `?` dimension of any array leaf of `shape`, or None.  From operands that are
    all bounded, XLA's shape inference gives a bounded shape (and so the kernels size their
    results by it): a `?` can only come from an unbounded operand or, for the opcodes in
    SIZED_AT_RUN_TIME, from what runs."""
    if not shape.tuple_shapes and UNBOUNDED not in shape.dims:
        return None
    for leaf in shape.leaves():
        if leaf.is_array:
            for k, d in enumerate(leaf.dims):
                if d == UNBOUNDED:
                    return k
    return None


def _error(module: Module, msg: str, where) -> HloVerifyError:
    line = getattr(where, "line", 0) or 0
    col = getattr(where, "column", 0) or 0
    return HloVerifyError(msg, file=module.source, line=line, column=col)


def _problems(module: Module, allow_mixed: bool, allow_unbounded: bool) -> Iterator[HloVerifyError]:
    comps = list(module.computations)
    if not comps:
        yield _error(module, f"module '{module.name}' has no computations", None)
        return
    comp_ids = {id(c) for c in comps}
    if module.entry is None or id(module.entry) not in comp_ids:
        yield _error(module, f"module '{module.name}' has no entry computation", comps[-1])
    names: dict[str, Computation] = {}
    for c in comps:
        if c.name in names:
            yield _error(module, f"duplicate computation name '{c.name}'", c)
        names[c.name] = c
    cycle = call_graph_cycle_problem(module)
    if cycle is not None:
        yield cycle
    for comp in comps:
        yield from _computation_problems(module, comp, comp_ids, allow_mixed, allow_unbounded)
    if module.entry is not None and id(module.entry) in comp_ids:
        yield from _entry_layout_problems(module)


def _computation_problems(module: Module, comp: Computation, comp_ids: set[int],
                          allow_mixed: bool, allow_unbounded: bool) -> Iterator[HloVerifyError]:
    if not comp.instructions:
        yield _error(module, f"computation '{comp.name}' has no instructions", comp)
        return
    members = {id(i) for i in comp.instructions}
    if comp.root is None or id(comp.root) not in members:
        yield _error(module, f"computation '{comp.name}' has no ROOT instruction", comp)
    params = [i for i in comp.instructions if i.opcode == "parameter"]
    numbers: dict[int, Instruction] = {}
    for p in params:
        n = p.parameter_number
        if not isinstance(n, int) or n < 0 or n >= len(params):
            yield _error(module, f"parameter '{p.name}' has number {n}, out of range for "
                                 f"computation '{comp.name}' with {len(params)} parameter"
                                 f"{'s' if len(params) != 1 else ''}", p)
        elif n in numbers:
            yield _error(module, f"parameter '{p.name}' reuses number {n} of "
                                 f"'{numbers[n].name}' in computation '{comp.name}'", p)
        else:
            numbers[n] = p
    # A cycle first (the more telling error: it also uses something defined later).
    if not in_definition_order(comp):
        order = (instruction_cycle_problem(module, comp)
                 or use_before_definition_problem(module, comp))
        if order is not None:
            yield order
    seen_names: set[str] = set()
    for ins in comp.instructions:
        if ins.name in seen_names:
            yield _error(module, f"duplicate instruction name '{ins.name}' in computation "
                                 f"'{comp.name}'", ins)
            continue
        seen_names.add(ins.name)
        msg = _structure_problem(ins, members, comp_ids, comp, allow_unbounded)
        if msg is None:
            msg = verify_instruction(ins, allow_mixed_precision=allow_mixed)
        if msg is not None:
            yield _error(module, msg, ins)


def _structure_problem(ins: Instruction, members: set[int], comp_ids: set[int],
                       comp: Computation, allow_unbounded: bool) -> str | None:
    for k, o in enumerate(ins.operands):
        if id(o) not in members:
            return (f"{_head(ins)}: operand {k} '{o.name}' is not in computation "
                    f"'{comp.name}'")
    for v in ins.attrs.values():  # ins.called_computations(), without its list
        if isinstance(v, Computation):
            if id(v) not in comp_ids:
                return f"{_head(ins)}: calls computation '{v.name}', which is not in the module"
        elif isinstance(v, list) and v and isinstance(v[0], Computation):
            for c in v:
                if id(c) not in comp_ids:
                    return (f"{_head(ins)}: calls computation '{c.name}', which is not in the "
                            f"module")
    if not allow_unbounded and any(d == UNBOUNDED for leaf in ins.shape.leaves()
                                   for d in leaf.dims):
        return f"{_head(ins)}: unbounded dynamic shape {s(ins.shape)} is not allowed"
    return None


def _head(ins: Instruction) -> str:
    return f"instruction '{ins.name}' ({ins.opcode})"


def _entry_layout_problems(module: Module) -> Iterator[HloVerifyError]:
    layout = module.attrs.get("entry_computation_layout")
    # The parser types it (hlo/text/attr_shapes.p_computation_layout); other values were
    # not read from text and carry no layout to check.
    if not isinstance(layout, ComputationLayout):
        return
    params, result = layout.parameters, layout.result
    entry = module.entry
    actual = [p.shape for p in entry.parameters]
    if len(params) != len(actual):
        yield _error(module, f"entry_computation_layout lists {len(params)} "
                             f"parameters but entry computation '{entry.name}' has "
                             f"{len(actual)}", entry)
        return
    for k, (want, got) in enumerate(zip(params, actual)):
        if not compatible(want, got):
            yield _error(module, f"entry computation '{entry.name}' parameter {k} is {s(got)} "
                                 f"but entry_computation_layout says {s(want)}", entry)
    if entry.root is not None and not compatible(result, entry.root.shape):
        yield _error(module, f"entry computation '{entry.name}' returns {s(entry.root.shape)} "
                             f"but entry_computation_layout says {s(result)}", entry.root)
