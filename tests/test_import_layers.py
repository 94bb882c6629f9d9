"""The plugin package and the passes import one way: passes use the plugin API, registry,
attribute typing and rules; nothing in xlaplug/plugin/ imports a pass.  (Read from the
source, function-level imports included, so a lazy import cannot hide a circle.)"""
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "xlaplug"


def _imports(path: Path) -> set[str]:
    """Absolute names of the xlaplug modules a file imports, anywhere in it."""
    module = ".".join(path.relative_to(PKG.parent).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[:len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module
            found.add(name)
            found |= {f"{name}.{a.name}" for a in node.names}
    return {n for n in found if n.startswith("xlaplug")}


def _layer(folder: str) -> dict[str, set[str]]:
    return {p.name: _imports(p) for p in sorted((PKG / folder).glob("*.py"))}


def test_plugin_package_imports_no_pass():
    for name, imports in _layer("plugin").items():
        assert not any(i.startswith("xlaplug.passes") for i in imports), (name, imports)


def test_passes_use_only_the_plugin_api_registry_attrs_and_rules():
    allowed = {"xlaplug.plugin.api", "xlaplug.plugin.registry", "xlaplug.plugin.attrs",
               "xlaplug.plugin.rules"}
    for name, imports in _layer("passes").items():
        plugin = {i for i in imports if i.startswith("xlaplug.plugin")}
        # the pipeline driver makes the default Session (bundled plugins) when given none
        here = allowed | {"xlaplug.plugin.session"} if name == "pipeline.py" else allowed
        modules = {i if i in here else i.rsplit(".", 1)[0] for i in plugin}
        assert modules <= here, (name, plugin)


def test_the_check_sees_imports():
    """The reader finds relative, absolute and function-level imports."""
    imports = _imports(PKG / "plugin" / "session.py")
    assert {"xlaplug.plugin.rules", "xlaplug.backends.registry"} <= imports
    assert "xlaplug.plugin.registry" in _imports(PKG / "passes" / "custom_call_lowering.py")


def test_hlo_ir_imports_nothing_from_the_text_front_end():
    """hlo/ (IR, dtypes, opcodes, builder, verifier, shape rules) is below hlo/text/: the text
    front end builds on the IR, never the other way round (no circle inside hlo/)."""
    ir_files = [*sorted((PKG / "hlo").glob("*.py")), *sorted((PKG / "hlo" / "shape_rules").glob("*.py"))]
    assert len(ir_files) > 10
    for path in ir_files:
        if path.name == "__init__.py" and path.parent.name == "hlo":
            # the package's lazy `parse_module` re-export (module __getattr__), not an import
            # at import time
            continue
        text = {i for i in _imports(path) if i.startswith("xlaplug.hlo.text")}
        assert not text, (path.name, text)


def test_hlo_package_import_does_not_load_the_parser():
    import subprocess
    import sys
    code = ("import sys, xlaplug.hlo; assert 'xlaplug.hlo.text' not in sys.modules; "
            "from xlaplug.hlo import parse_module; assert 'xlaplug.hlo.text.parser' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
