"""Excess precision: bf16 results that XLA:CPU hands on in f32 where the HLO widens them.

XLA:CPU computes no bf16 arithmetic in bf16.  Its FloatNormalization pass (FloatSupport(BF16):
only convert, tuple plumbing, control flow and custom calls take bf16 as such) rewrites every
other instruction with a bf16 result into the f32 instruction on f32 copies of its operands
(exact widenings) followed by a `convert` back to bf16, so that each bf16 result is rounded to
bf16 once, where the HLO states it: after every op, inside fusions too (the fusion emitters
compute the converts the HLO holds; nothing is rounded only at fusion outputs).  With
`--xla_allow_excess_precision` (XLA's default: true) one rounding is skipped: a user of the
rewritten instruction that is itself a `convert` to f32 -- the HLO's own widening, as jax's
`.astype(jnp.float32)` prints it -- is replaced by the f32 result, so it sees the value before
rounding.  Users of any other kind (another bf16 op, a convert to f16 or f64, the root) get the
rounded value, and the widening of a value that passed through anything first (a reshape, a
second op) widens the rounded value: only the direct `op -> convert(f32)` pair is affected.
XLA's algebraic simplifier removes only value-preserving convert pairs (bf16 -> f32 -> bf16),
never the f32 -> bf16 -> f32 round trips the normalization leaves, and XLA:CPU runs no
SimplifyFPConversions (outside its oneDNN path), so no other rounding is skipped.

This pass makes that one exception explicit: for an instruction computing a bf16 result that
rounds (ROUNDING_OPS) with at least one `convert`-to-f32 user, the instruction becomes its f32
form on widened operands, those converts are replaced by it, and the other users read a new
`convert` back to bf16.  Ops whose result is exact in bf16 anyway (max, abs, select, data
movement, reduce -- whose reducer XLA rounds to bf16 at every step) are left alone, as are the
reducer bodies of reduce-like ops (XLA rounds every step there).  f16 needs nothing: XLA:CPU
keeps f16 elementwise ops in f16 (one rounding per op, whatever the flag) and runs f16 dots
and convolutions in f32 whatever the flag (ChangeOpDataType, unless
--xla_cpu_strict_dot_conv_math), as xlaplug's kernels do.

Off (`--no-excess-precision`, `excess_precision=False`): every bf16 result rounded as the HLO
states, XLA:CPU's numerics under XLA_FLAGS=--xla_allow_excess_precision=false.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from ..hlo.ir import Computation, Instruction, Module
from ..hlo.rewrite import NameUniquer, replace_all_uses
from .context import PassContext

LOW, HIGH = "bf16", "f32"
# Ops whose f32 result on bf16-exact operands is not, in general, bf16-exact: the ones
# where skipping the rounding to bf16 changes a value.
ROUNDING_OPS = frozenset({
    "add", "subtract", "multiply", "divide", "power", "atan2", "sqrt", "rsqrt", "cbrt",
    "exponential", "exponential-minus-one", "log", "log-plus-one", "logistic", "tanh",
    "sine", "cosine", "tan", "erf", "dot", "convolution",
})
# Ops whose called computation is a reducer/comparator applied element by element.
_REDUCER_CALLERS = frozenset({"reduce", "reduce-window", "scatter", "select-and-scatter",
                              "sort", "map", "all-reduce", "reduce-scatter",
                              "all-reduce-start"})


def _widening(ins: Instruction) -> bool:
    return (ins.opcode == "convert" and ins.shape.is_array
            and ins.shape.element_type == HIGH)


def _with_type(ins_shape, element_type: str):
    return dataclasses.replace(ins_shape, element_type=element_type)


def _keep_f32(comp: Computation, ins: Instruction, widenings: list[Instruction],
              others: list[Instruction], uniq: NameUniquer) -> None:
    """`ins` computed in f32 on widened operands; `widenings` replaced by it; `others`
    (its remaining users) read it rounded back to bf16."""
    pos = comp.instructions.index(ins)
    upcasts: dict[int, Instruction] = {}
    for o in ins.operands:
        if o.shape.is_array and o.shape.element_type == LOW and id(o) not in upcasts:
            upcasts[id(o)] = Instruction(uniq(f"{o.name}.{HIGH}"), "convert",
                                         _with_type(o.shape, HIGH), [o])
    ins.operands = [upcasts.get(id(o), o) for o in ins.operands]
    low_shape = ins.shape
    ins.shape = _with_type(low_shape, HIGH)
    rounded = Instruction(uniq(f"{ins.name}.{LOW}"), "convert", low_shape, [ins])
    if comp.root is ins:
        comp.root = rounded
    for user in others:
        user.operands = [rounded if o is ins else o for o in user.operands]
    for conv in widenings:
        replace_all_uses(comp, conv, ins)  # the root too, if a widening was the root
    gone = {id(c) for c in widenings}  # users of `ins`: all after it
    comp.instructions = (comp.instructions[:pos] + list(upcasts.values()) + [ins]
                         + ([rounded] if comp.root is rounded or others else [])
                         + [i for i in comp.instructions[pos + 1:] if id(i) not in gone])


def _rewrite(comp: Computation, uniq: NameUniquer) -> bool:
    users = comp.users()
    changed = False
    for ins in list(comp.instructions):
        if (ins.opcode not in ROUNDING_OPS or not ins.shape.is_array
                or ins.shape.element_type != LOW):
            continue
        mine = users.get(ins, [])
        widenings = [u for u in mine if _widening(u) and not u.control_predecessors]
        if not widenings:
            continue
        others = [u for u in dict.fromkeys(mine) if u not in widenings]
        _keep_f32(comp, ins, widenings, others, uniq)
        changed = True
    return changed


@dataclass
class ExcessPrecision:
    name: ClassVar[str] = "excess-precision"

    def run(self, module: Module, ctx: PassContext) -> bool:
        reducers = {id(c) for comp in module.computations for i in comp.instructions
                    if i.opcode in _REDUCER_CALLERS for c in i.called_computations()}
        uniq = NameUniquer(module)
        changed = False
        for comp in module.computations:
            if id(comp) not in reducers:
                changed |= _rewrite(comp, uniq)
        return changed
