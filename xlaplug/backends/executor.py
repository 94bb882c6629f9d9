"""A direct interpreter over computations: the reference executor kernels plug into.

`run_module(module, args)` evaluates the entry computation with numpy values.  Side-effecting
instructions the ROOT does not reach still run, in program order.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..hlo.ir import Computation, Instruction, Module
from .cpu.structural import ExecutionError
from .registry import lookup


def schedule(comp: Computation) -> list[Instruction]:
    """Instructions in an order where operands and control predecessors come first."""
    order: list[Instruction] = []
    state: dict[int, int] = {}
    for start in comp.instructions:
        if id(start) in state:
            continue
        stack = [(start, False)]
        while stack:
            ins, done = stack.pop()
            if done:
                state[id(ins)] = 2
                order.append(ins)
                continue
            if id(ins) in state:
                continue
            state[id(ins)] = 1
            stack.append((ins, True))
            for dep in reversed(ins.operands + ins.control_predecessors):
                s = state.get(id(dep))
                if s == 1:
                    raise ExecutionError(f"cycle through instruction '{dep.name}'")
                if s is None:
                    stack.append((dep, False))
    return order


class ExecContext:
    def __init__(self, device: str = "cpu", options: dict | None = None):
        self.device = device
        self.options = options or {}
        self._schedules: dict[int, list[Instruction]] = {}
        self._scalar_fns: dict[int, Any] = {}

    def run(self, comp: Computation, args: list) -> Any:
        order = self._schedules.get(id(comp))
        if order is None:
            order = self._schedules[id(comp)] = schedule(comp)
        params = comp.parameters
        if len(args) != len(params):
            raise ExecutionError(f"computation '{comp.name}' takes {len(params)} arguments, "
                                 f"got {len(args)}")
        values: dict[int, Any] = {}
        for p, a in zip(params, args):
            values[id(p)] = a
        for ins in order:
            if ins.opcode == "parameter":
                continue
            values[id(ins)] = self.execute(ins, [values[id(o)] for o in ins.operands])
        return values[id(comp.root)]

    def execute(self, ins: Instruction, args: list) -> Any:
        if ins.opcode == "constant":
            if ins.literal_elided:
                raise ExecutionError(f"constant '{ins.name}' has an elided literal ({{...}}): "
                                     "its values are not in the module")
            return ins.literal
        fn = lookup(ins.opcode, self.device)
        if fn is None:
            if ins.opcode == "custom-call":
                raise ExecutionError(f"custom-call '{ins.name}': no plugin provides target "
                                     f"'{ins.attrs.get('custom_call_target', '?')}' on "
                                     f"{self.device}")
            raise ExecutionError(f"opcode '{ins.opcode}' (instruction '{ins.name}') has no "
                                 f"{self.device} kernel")
        return fn(ins, args, self)

    def scalar_fn(self, comp: Computation):
        fn = self._scalar_fns.get(id(comp))
        if fn is None:
            from .cpu.scalar_jit import compile_scalar_computation
            fn = self._scalar_fns[id(comp)] = compile_scalar_computation(comp)
        return fn


def run_module(module: Module, args: list, device: str = "cpu", **options) -> Any:
    ctx = ExecContext(device, options)
    return ctx.run(module.entry, [np.asarray(a) if not isinstance(a, tuple) else a for a in args])
