"""What the loaded plugins of one session provide: ops, kernels per device, core-opcode
overrides and passes.  A Registry belongs to whoever loaded it (a session); nothing here is
process-wide, so two sessions in one process may hold different plugin sets."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..hlo.opcodes import ALL_OPCODES
from .api import OpEntry, Plugin, PluginError


@dataclass
class LoadRecord:
    source: str
    plugins: list[Plugin]
    error: str | None = None


@dataclass(frozen=True)
class PluginPass:
    """A plugin's `@plugin.hlo_pass(name, after=...)`: the pass pipeline of a session whose
    registry holds it runs `fn(module)` after the pass named `after` (None: only when a
    `--passes` list names it)."""
    name: str
    fn: Callable
    after: str | None
    plugin: Plugin


class Registry:
    """Everything the loaded plugins provide, keyed by op name (and device)."""

    def __init__(self):
        self.records: list[LoadRecord] = []
        self.shapes: dict[str, OpEntry] = {}
        self.decompositions: dict[str, OpEntry] = {}
        self.kernels: dict[tuple[str, str], OpEntry] = {}
        self.replaced: dict[tuple[str, str], list[OpEntry]] = {}
        self.passes: dict[str, PluginPass] = {}
        self.vjps: dict[str, OpEntry] = {}  # jax reverse-mode rules (xla/jax_op.py)

    def snapshot(self):
        return (dict(self.shapes), dict(self.decompositions), dict(self.kernels),
                {k: list(v) for k, v in self.replaced.items()}, dict(self.passes),
                dict(self.vjps))

    def restore(self, snap) -> None:
        """Undo a plugin file's partial registration (a conflict part-way through)."""
        (self.shapes, self.decompositions, self.kernels, self.replaced, self.passes,
         self.vjps) = snap

    @property
    def plugins(self) -> list[Plugin]:
        return [p for r in self.records for p in r.plugins]

    def add(self, plugin: Plugin) -> None:
        for table, mine in ((self.shapes, plugin.shapes),
                            (self.decompositions, plugin.decompositions),
                            (self.vjps, getattr(plugin, "vjps", {}))):
            for op, entry in mine.items():
                if op in table and table[op].plugin is not plugin:
                    raise PluginError(f"op '{op}' is provided by both plugin "
                                      f"'{table[op].plugin.name}' and plugin '{plugin.name}'")
                table[op] = entry
        for key, entry in plugin.kernels.items():
            old = self.kernels.get(key)
            if old is not None:
                if old.priority == entry.priority:
                    raise PluginError(f"kernel for '{key[0]}' on {key[1]} is provided by both "
                                      f"plugin '{old.plugin.name}' and plugin '{plugin.name}'; "
                                      f"give one a higher priority=")
                if old.priority > entry.priority:
                    self.replaced.setdefault(key, []).append(entry)
                    continue
                self.replaced.setdefault(key, []).append(old)
            self.kernels[key] = entry
        for name, (fn, after) in plugin.passes.items():
            if name in self.passes:
                raise PluginError(f"plugin '{plugin.name}': pass '{name}' is already "
                                  f"registered by plugin '{self.passes[name].plugin.name}'")
            self.passes[name] = PluginPass(name, fn, after, plugin)

    def kernel_for(self, op: str, device: str) -> OpEntry | None:
        return self.kernels.get((op, device))

    def overridden_opcodes(self) -> frozenset[str]:
        """Core opcodes some plugin replaces the kernel of, on any device."""
        return frozenset(op for op, _device in self.kernels if op in ALL_OPCODES)

    def describe(self, op: str) -> str:
        """What the loaded plugins provide for an op, for error messages."""
        have = []
        if op in self.decompositions:
            have.append("a decomposition")
        devs = [d for (o, d) in self.kernels if o == op]
        if devs:
            have.append("kernels for " + ", ".join(sorted(devs)))
        if have:
            return "loaded plugins provide " + " and ".join(have)
        ops = sorted(set(self.shapes) | set(self.decompositions) |
                     {o for o, _ in self.kernels if o not in ALL_OPCODES})
        if not ops:
            return "no plugins are loaded"
        import difflib

        from ..hlo.errors import plural
        # At most five names, the closest: the whole list (a hundred LAPACK targets with
        # the bundled plugins) would make a 1.5 KB line; `xlaplug list-plugins` has it.
        near = difflib.get_close_matches(op, ops, n=5, cutoff=0.6)
        return (f"no loaded plugin provides it ({plural(len(ops), 'op')} loaded: "
                f"xlaplug list-plugins lists them)" +
                ("; near matches: " + ", ".join(f"'{n}'" for n in near) if near else ""))
