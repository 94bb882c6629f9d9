"""docs/api.md: every code block runs, in order, from the repository's root, and prints what
the document says it prints (the `# ...` comments beside and below its print calls)."""
import contextlib
import io
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "api.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def _promised(block: str) -> list[str]:
    """What a block says it prints: the comment after `print(...)` on its line, and the
    comment lines that follow a block's last statement."""
    out = [m.group(1).strip() for m in re.finditer(r"print\(.*\)\s+# (.+)$", block, re.M)]
    tail = re.search(r"((?:^# .*\n)+)\Z", block, re.M)
    if tail:
        out += [line[2:] for line in tail.group(1).splitlines()]
    return out


def test_every_block_runs_and_prints_what_it_says(monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("XLAPLUG_PLUGIN_PATH", raising=False)
    blocks = _blocks()
    assert len(blocks) >= 6
    ns: dict = {"__name__": "api_md"}
    checked = 0
    try:
        import jax  # noqa: F401
        have_jax = True
    except ImportError:
        have_jax = False
    for k, block in enumerate(blocks):
        if "import jax" in block and not have_jax:  # the JAX section needs xlaplug[xla]
            continue
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile(block, f"docs/api.md block {k}", "exec"), ns)
        printed = buf.getvalue()
        for line in _promised(block):
            assert line.rstrip() in printed, (k, line, printed)
            checked += 1
    assert checked >= 8
