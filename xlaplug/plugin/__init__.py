"""Plugins: the public API, the loader, attribute typing, the run-time session,
check-plugins and the list-plugins report, one module each.

    api.py       Plugin (the decorators a plugin file uses), OpEntry, PluginError, bind_call
    registry.py  Registry: what one session's loaded plugins provide (ops, kernels, passes)
    loader.py    load_plugins: bundled plugins, --plugins-dir, XLAPLUG_PLUGIN_PATH, entry points
    attrs.py     custom-call attributes -> typed keyword arguments
    rules.py     calling shape rules and decompositions for an instruction
    session.py   Session: registry + device/prefer/strict; plugin kernels wrapped for the executor
    check.py     check-plugins: kernels against their decompositions
    report.py    list-plugins: table and JSON

`from xlaplug.plugin import Plugin` is all a plugin file needs.  `Session` (and what it
brings in: the backends' memory layer) is imported on first use.
"""
from .api import DEVICES, OpEntry, Plugin, PluginError, bind_call
from .loader import BUNDLED_DIR, ENTRY_POINT_GROUP, load_plugins, plugin_dirs
from .registry import LoadRecord, PluginPass, Registry

__all__ = ["BUNDLED_DIR", "DEVICES", "ENTRY_POINT_GROUP", "LoadRecord", "OpEntry", "Plugin",
           "PluginError", "PluginPass", "Registry", "Session", "bind_call", "load_plugins",
           "plugin_dirs"]


def __getattr__(name: str):
    if name == "Session":  # lazily: a plugin file importing Plugin need not load the backends
        from .session import Session
        return Session
    raise AttributeError(f"module 'xlaplug.plugin' has no attribute '{name}'")
