"""What a pass may read besides the module it rewrites.

A pass is a small dataclass whose fields are its options (`LoopFusion(min_elements=1)`,
`loop-fusion{min_elements=1}` on the command line) and whose `run(module, ctx)` returns
True when it changed the module.  `ctx` is a PassContext: the plugin registry, device and
preference of the session compiling -- passed in, never looked up, so two sessions may
compile at once.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from ..hlo.ir import Module
from ..plugin.registry import Registry


@dataclass(frozen=True)
class PassContext:
    registry: Registry = field(default_factory=Registry)
    device: str = "cpu"
    prefer: str = "kernel"       # or "decomposition"

    @classmethod
    def of(cls, session) -> "PassContext":
        """The pass context of a plugin Session (its registry, device and prefer)."""
        return cls(session.registry, session.device, session.prefer)


class HloPass(Protocol):
    name: ClassVar[str]

    def run(self, module: Module, ctx: PassContext) -> bool: ...
