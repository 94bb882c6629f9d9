"""The pass table, pipeline specs and the pass manager.

The built-in passes are a fixed table (`BUILTIN_PASSES`, name -> pass class); a session's
plugins add theirs through its registry (`@plugin.hlo_pass(name, after="dce")` places the
pass in the default pipeline), so loading plugins changes no table here.

A pipeline spec is `None` (the default pipeline), "none" (no passes) or a comma-separated
list of names, each optionally with options in braces, as MLIR and xDSL write them:
`dce,loop-fusion{min_elements=1}`.  An option is a field of the pass's dataclass; its value
is read as that field's type (int, float, bool as true/false, str).
"""
from __future__ import annotations

import dataclasses
import gc
import importlib
import re
import typing
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..hlo.errors import HloError
from ..hlo.ir import Module
from ..plugin.api import PluginError
from ..plugin.registry import PluginPass, Registry
from .context import HloPass, PassContext


class _PassTable(Mapping):
    """The built-in passes, name -> pass class, each class imported when first looked up:
    a command that runs no pass (`compile --passes none`) imports none of them, nor what
    they import (the fusions' planners, the builder: 15 ms)."""
    _WHERE = {"sdy-shard-map": ("sdy_shard_map", "SdyShardMap"),
              "custom-call-lowering": ("custom_call_lowering", "CustomCallLowering"),
              "inline-calls": ("inline_calls", "CallInlining"),
              "tuple-simplify": ("tuple_simplify", "TupleSimplification"),
              "dce": ("dce", "DeadCodeElimination"),
              "excess-precision": ("excess_precision", "ExcessPrecision"),
              "reduce-fusion": ("reduce_fusion", "ReduceFusion"),
              "loop-fusion": ("loop_fusion", "LoopFusion"),
              "dot-epilogue": ("dot_epilogue", "DotEpilogue"),
              "small-regions": ("small_regions", "SmallRegions")}

    def __getitem__(self, name: str) -> type:
        module, cls = self._WHERE[name]
        return getattr(importlib.import_module(f".{module}", __package__), cls)

    def __contains__(self, name) -> bool:  # Mapping's would import the pass
        return name in self._WHERE

    def __iter__(self):
        return iter(self._WHERE)

    def __len__(self) -> int:
        return len(self._WHERE)


BUILTIN_PASSES = _PassTable()
# Gather jax's shard_map regions into one instruction each (their bodies run per device);
# lower plugin ops (their decompositions are core HLO the rest can clean up); inline
# calls so the tuple plumbing becomes visible, fold it, sweep; keep in f32 the bf16 results
# XLA:CPU keeps in f32 (its default numerics; `--no-excess-precision` drops this pass); then
# fuse row reductions with their producers and consumers, and elementwise chains on large
# arrays into loops (after excess-precision, so an f32 multiply-add it exposes contracts
# into an FMA as in XLA's fusions); then give a product the loop fusion that is its only
# reader (its bias and activation: one buffer and one thunk fewer); last, runs of the
# entry's instructions on small arrays become one compiled function each.
DEFAULT_PIPELINE = ("sdy-shard-map", "custom-call-lowering", "inline-calls",
                    "tuple-simplify", "dce", "excess-precision", "reduce-fusion",
                    "loop-fusion", "dot-epilogue", "small-regions")
# The portable artifact (`compile --decompose-all`, `--passes portable`): HLO as XLA takes
# it before its own passes.  Every plugin op is replaced by its decomposition, a
# composite's call by its body (inlined, as XLA's own call inliner would), and what that
# leaves unused is swept; nothing of xlaplug's own optimization runs (no fusions, no
# shard_map gathering), since XLA:TPU, for one, refuses a `fusion` in its input, and
# every backend runs its own pipeline anyway.
PORTABLE_PIPELINE = ("custom-call-lowering{decompose_all=true,keep_sharding=true}",
                     "inline-calls", "dce")


class PassSpecError(HloError):
    """A bad pipeline spec (unknown pass, option or value): a usage error, not about the
    module's text, so it names no file."""

    def headline(self) -> str:
        return f"error: {self.message}"


@dataclass
class PluginFunctionPass:
    """A plugin's pass function, run as a pass (it takes no options)."""
    plugin_pass: PluginPass

    @property
    def name(self) -> str:
        return self.plugin_pass.name

    def run(self, module: Module, ctx: PassContext) -> bool:
        return bool(self.plugin_pass.fn(module))


def _plugin_passes(registry: Registry | None) -> dict[str, PluginPass]:
    found = dict(registry.passes) if registry is not None else {}
    for name, p in found.items():
        if name in BUILTIN_PASSES:
            raise PluginError(f"plugin '{p.plugin.name}': pass '{name}' is already registered "
                              f"(a built-in pass)")
    return found


def default_pipeline(registry: Registry | None = None) -> list[str]:
    """The default pipeline's pass names, with the registry's plugin passes placed after
    the passes they name."""
    names = list(DEFAULT_PIPELINE)
    for name, p in _plugin_passes(registry).items():
        if p.after is None:
            continue
        if p.after not in names:
            raise PluginError(f"plugin '{p.plugin.name}': pass '{name}' wants to run after "
                              f"'{p.after}', which is not in the default pipeline "
                              f"({', '.join(names)})")
        names.insert(names.index(p.after) + 1, name)
    return names


_ITEM = re.compile(r"\s*([A-Za-z0-9_.-]+)\s*(?:\{(.*)\})?\s*", re.S)


def parse_pipeline(spec: str) -> list[tuple[str, dict[str, str]]]:
    """`a,b{x=1 y=2}` -> [("a", {}), ("b", {"x": "1", "y": "2"})] (option text, untyped)."""
    items, depth, start = [], 0, 0
    for i, c in enumerate(spec + ","):
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth < 0:
                raise PassSpecError(f"--passes '{spec}': '}}' without its '{{'")
        elif c == "," and depth == 0:
            items.append(spec[start:i])
            start = i + 1
    if depth:
        raise PassSpecError(f"--passes '{spec}': '{{' without its closing '}}'")
    out = []
    for item in items:
        if not item.strip():
            continue
        m = _ITEM.fullmatch(item)
        if m is None:
            raise PassSpecError(f"--passes: cannot read '{item.strip()}': expected NAME or "
                           f"NAME{{option=value ...}}")
        opts: dict[str, str] = {}
        for word in re.split(r"[\s,]+", (m.group(2) or "").strip()):
            if not word:
                continue
            key, eq, value = word.partition("=")
            if not eq or not key:
                raise PassSpecError(f"pass '{m.group(1)}': cannot read option '{word}': expected "
                               f"name=value")
            opts[key.replace("-", "_")] = value
        out.append((m.group(1), opts))
    return out


def _typed(pass_name: str, option: str, kind, text: str):
    try:
        if kind is bool:
            if text.lower() in ("true", "1"):
                return True
            if text.lower() in ("false", "0"):
                return False
            raise ValueError
        if kind in (int, float, str):
            return kind(text)
    except ValueError:
        pass
    noun = {bool: "true or false", int: "an integer", float: "a number"}.get(kind, kind)
    raise PassSpecError(f"pass '{pass_name}': option '{option}' takes {noun}, not '{text}'")


def make_pass(name: str, options: dict[str, str], registry: Registry | None = None) -> HloPass:
    """The pass named `name`, its options (text) read as its dataclass fields' types."""
    plugin = _plugin_passes(registry)
    if name in plugin:
        if options:
            raise PassSpecError(f"pass '{name}' takes no options (a plugin pass), got "
                           f"'{next(iter(options))}'")
        return PluginFunctionPass(plugin[name])
    cls = BUILTIN_PASSES.get(name)
    if cls is None:
        known = sorted({*BUILTIN_PASSES, *plugin})
        raise PassSpecError(f"unknown pass '{name}' (known passes: {', '.join(known)})")
    hints = typing.get_type_hints(cls)
    fields = {f.name: hints[f.name] for f in dataclasses.fields(cls)}
    values = {}
    for key, text in options.items():
        if key not in fields:
            have = f"its options: {', '.join(fields)}" if fields else "it takes no options"
            raise PassSpecError(f"pass '{name}' has no option '{key}' ({have})")
        values[key] = _typed(name, key, fields[key], text)
    return cls(**values)


def resolve_pipeline(spec: str | None, registry: Registry | None = None) -> list[HloPass]:
    """`None` -> the default pipeline; "none" -> no passes; "portable" -> the portable
    artifact's (PORTABLE_PIPELINE); "a,b{opt=v}" -> exactly those.
    `registry`: the session's plugins, whose passes may be named and join the default."""
    if spec is None:
        return [make_pass(n, {}, registry) for n in default_pipeline(registry)]
    if spec.strip() == "none":
        return []
    if spec.strip() == "portable":
        spec = ",".join(PORTABLE_PIPELINE)
    return [make_pass(n, opts, registry) for n, opts in parse_pipeline(spec)]


@contextmanager
def cyclic_gc_paused():
    """Python's cyclic collector off while passes run, then as it was.  A module is a large
    graph of long-lived objects, and passes allocate many: each collection would walk the
    whole module again (a third of the default pipeline's time at 40,000 instructions).
    Passes make no garbage cycles -- reference counting frees what they drop -- so pausing
    it costs no memory.  Process-wide, but never left off: whoever turned it off turns it
    back on -- and then hands what the block made straight to the oldest generation
    (`promote_to_oldest`)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            promote_to_oldest()
            gc.enable()


def promote_to_oldest() -> None:
    """Every object the collector tracks moved to its oldest generation, unexamined.  After
    a paused block the youngest generation holds all it made -- a whole module, 90,000
    tracked objects at 22,500 instructions -- and the first allocation once the collector
    is back would walk them all to free nothing (30 ms of a 0.75 s `compile`).  They are
    long-lived, so they go where long-lived objects end up anyway; any cycle among them is
    freed by the next full collection.  gc.freeze() then gc.unfreeze() does it in constant
    time (two list splices).  Not when someone else has frozen objects: unfreeze would thaw
    theirs."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()


@dataclass
class PassManager:
    pipeline: list[HloPass]
    verify_each: bool = False
    dump_dir: Path | None = None
    log: list[tuple[str, bool]] = field(default_factory=list)

    def run(self, module: Module, ctx: PassContext) -> bool:
        with cyclic_gc_paused():
            return self._run(module, ctx)

    def _run(self, module: Module, ctx: PassContext) -> bool:
        from ..hlo.text.printer import module_to_text
        from ..hlo.verifier import verify_module
        changed_any = False
        if self.dump_dir is not None:
            self.dump_dir.mkdir(parents=True, exist_ok=True)
            (self.dump_dir / "00-input.hlo").write_text(module_to_text(module))
        for n, p in enumerate(self.pipeline, start=1):
            changed = bool(p.run(module, ctx))
            self.log.append((p.name, changed))
            changed_any |= changed
            if self.verify_each:
                try:
                    verify_module(module)
                except HloError as e:
                    raise HloError(f"module fails verification after pass '{p.name}': "
                                   f"{e.message}") from None
            if self.dump_dir is not None:
                (self.dump_dir / f"{n:02d}-{p.name}.hlo").write_text(module_to_text(module))
        return changed_any
