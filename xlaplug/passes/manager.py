"""The pass registry and pass manager.

A pass is a small named object with `run(module) -> bool` (True when it changed the module).
Passes register by name; a pipeline is a list of names.  Plugins add passes with
`register_pass(..., after="dce")`, which also places them in the default pipeline.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from ..hlo.errors import HloError
from ..hlo.ir import Module


class HloPass(Protocol):
    name: str

    def run(self, module: Module) -> bool: ...


PASSES: dict[str, Callable[[], HloPass]] = {}
DEFAULT_PIPELINE: list[str] = []


def register_pass(name: str, factory: Callable[[], HloPass], *, default: bool = False,
                  after: str | None = None) -> None:
    if after is not None:
        _load_builtin()
    if name in PASSES:
        raise ValueError(f"pass '{name}' is already registered")
    PASSES[name] = factory
    if after is not None:
        if after not in DEFAULT_PIPELINE:
            raise ValueError(f"pass '{name}' wants to run after '{after}', which is not in the "
                             f"default pipeline ({', '.join(DEFAULT_PIPELINE)})")
        DEFAULT_PIPELINE.insert(DEFAULT_PIPELINE.index(after) + 1, name)
    elif default:
        DEFAULT_PIPELINE.append(name)


def unregister_pass(name: str) -> None:
    PASSES.pop(name, None)
    if name in DEFAULT_PIPELINE:
        DEFAULT_PIPELINE.remove(name)


def resolve_pipeline(spec: str | None) -> list[str]:
    """`None` -> the default pipeline; "none" -> no passes; "a,b" -> exactly those."""
    _load_builtin()
    if spec is None:
        return list(DEFAULT_PIPELINE)
    if spec.strip() == "none":
        return []
    names = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in PASSES]
    if unknown:
        raise HloError(f"unknown pass '{unknown[0]}' (known passes: {', '.join(sorted(PASSES))})")
    return names


@dataclass
class PassManager:
    pipeline: list[str]
    verify_each: bool = False
    dump_dir: Path | None = None
    # Per-pass options: {"custom-call-lowering": {"decompose_all": True}}.
    options: dict = field(default_factory=dict)
    log: list[tuple[str, bool]] = field(default_factory=list)

    def run(self, module: Module) -> bool:
        from ..hlo.printer import module_to_text
        from ..hlo.verifier import verify_module
        changed_any = False
        if self.dump_dir is not None:
            self.dump_dir.mkdir(parents=True, exist_ok=True)
            (self.dump_dir / "00-input.hlo").write_text(module_to_text(module))
        for n, name in enumerate(self.pipeline, start=1):
            p = PASSES[name]()
            for k, v in self.options.get(name, {}).items():
                setattr(p, k, v)
            changed = bool(p.run(module))
            self.log.append((name, changed))
            changed_any |= changed
            if self.verify_each:
                try:
                    verify_module(module)
                except HloError as e:
                    raise HloError(f"module fails verification after pass '{name}': "
                                   f"{e.message}") from None
            if self.dump_dir is not None:
                (self.dump_dir / f"{n:02d}-{name}.hlo").write_text(module_to_text(module))
        return changed_any


_LOADED = False


def _load_builtin() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    from . import (custom_call_lowering, dce, inline_calls, loop_fusion,  # noqa: F401
                   tuple_simplify)
    # Lower plugin ops first (their decompositions are core HLO the rest can clean up);
    # inline calls so the tuple plumbing becomes visible, fold it, sweep, then fuse
    # elementwise chains on large arrays into loops.
    DEFAULT_PIPELINE[:0] = ["custom-call-lowering", "inline-calls", "tuple-simplify", "dce",
                            "loop-fusion"]
