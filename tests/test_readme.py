"""README.md: the five-minute tour does what it says, as a user would run it.

The files the tour shows (a block whose first line is `# NAME`) are written into a fresh
folder; every `$ xlaplug ...` line of its console blocks runs there in order, must exit 0,
and must print the lines the README shows under it.  The README stays under 300 lines.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _tour() -> str:
    text = README.read_text()
    start = text.index("## A five-minute tour")
    return text[start:text.index("\n## ", start + 1)]


def _files(tour: str) -> dict[str, str]:
    return {m.group(1): m.group(2)
            for m in re.finditer(r"```(?:python|hlo)\n# (\S+)\n(.*?)```", tour, re.S)}


def _commands(tour: str) -> list[tuple[str, list[str]]]:
    """(command, the lines shown under it) for each `$ ` line of the console blocks."""
    out: list[tuple[str, list[str]]] = []
    for block in re.findall(r"```console\n(.*?)```", tour, re.S):
        for line in block.splitlines():
            if line.startswith("$ "):
                out.append((line[2:], []))
            elif line.strip():
                out[-1][1].append(line)
    return out


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "XLAPLUG_PLUGIN_PATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep)
    env["COLUMNS"] = "200"
    return env


def _run(command: str, cwd: Path) -> subprocess.CompletedProcess:
    """One tour command: `pip install ... &&` prefixes are what the install already did."""
    command = command.split("&& ")[-1]
    argv = shlex.split(command)
    assert argv[0] == "xlaplug", command
    return subprocess.run([sys.executable, "-m", "xlaplug.cli", *argv[1:]], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)


def test_readme_is_for_users():
    text = README.read_text()
    assert len(text.splitlines()) <= 300
    for heading in ("## A five-minute tour", "## Commands", "## Speed (", "## Documentation"):
        assert heading in text, heading
    # every docs/ link resolves
    for link in re.findall(r"\]\((docs/[^)#]+|CHANGELOG.md|benchmarks/README.md)", text):
        assert (ROOT / link).exists(), link


@pytest.mark.jax
@pytest.mark.slow
def test_five_minute_tour(tmp_path):
    pytest.importorskip("jax")
    tour = _tour()
    files = _files(tour)
    assert {"swish.hlo", "plugins/acme_swish.py", "tour_jax.py"} <= set(files)
    for name, body in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(body)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    commands = _commands(tour)
    assert len(commands) >= 8
    for command, shown in commands:
        if command.startswith(("pip install '.[mpi]'", "mpiexec")):
            continue  # under mpiexec: tests/test_examples.py runs that example
        r = _run(command, tmp_path)
        assert r.returncode == 0, (command, r.stdout[-2000:], r.stderr[-2000:])
        for line in shown:
            assert line in r.stdout, (command, line, r.stdout[-2000:])
    # the jax part: plain python, printing what the README says
    r = subprocess.run([sys.executable, "tour_jax.py"], cwd=tmp_path, env=_env(),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    promised = re.search(r"print\(.*\)\s+# (.+)$", files["tour_jax.py"], re.M).group(1)
    assert r.stdout.strip() == promised.strip()
