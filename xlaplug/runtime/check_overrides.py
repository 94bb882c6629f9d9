"""check-plugins for a plugin's override of a core opcode, in the HLO modules of its examples:
on the interpreter, against xlaplug's core kernel on the module's devices (check_devices.py's
`_override`); with `--engine xla`, the override kernel inside XLA against XLA's own op.

An override's examples are HLO module texts (as `check-plugins --devices N` takes them:
check_devices.py).  Each one-device module runs on the XLA engine with that override alone
served (xla/override_rewrite.py: its instructions become `xlaplug.override` calls, through
the Python handler), and on XLA:CPU as read (plugin ops decomposed, xla/reference.py), on
the same seeded arguments, `trials` times; every output is compared.  A module where XLA
runs no instruction of the opcode as code checks nothing, and fails saying so.  What cannot
be checked is reported, never passed (`ok` None): an override with no module text among its
examples, and a module for several devices (`check-plugins --devices N` checks those, on the
interpreter).
"""
from __future__ import annotations

import copy

from ..hlo.opcodes import ALL_OPCODES
from ..xla.check_engine import NOT_CHECKABLE
from .check import CheckResult, _close


def alone(session, op: str):
    """A session whose only core-opcode override is `op`'s (the other plugins' ops kept)."""
    from ..plugin.session import Session
    registry = copy.copy(session.registry)
    registry.kernels = {k: e for k, e in session.registry.kernels.items()
                        if k[0] not in ALL_OPCODES or k[0] == op}
    return Session(registry, session.device, session.prefer, session.strict,
                   dict(session.attr_defaults))


def check_override(session, op: str, kentry, trials: int = 3, seed: int = 0,
                   engine: str = "interpreter") -> list[CheckResult]:
    if engine == "xla":
        return check_override_in_xla(session, op, kentry, trials, seed)
    from ..backends.spmd.groups import DeviceGrid
    from ..hlo.text.parser import parse_module
    from .check_devices import _guard, _override
    name = kentry.plugin.name
    texts = [e for e in kentry.examples if isinstance(e, str)]
    if not texts:  # (as check-plugins says of any kernel without examples)
        return [CheckResult(op, name, "-", 0, True, "not checked: no HLO module text in "
                            "examples=[...] to run the override in")]
    out: list[CheckResult] = []
    for k, text in enumerate(texts):
        for trial in range(trials):
            out.append(_guard(lambda: _override(session, op, name, text, DeviceGrid.of_module(
                parse_module(text, f"<{name} example {k}>")).count, seed, trial), op, name,
                f"module {k}", trial))
    return out


def check_override_in_xla(session, op: str, kentry, trials: int = 3,
                          seed: int = 0) -> list[CheckResult]:
    from ..backends.spmd.groups import DeviceGrid
    from ..hlo.errors import HloError
    from ..hlo.text.parser import parse_module
    from ..xla.reference import reference_for_text
    from .inputs import build_inputs
    from .on_xla import EngineProgram
    from .options import RunOptions
    name = kentry.plugin.name
    texts = [e for e in kentry.examples if isinstance(e, str)]
    if not texts:
        return [CheckResult(op, name, "-", 0, None, f"{NOT_CHECKABLE}: an override is checked "
                            "in the HLO modules of its examples=[...], and it gives none")]
    out: list[CheckResult] = []
    only = alone(session, op)
    for k, text in enumerate(texts):
        label = f"module {k}"
        try:
            module = parse_module(text, f"<{name} example {k}>")
            grid = DeviceGrid.of_module(module)
            if grid.count > 1:
                out.append(CheckResult(op, name, label, 0, None, f"{NOT_CHECKABLE}: a module "
                                       f"for {grid.count} devices (check-plugins --devices "
                                       f"{grid.count} checks it)"))
                continue
            program = EngineProgram(text, only)
            if f'op = "{op}"' not in program.text:
                out.append(CheckResult(op, name, label, 0, False, f"the module has no '{op}' "
                                       "instruction XLA runs as code: nothing to check"))
                continue
        except HloError as e:
            out.append(CheckResult(op, name, label, 0, False, e.message))
            continue
        for trial in range(trials):
            def run(trial=trial, module=module, program=program, text=text):
                args = build_inputs(module, None, RunOptions(seed=seed + trial))
                return program.run(args).outputs, reference_for_text(text, only.registry,
                                                                     [args])[0]
            out.append(_trial(op, name, label, trial, run))
    return out


def _trial(op, name, label, trial, run) -> CheckResult:
    from ..hlo.errors import HloError
    try:
        got, want = run()
    except HloError as e:
        return CheckResult(op, name, label, trial, False, e.message)
    except Exception as e:  # noqa: BLE001 -- a plugin's failure is a failed check
        return CheckResult(op, name, label, trial, False, f"{type(e).__name__}: {e}")
    for k, (g, w) in enumerate(zip(got, want)):
        msg = _close(g, w)
        if msg:
            return CheckResult(op, name, label, trial, False, f"output {k}: override kernel "
                               f"in XLA (Python handler) vs XLA's own '{op}': {msg}")
    return CheckResult(op, name, label, trial, True, "override kernel in XLA (Python handler) "
                       f"matches XLA's own '{op}'")
