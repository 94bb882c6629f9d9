"""xlaplug: XLA's HLO, extensible by plugins at run time.

    import xlaplug
    exe = xlaplug.compile("module.hlo", plugins=["my_plugins/"])
    outputs = exe(*arrays)

The names below are imported on first use, so `import xlaplug` stays cheap (a plugin file
importing `xlaplug.plugin` does not load the backends).
"""
__version__ = "0.1.0"

_API = {"compile": "runtime.executable", "Executable": "runtime.executable",
        "ServedOp": "runtime.executable", "load_session": "runtime.executable",
        "HloError": "hlo.errors", "HloSyntaxError": "hlo.errors",
        "HloVerifyError": "hlo.errors", "Plugin": "plugin", "PluginError": "plugin"}

__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        import importlib
        return getattr(importlib.import_module(f".{_API[name]}", __name__), name)
    raise AttributeError(f"module 'xlaplug' has no attribute {name!r}")
