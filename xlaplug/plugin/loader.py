"""The plugin loader: find plugin files and entry points, import them, and register what
their Plugins provide in a new Registry.

Search order: the bundled plugins (`xlaplug/bundled_plugins/`), `--plugins-dir` directories,
`XLAPLUG_PLUGIN_PATH`, then the entry-point group `xlaplug.plugins`.  A file that fails to
import or conflicts is recorded with its error and skipped (fatal with strict=True).
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import stat
import sys
import threading
import traceback
import types
from pathlib import Path

from .api import Plugin, PluginError, collecting
from .registry import LoadRecord, Registry

ENTRY_POINT_GROUP = "xlaplug.plugins"
BUNDLED_DIR = Path(__file__).resolve().parent.parent / "bundled_plugins"

# sys.modules is process-wide: two sessions importing the same plugin file at once must not
# interleave its forget / insert / exec steps.
_IMPORT_LOCK = threading.RLock()


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
    with _IMPORT_LOCK, collecting() as found:
        _forget(modname)  # a package loaded before re-runs its submodules too
        sys.modules[modname] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            _forget(modname)
            raise
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
        frames = [f for f in tb if not f.filename.startswith("<frozen") and Path(f.filename).parent != Path(__file__).parent
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
                 entry_points: bool = True, objects=(), bundled: bool = True) -> Registry:
    """The plugins of one session: the bundled ones (unless `bundled=False`), those in
    `extra_dirs` and XLAPLUG_PLUGIN_PATH, the `objects` (Plugin instances made in Python)
    and the entry points.  `no_plugins`: none at all."""
    reg = Registry()
    if no_plugins:
        return reg
    for d in plugin_dirs(extra_dirs, bundled=bundled):
        if not d.is_dir():
            raise PluginError(f"plugins directory '{d}' does not exist")
        if d != BUNDLED_DIR:
            _check_permissions(d)
        for path in _candidates(d):
            _load_one(reg, path, lambda p=path: _import_path(p), strict)
    for obj in objects:
        _load_one(reg, Path(obj.source or obj.name), lambda obj=obj: [obj], strict,
                  label=f"Python object {obj.name}")
    if entry_points and entry_points_declared():
        from importlib.metadata import entry_points as eps
        for ep in eps(group=ENTRY_POINT_GROUP):
            _load_one(reg, Path(ep.value), lambda ep=ep: _entry_point_plugins(ep), strict,
                      label=f"entry point {ep.name} ({ep.value})")
    return reg


def entry_points_declared() -> bool:
    """Whether a distribution on sys.path may declare an `xlaplug.plugins` entry point: the
    files importlib.metadata reads (`entry_points.txt` in each sys.path folder's
    `*.dist-info` and `*.egg-info`, and in an `.egg` folder's `EGG-INFO`) searched for the
    group's name.  Importing importlib.metadata (email, csv, zipfile) costs more than its
    search -- 10-15 ms of every command -- and almost no installation declares one; where
    one may (the name in a file, a zip archive on the path, a finder of distributions
    besides Python's own), importlib.metadata reads them."""
    from importlib.machinery import PathFinder
    if any(f is not PathFinder and hasattr(f, "find_distributions") for f in sys.meta_path):
        return True
    group = ENTRY_POINT_GROUP.encode()
    for entry in sys.path:
        root = entry or "."
        try:
            names = os.listdir(root)
        except NotADirectoryError:  # a zip archive
            return True
        except OSError:  # absent or unreadable: importlib.metadata finds nothing there either
            continue
        egg = os.path.basename(root).lower().endswith(".egg")
        for name in names:
            low = name.lower()
            if not (low.endswith((".dist-info", ".egg-info")) or egg and low == "egg-info"):
                continue
            try:
                with open(os.path.join(root, name, "entry_points.txt"), "rb") as f:
                    if group in f.read():
                        return True
            except OSError:  # no entry points (or an .egg-info file: none)
                continue
    return False


def load_sources(sources) -> Registry:
    """A Registry of the plugins loaded from `sources` -- each a Plugin.source as the loader
    set it: a plugin file or package directory, or `entry point NAME` -- strictly (a
    failure is a PluginError): how another process gets the plugins of this one's session
    by name (runtime/engine_devices.py's subprocess)."""
    from importlib.metadata import entry_points as eps
    reg = Registry()
    for source in dict.fromkeys(sources):
        if source.startswith("entry point "):
            name = source[len("entry point "):]
            found = [ep for ep in eps(group=ENTRY_POINT_GROUP) if ep.name == name]
            if not found:
                raise PluginError(f"no entry point '{name}' in group {ENTRY_POINT_GROUP}")
            _load_one(reg, Path(found[0].value), lambda ep=found[0]: _entry_point_plugins(ep),
                      True, label=source)
        else:
            _load_one(reg, Path(source), lambda p=Path(source): _import_path(p), True)
    return reg


def _entry_point_plugins(ep) -> list[Plugin]:
    with _IMPORT_LOCK, collecting() as found:
        obj = ep.load()
    found = list(found)
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
        snap = reg.snapshot()
        try:
            for p in plugins:
                reg.add(p)
        except BaseException:
            reg.restore(snap)  # all of a file's plugins register, or none
            raise
    except PluginError as e:
        rec = LoadRecord(label or str(path), [], e.message)
    except Exception as e:  # a plugin's own bug: report with its file, keep loading others
        rec = LoadRecord(label or str(path), [], _error_line(e, path))
    reg.records.append(rec)
    if rec.error and strict:
        raise PluginError(f"plugin {rec.source} failed to load: {rec.error}")
