"""Golden-text cases: tests/golden/*.txt, many cases per file, xDSL/MLIR style.

A file is a list of cases separated by a line `// -----`.  Each case is

    // RUN: xlaplug compile --passes dce --verify-each
    <input: HLO text>
    // EXPECT:
    <the whole expected output>

The RUN line is the command line a user would type, minus the input file: the case's input
is given on stdin (`-`) and the output is written with `-o` to a file, so the output is the
plain text a file gets (no colour, no terminal-width tables).  The output is compared whole,
line for line, with EXPECT.

Comment lines starting with `//` before RUN (a description of the case) are kept but not run.
`XLAPLUG_UPDATE_GOLDEN=1 pytest tests/test_passes.py` rewrites every EXPECT with today's
output; the result must then be read and checked by hand before it is committed.
"""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
SEPARATOR = "// -----"
RUN = "// RUN: xlaplug "
EXPECT = "// EXPECT:"


@dataclass
class Case:
    path: Path
    index: int  # position in the file, from 0
    line: int  # line of the RUN line in the file, from 1
    comments: list[str]
    args: list[str]  # the xlaplug arguments of the RUN line
    input: str
    expect: str

    @property
    def id(self) -> str:
        return f"{self.path.stem}-{self.index}"

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line}"


def _chunks(text: str):
    """(first line number, lines) of each case of a file."""
    lines = text.split("\n")
    start, chunk = 1, []
    for n, line in enumerate(lines, start=1):
        if line.rstrip() == SEPARATOR:
            yield start, chunk
            start, chunk = n + 1, []
        else:
            chunk.append(line)
    yield start, chunk


def parse_cases(path: Path) -> list[Case]:
    cases = []
    for first, lines in _chunks(path.read_text()):
        comments = []
        i = 0
        while i < len(lines) and not lines[i].startswith(RUN):
            if lines[i].strip():
                assert lines[i].startswith("//"), f"{path.name}:{first + i}: text before RUN"
                comments.append(lines[i])
            i += 1
        assert i < len(lines), f"{path.name}:{first}: a case without a RUN line"
        args = shlex.split(lines[i][len(RUN):])
        body = lines[i + 1:]
        marks = [k for k, line in enumerate(body) if line.rstrip() == EXPECT]
        assert len(marks) == 1, f"{path.name}:{first + i}: want exactly one {EXPECT}"
        src = "\n".join(body[:marks[0]]).strip("\n") + "\n"
        expect = "\n".join(body[marks[0] + 1:]).strip("\n") + "\n"
        cases.append(Case(path, len(cases), first + i, comments, args, src, expect))
    return cases


def all_cases() -> list[Case]:
    return [c for p in sorted(GOLDEN_DIR.glob("*.txt")) for c in parse_cases(p)]


def run_case(case: Case, tmp_path: Path) -> tuple[int, str, str]:
    """(exit code, what the output file holds, stderr) of the case's command line."""
    from click.testing import CliRunner

    from xlaplug.cli.main import main
    out = tmp_path / "out.txt"
    args = case.args[:1] + ["-", "-o", str(out)] + case.args[1:]
    r = CliRunner().invoke(main, args, input=case.input)
    text = out.read_text() if out.exists() else ""
    return r.exit_code, text, r.output + (str(r.exception) if r.exception and
                                          not isinstance(r.exception, SystemExit) else "")


def format_cases(cases: list[Case]) -> str:
    parts = []
    for c in cases:
        head = "\n".join(c.comments + [RUN + shlex.join(c.args)])
        parts.append(f"{head}\n{c.input}{EXPECT}\n{c.expect}")
    return f"\n{SEPARATOR}\n".join(parts)


def update_requested() -> bool:
    return os.environ.get("XLAPLUG_UPDATE_GOLDEN") == "1"
