"""Errors with HLO-text positions, formatted as `FILE:LINE:COL: error: MESSAGE`."""
from __future__ import annotations


class HloError(Exception):
    """Any user-facing error about an HLO module (exit code 2 at the CLI)."""

    def __init__(self, message: str, *, file: str | None = None, line: int = 0, column: int = 0,
                 source_line: str | None = None):
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line
        self.column = column
        self.source_line = source_line

    def located(self, file: str | None, text: str | None) -> "HloError":
        """Fill in the file name and the offending source line when known."""
        if self.file is None:
            self.file = file
        if text is not None and self.line and self.source_line is None:
            lines = text.splitlines()
            if 0 < self.line <= len(lines):
                self.source_line = lines[self.line - 1]
        return self

    def headline(self) -> str:
        where = self.file or "<input>"
        if self.line:
            where += f":{self.line}:{self.column}"
        return f"{where}: error: {self.message}"

    def __str__(self) -> str:
        out = self.headline()
        if self.source_line is not None and self.line:
            # Printable form of the source line (binary garbage must not wreck the terminal).
            src = self.source_line.encode("ascii", "backslashreplace").decode()[:200].expandtabs(1)
            out += "\n" + src + "\n" + " " * max(self.column - 1, 0) + "^"
        return out


class HloSyntaxError(HloError):
    pass


class HloVerifyError(HloError):
    pass


def position_of(text: str, offset: int) -> tuple[int, int]:
    """1-based (line, column) of a character offset."""
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, col
