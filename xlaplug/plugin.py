"""The public plugin API and the plugin loader.

    from xlaplug.plugin import Plugin
    plugin = Plugin("acme", version="1.0", description="Acme ops")

    @plugin.shape("acme.swish")                 # result Shape(s) from operand Shapes + attrs
    @plugin.decomposition("acme.swish")         # (builder, *values, **attrs) -> value
    @plugin.kernel("acme.swish", device="cpu")  # (*arrays, *outputs, **attrs); writes outputs
    @plugin.kernel("all-reduce", device="cpu")  # replaces a core opcode's kernel
    @plugin.hlo_pass("acme-fold", after="dce")  # module -> bool (changed)

Every Plugin constructed while a plugin file is imported is collected by the loader;
the REGISTRY then answers "who provides op X on device D".
"""
from __future__ import annotations

import hashlib
import importlib.util
import inspect
import os
import stat
import sys
import traceback
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .hlo.errors import HloError, one_line
from .hlo.opcodes import ALL_OPCODES

DEVICES = ("cpu", "cuda")
ENTRY_POINT_GROUP = "xlaplug.plugins"
BUNDLED_DIR = Path(__file__).with_name("plugins")


class PluginError(HloError):
    def headline(self) -> str:
        # A plugin failure with no instruction position is not about the HLO file.
        return super().headline() if self.line else f"error: {one_line(self.message)}"


@dataclass
class OpEntry:
    plugin: "Plugin"
    fn: Callable
    examples: list = field(default_factory=list)
    priority: int = 0


class Plugin:
    def __init__(self, name: str, version: str = "0", description: str = ""):
        self.name, self.version, self.description = name, version, description
        self.shapes: dict[str, OpEntry] = {}
        self.decompositions: dict[str, OpEntry] = {}
        self.kernels: dict[tuple[str, str], OpEntry] = {}
        self.passes: dict[str, tuple[Callable, str | None]] = {}
        self.source: str = "<python>"
        _COLLECTING.append(self)

    def shape(self, op: str, *, examples=None):
        return self._reg(self.shapes, op, examples)

    def decomposition(self, op: str, *, examples=None):
        return self._reg(self.decompositions, op, examples)

    def kernel(self, op: str, *, device: str = "cpu", examples=None, priority: int = 0):
        if device not in DEVICES:
            raise PluginError(f"plugin '{self.name}': kernel for '{op}' names unknown device "
                              f"'{device}' (expected one of {', '.join(DEVICES)})")

        def deco(fn):
            self.kernels[(op, device)] = OpEntry(self, fn, list(examples or []), priority)
            return fn
        return deco

    def hlo_pass(self, name: str, *, after: str | None = None):
        def deco(fn):
            self.passes[name] = (fn, after)
            return fn
        return deco

    def _reg(self, table, op, examples):
        def deco(fn):
            table[op] = OpEntry(self, fn, list(examples or []))
            return fn
        return deco

    @property
    def ops(self) -> list[str]:
        names = set(self.shapes) | set(self.decompositions)
        names |= {op for op, _ in self.kernels if op not in ALL_OPCODES}
        return sorted(names)

    @property
    def overrides(self) -> list[tuple[str, str]]:
        return sorted(k for k in self.kernels if k[0] in ALL_OPCODES)

    def __repr__(self) -> str:
        return f"<Plugin {self.name} {self.version} from {self.source}>"


_COLLECTING: list[Plugin] = []


@dataclass
class LoadRecord:
    source: str
    plugins: list[Plugin]
    error: str | None = None


class Registry:
    """Everything the loaded plugins provide, keyed by op name (and device)."""

    def __init__(self):
        self.records: list[LoadRecord] = []
        self.shapes: dict[str, OpEntry] = {}
        self.decompositions: dict[str, OpEntry] = {}
        self.kernels: dict[tuple[str, str], OpEntry] = {}
        self.replaced: dict[tuple[str, str], list[OpEntry]] = {}
        self.pass_names: list[str] = []

    def _snapshot(self):
        return (dict(self.shapes), dict(self.decompositions), dict(self.kernels),
                {k: list(v) for k, v in self.replaced.items()}, len(self.pass_names))

    def _restore(self, snap) -> None:
        """Undo a plugin file's partial registration (a conflict part-way through)."""
        from .passes.manager import unregister_pass
        self.shapes, self.decompositions, self.kernels, self.replaced, n = snap
        for name in self.pass_names[n:]:
            unregister_pass(name)
        del self.pass_names[n:]

    @property
    def plugins(self) -> list[Plugin]:
        return [p for r in self.records for p in r.plugins]

    def add(self, plugin: Plugin) -> None:
        for table, mine in ((self.shapes, plugin.shapes),
                            (self.decompositions, plugin.decompositions)):
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
        from .passes.manager import PASSES, register_pass, unregister_pass
        for name, (fn, after) in plugin.passes.items():
            if name in PASSES:
                if _PASS_OWNERS.get(name) != (plugin.name, plugin.source):
                    raise PluginError(f"plugin '{plugin.name}': pass '{name}' is already "
                                      f"registered")
                unregister_pass(name)  # the same plugin file loaded again in this process
            register_pass(name, _FunctionPass.factory(name, fn), after=after)
            _PASS_OWNERS[name] = (plugin.name, plugin.source)
            self.pass_names.append(name)

    def kernel_for(self, op: str, device: str) -> OpEntry | None:
        return self.kernels.get((op, device))

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
        return ("no loaded plugin provides it; loaded plugins provide: " + ", ".join(ops)
                if ops else "no plugins are loaded")


# Pass name -> (plugin, source) that registered it: passes are process-wide.
_PASS_OWNERS: dict[str, tuple[str, str]] = {}


class _FunctionPass:
    @staticmethod
    def factory(name: str, fn: Callable):
        def make():
            p = _FunctionPass()
            p.name, p.fn = name, fn
            return p
        return make

    def run(self, module) -> bool:
        return bool(self.fn(module))


# ---- discovery ----------------------------------------------------------------------------

def _check_permissions(path: Path) -> None:
    st = path.stat()
    if st.st_mode & stat.S_IWOTH:  # sticky or not: anyone could add a plugin file
        raise PluginError(f"refusing to load plugins from '{path}': it is writable by everyone "
                          f"(chmod o-w '{path}')")


def _candidates(directory: Path) -> list[Path]:
    out = []
    for p in sorted(directory.iterdir()):
        if p.name.startswith(("_", ".")):
            continue
        if p.suffix == ".py" and p.is_file():
            out.append(p)
        elif p.is_dir() and (p / "__init__.py").is_file():
            out.append(p)
    return out


def _import_path(path: Path) -> list[Plugin]:
    init = path / "__init__.py" if path.is_dir() else path
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]
    modname = f"xlaplug_plugin_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(
        modname, init, submodule_search_locations=[str(path)] if path.is_dir() else None)
    module = importlib.util.module_from_spec(spec)
    start = len(_COLLECTING)
    _forget(modname)  # a package loaded before re-runs its submodules too
    sys.modules[modname] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        _forget(modname)
        del _COLLECTING[start:]
        raise
    found = _COLLECTING[start:]
    del _COLLECTING[start:]
    for p in found:
        p.source = str(path)
    return found


def _forget(modname: str) -> None:
    for name in [n for n in sys.modules if n == modname or n.startswith(modname + ".")]:
        del sys.modules[name]


def _error_line(exc: BaseException, path: Path) -> str:
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}:{exc.lineno}: SyntaxError: {exc.msg}"
    tb = traceback.extract_tb(exc.__traceback__)
    frames = [f for f in tb if Path(f.filename).resolve().is_relative_to(path.resolve())]
    if not frames:  # e.g. an entry point's module: its last frame outside the import machinery
        frames = [f for f in tb if not f.filename.startswith("<frozen") and f.filename != __file__
                  and "importlib" not in Path(f.filename).parts]
    if not frames:
        return f"{type(exc).__name__}: {exc}"
    return f"{frames[-1].filename}:{frames[-1].lineno}: {type(exc).__name__}: {exc}"


def plugin_dirs(extra_dirs=(), bundled: bool = True) -> list[Path]:
    dirs = [BUNDLED_DIR] if bundled else []
    dirs += [Path(d) for d in extra_dirs]
    env = os.environ.get("XLAPLUG_PLUGIN_PATH", "")
    dirs += [Path(d) for d in env.split(os.pathsep) if d]
    return dirs


def load_plugins(extra_dirs=(), *, no_plugins: bool = False, strict: bool = False,
                 entry_points: bool = True) -> Registry:
    reg = Registry()
    if no_plugins:
        return reg
    for d in plugin_dirs(extra_dirs):
        if not d.is_dir():
            raise PluginError(f"plugins directory '{d}' does not exist")
        if d != BUNDLED_DIR:
            _check_permissions(d)
        for path in _candidates(d):
            _load_one(reg, path, lambda p=path: _import_path(p), strict)
    if entry_points:
        from importlib.metadata import entry_points as eps
        for ep in eps(group=ENTRY_POINT_GROUP):
            _load_one(reg, Path(ep.value), lambda ep=ep: _entry_point_plugins(ep), strict,
                      label=f"entry point {ep.name} ({ep.value})")
    return reg


def _entry_point_plugins(ep) -> list[Plugin]:
    start = len(_COLLECTING)
    try:
        obj = ep.load()
    finally:
        found = _COLLECTING[start:]
        del _COLLECTING[start:]
    if isinstance(obj, Plugin):  # `module:attr` names one Plugin
        found = [obj]
    elif isinstance(obj, types.ModuleType):  # a module: all its Plugins, even if imported before
        found += [v for v in vars(obj).values() if isinstance(v, Plugin) and v not in found]
    for p in found:
        p.source = f"entry point {ep.name}"
    return found


def _load_one(reg: Registry, path: Path, importer, strict: bool, label: str | None = None):
    try:
        if path.exists() and label is None and path.parent != BUNDLED_DIR:
            _check_permissions(path)
        known = reg.plugins
        plugins = [p for p in importer() if p not in known]  # one Plugin reached twice: once
        rec = LoadRecord(label or str(path), plugins)
        snap = reg._snapshot()
        try:
            for p in plugins:
                reg.add(p)
        except BaseException:
            reg._restore(snap)  # all of a file's plugins register, or none
            raise
    except PluginError as e:
        rec = LoadRecord(label or str(path), [], e.message)
    except Exception as e:  # a plugin's own bug: report with its file, keep loading others
        rec = LoadRecord(label or str(path), [], _error_line(e, path))
    reg.records.append(rec)
    if rec.error and strict:
        raise PluginError(f"plugin {rec.source} failed to load: {rec.error}")


# ---- calling rules with the call's attributes ----------------------------------------------

def bind_call(fn: Callable, what: str, args: list, kwargs: dict[str, Any]):
    """Bind positional operands and typed attributes; a clear error when they do not fit."""
    try:
        sig = inspect.signature(fn)
        sig.bind(*args, **kwargs)
    except TypeError as e:
        raise PluginError(f"{what} does not accept this call: {e} (call passes "
                          f"{len(args)} positional arguments and attributes "
                          f"{sorted(kwargs) or 'none'})") from None
    except ValueError:
        pass
    return fn(*args, **kwargs)
