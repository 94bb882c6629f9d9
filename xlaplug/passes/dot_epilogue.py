"""Dot epilogues: a product whose only reader is an elementwise loop fusion joins it.

    d = f32[512,1024] dot(x, w)                     f = f32[512,1024] fusion(x, w, b),
    f = f32[512,1024] fusion(d, b), kind=kLoop  ->      kind=kOutput, calls=fused_computation
        (fused: add(p0, broadcast(p1)), max 0)         (fused: dot(p0, p1), then the same
                                                         add and max on the dot's result)

as XLA:CPU fuses a bias and an activation into its dot emitter's output (kOutput fusions).
Unfused, the product is written to a buffer of its own and the loop reads it back into a
second one; the fusion's kernel (backends/cpu/dot_epilogue.py) runs the same product kernel
and the same compiled loop, in place on the product's buffer: one buffer and one thunk
fewer, the same bits (each element is computed by the same code from the same values).

A `dot` (or, with `convolution=True`, a `convolution`) joins the loop fusion reading it when
  * the fusion is a loop fusion (kLoop: loop-fusion's, or XLA's) whose body is one
    elementwise loop (fusion_contents.loop_shape) reading the product at the loop index --
    the product has the fusion's number of elements and no broadcast reads it;
  * the fusion is the product's only reader, reads it once, and the product is not the
    computation's root; neither has control edges; no loaded plugin overrides the opcode
    (the plugin's kernel must run as an instruction of its own);
  * the product has at least `min_elements` elements;
  * the computation is not a while loop's body or condition: those run as one compiled
    function (backends/cpu/compiled_while.py), where a fusion changes nothing.
The pass runs on the CPU only (the CUDA fusion kernel runs no product), after loop-fusion.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..backends.common.fusion_contents import loop_shape, n_elements
from ..hlo.attr_types import Word
from ..hlo.ir import Computation, Instruction, Module
from ..hlo.rewrite import NameUniquer
from .context import PassContext

PRODUCTS = frozenset({"dot", "convolution"})


@dataclass
class DotEpilogue:
    name: ClassVar[str] = "dot-epilogue"
    # Products of fewer elements keep their elementwise consumers apart.
    min_elements: int = 2
    # Convolutions take their epilogue too (one GEMM over patches: convolution.py).
    convolution: bool = True

    def run(self, module: Module, ctx: PassContext) -> bool:
        from ..backends.backend import backend_for, is_backend
        if not (is_backend(ctx.device) and backend_for(ctx.device).output_fusions):
            return False
        opcodes = PRODUCTS if self.convolution else frozenset({"dot"})
        opcodes = opcodes - ctx.registry.overridden_opcodes()
        if not opcodes:
            return False
        callers = _callers(module)
        loops = {id(c) for comp in module.computations for i in comp.instructions
                 if i.opcode == "while" for c in i.called_computations()}
        uniq = NameUniquer(module)
        changed = False
        for comp in module.computations:
            if id(comp) in loops or callers.get(id(comp), ("",))[0] == "fusion":
                continue
            changed |= _fuse_in(comp, opcodes, self.min_elements, callers, uniq)
        return changed


def _callers(module: Module) -> dict[int, tuple[str, int]]:
    """id(computation) -> (opcode of a caller, how many instructions call it)."""
    out: dict[int, tuple[str, int]] = {}
    for comp in module.computations:
        for ins in comp.instructions:
            for c in ins.called_computations():
                out[id(c)] = (ins.opcode, out.get(id(c), ("", 0))[1] + 1)
    return out


def _fuse_in(comp: Computation, opcodes: frozenset, min_elements: int, callers,
             uniq: NameUniquer) -> bool:
    users = comp.users()
    moved: set[int] = set()
    for f in comp.instructions:
        if f.opcode != "fusion" or str(f.attrs.get("kind", "")) != "kLoop" \
                or f.control_predecessors or not f.shape.is_array:
            continue
        body = f.attrs["calls"][0]
        if callers.get(id(body), ("", 0))[1] != 1:
            continue
        roles = loop_shape(body)
        if roles is None:
            continue
        n = n_elements(f.shape)
        for k, d in enumerate(f.operands):
            if d.opcode in opcodes and roles[k] == "array" and n_elements(d.shape) == n \
                    and n >= max(min_elements, 2) and d is not comp.root \
                    and not d.control_predecessors and users.get(d) == [f] \
                    and sum(o is d for o in f.operands) == 1:
                _absorb(f, k, d, uniq)
                moved.add(id(d))
                break
    if moved:
        comp.instructions = [i for i in comp.instructions if id(i) not in moved]
    return bool(moved)


def _absorb(f: Instruction, k: int, d: Instruction, uniq: NameUniquer) -> None:
    """Move product `d` (operand k of loop fusion f) into f's body, its operands becoming
    f's operands (each outside value one parameter), and make f a kOutput fusion."""
    body: Computation = f.attrs["calls"][0]
    old = body.parameters
    outside: list[Instruction] = []
    params: list[Instruction] = []
    seen: dict[int, Instruction] = {}

    def param(v: Instruction, reuse: Instruction | None = None) -> Instruction:
        if id(v) in seen:
            return seen[id(v)]
        p = reuse if reuse is not None else Instruction(
            uniq(f"param_{len(outside)}"), "parameter", v.shape)
        p.parameter_number = len(outside)
        outside.append(v)
        params.append(p)
        seen[id(v)] = p
        return p

    d.operands = [param(o) for o in d.operands]
    replace: dict[int, Instruction] = {id(old[k]): d}
    for j, (v, p) in enumerate(zip(f.operands, old)):
        if j != k:
            q = param(v, reuse=p)
            if q is not p:
                replace[id(p)] = q
    rest = [i for i in body.instructions if i.opcode != "parameter"]
    for ins in rest:
        if any(id(o) in replace for o in ins.operands):
            ins.operands = [replace.get(id(o), o) for o in ins.operands]
    body.instructions = params + [d] + rest
    if id(body.root) in replace:
        body.root = replace[id(body.root)]
    f.operands = outside
    f.attrs["kind"] = Word("kOutput")
