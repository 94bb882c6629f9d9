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
            lines = text.split("\n")
            if 0 < self.line <= len(lines):
                self.source_line = lines[self.line - 1].rstrip("\r")
        return self

    def headline(self) -> str:
        where = self.file or "<input>"
        if self.line:
            where += f":{self.line}:{self.column}"
        return f"{where}: error: {one_line(self.message)}"

    def __str__(self) -> str:
        out = self.headline()
        if self.source_line is not None and self.line:
            src, caret = _excerpt(self.source_line, self.column)
            out += "\n" + src + "\n" + " " * caret + "^"
        return out


_WINDOW = 160


def _excerpt(line: str, column: int) -> tuple[str, int]:
    """The source line made safe to print (control characters shown as '?', tabs as one
    space, so the caret stays under its column), cut to a window around a long line's
    column; and the caret's offset in it."""
    safe = "".join(c if c.isprintable() else (" " if c == "\t" else "?") for c in line)
    caret = max(column - 1, 0)
    if len(safe) <= _WINDOW:
        return safe, caret
    start = max(0, min(caret - _WINDOW // 2, len(safe) - _WINDOW))
    piece = safe[start:start + _WINDOW]
    if start > 0:
        piece, caret = "..." + piece, caret - start + 3
    if start + _WINDOW < len(safe):
        piece += "..."
    return piece, caret


class UsageError(HloError):
    """A bad option, path or environment -- about no place in a module: one `error: ...`
    line with no file position, at any layer (the CLI's OptionError is one)."""

    def headline(self) -> str:
        return f"error: {one_line(self.message)}"

    def __str__(self) -> str:
        return self.headline()


class OptionError(UsageError):
    """A bad command-line option or path: one `error: ...` line with no file position
    (raised by the runtime and the bridge too: it is a UsageError, not a CLI type)."""


class HloSyntaxError(HloError):
    pass


class HloVerifyError(HloError):
    pass


def plural(n: int, noun: str, many: str | None = None) -> str:
    """`1 device`, `4 devices` (`many`: the plural when not noun + s): counts in messages,
    at every layer."""
    return f"{n} {noun if n == 1 else many or noun + 's'}"


def one_line(message: str) -> str:
    """A message safe for a one-line headline: text quoted from the input (a token that spans
    lines, a value) may hold newlines or other control characters; they are shown escaped."""
    if message.isprintable():
        return message
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)


def position_of(text: str, offset: int) -> tuple[int, int]:
    """1-based (line, column) of a character offset."""
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, col
