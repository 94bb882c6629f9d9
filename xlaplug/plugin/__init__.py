"""Plugins: the public API and loader (loader.py), attribute typing (attrs.py), the run-time
session (session.py), check-plugins (check.py) and the list-plugins report (report.py).
`from xlaplug.plugin import Plugin` is all a plugin file needs."""
from .loader import (BUNDLED_DIR, DEVICES, ENTRY_POINT_GROUP, LoadRecord, OpEntry,  # noqa: F401
                     Plugin, PluginError, Registry, bind_call, load_plugins, plugin_dirs)
