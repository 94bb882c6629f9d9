"""The package's layers (issue 21, Layout): imports run one way, and nothing below the CLI
talks to the terminal.

    cli -> runtime -> xla -> passes -> plugin -> backends -> hlo

`runtime/` orchestrates runs and checks; `xla/` is the bridge to jaxlib the runtime uses
(MLIR reading, XLA's own runs, FFI registration, jax lowering) and never calls back up into
the runtime; `passes/` rewrite modules for a plugin session; `plugin/` is the public plugin
API, importable without the runtime or the backends' kernels; `backends/` holds the kernels;
`hlo/` the IR.  The package root (`__init__`, `__main__`, `jax`: the public API and entry
points) and the bundled plugin files sit on top.

Every module's imports are read with `ast`, function-level imports included (a lazy import is
a dependency all the same); imports made from strings (`importlib.import_module(f"...")`)
are not seen.  The allowed directions are the table below: data, so a new layer is a row.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import xlaplug

PACKAGE = Path(xlaplug.__file__).parent
ROOT = "xlaplug"  # the modules at the package root: __init__, __main__, jax

BELOW_CLI = ("runtime", "xla", "passes", "plugin", "backends", "hlo")
# package -> the packages its modules may import (besides its own modules)
ALLOWED = {
    ROOT: {"cli", *BELOW_CLI},
    "bundled_plugins": {*BELOW_CLI},
    "cli": {*BELOW_CLI},
    "runtime": {"xla", "passes", "plugin", "backends", "hlo"},
    "xla": {"passes", "plugin", "backends", "hlo"},
    "passes": {"plugin", "backends", "hlo"},
    "plugin": {"backends", "hlo"},
    "backends": {"hlo"},
    "hlo": set(),
}
# Below the CLI, results travel as values and errors as HloErrors: no terminal output, no
# exits, no terminal libraries (the root and the CLI may).
QUIET = set(BELOW_CLI) | {"bundled_plugins"}
FORBIDDEN_CALLS = {"print", "exit", "quit", "sys.exit", "os._exit", "click.echo",
                   "click.secho"}
FORBIDDEN_MODULES = ("click", "rich")


def _modules():
    """(dotted name, path, package) of every module of xlaplug."""
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield ".".join(parts), path, _package_of(parts)


def _package_of(parts) -> str:
    return parts[1] if len(parts) > 1 and (PACKAGE / parts[1]).is_dir() else ROOT


def _imports(name: str, path: Path):
    """(line, absolute module name) of every import in the module, at any depth."""
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module
            else:
                parts = name.split(".")[: len(name.split(".")) - (0 if is_pkg else 1)]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            if base == "xlaplug":  # `from .. import passes`: the names are the packages
                for alias in node.names:
                    yield node.lineno, f"xlaplug.{alias.name}"
            else:
                yield node.lineno, base


def _internal_imports():
    """(importing module, path, its package, line, target, the target's package)."""
    for name, path, pkg in _modules():
        for line, target in _imports(name, path):
            if target == "xlaplug" or target.startswith("xlaplug."):
                yield name, path, pkg, line, target, _package_of(target.split("."))


def test_the_table_names_every_package():
    found = {pkg for _, _, pkg in _modules()}
    assert found <= set(ALLOWED), f"packages missing from ALLOWED: {sorted(found - set(ALLOWED))}"


def test_imports_run_one_way():
    bad = [f"{name} (line {line}) imports {target}: {pkg} may import only "
           f"{', '.join(sorted(ALLOWED[pkg])) or 'nothing outside itself'}"
           for name, _, pkg, line, target, tpkg in _internal_imports()
           if tpkg != pkg and tpkg not in ALLOWED[pkg]]
    assert not bad, "imports against the layers:\n  " + "\n  ".join(bad)


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a list of nodes (first == last), or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    stack: list[str] = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state and (found := visit(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_no_import_cycles_between_packages():
    graph: dict[str, set[str]] = defaultdict(set)
    where: dict[tuple[str, str], str] = {}
    for name, _, pkg, line, target, tpkg in _internal_imports():
        if tpkg != pkg:
            graph[pkg].add(tpkg)
            where.setdefault((pkg, tpkg), f"{name} (line {line}) imports {target}")
    cycle = _cycle(graph)
    assert cycle is None, "import cycle between packages " + " -> ".join(cycle) + ":\n  " + \
        "\n  ".join(where[a, b] for a, b in zip(cycle, cycle[1:]))
    assert _cycle({k: set(v) for k, v in ALLOWED.items()}) is None  # the table is one-way


def _call_name(func) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return f"{func.value.id}.{func.attr}"
    return None


def test_nothing_below_the_cli_prints_or_exits():
    bad = []
    for name, path, pkg in _modules():
        if pkg not in QUIET:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and _call_name(node.func) in FORBIDDEN_CALLS:
                bad.append(f"{name} (line {node.lineno}) calls {_call_name(node.func)}")
            targets = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                       [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0
                       else [])
            bad += [f"{name} (line {node.lineno}) imports {t}" for t in targets
                    if t and t.split(".")[0] in FORBIDDEN_MODULES]
    assert not bad, ("below the CLI, results are values and errors HloErrors (the terminal "
                     "is xlaplug/cli's):\n  " + "\n  ".join(bad))


def test_the_plugin_api_loads_without_the_runtime():
    """`from xlaplug.plugin import Plugin` (all a plugin file needs) loads the IR and the
    plugin API only: not the runtime, the passes, the bridge, the CLI or the kernels."""
    code = ("import sys; from xlaplug.plugin import Plugin, PluginError, bind_call; "
            "print(sorted({'.'.join(m.split('.')[:2]) for m in sys.modules "
            "if m.startswith('xlaplug.')}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=PACKAGE.parent).stdout
    assert ast.literal_eval(out) == ["xlaplug.hlo", "xlaplug.plugin"], out
