"""Reading an HLO file into text: the one reader the CLI and the library share.

Bytes become text the same way wherever they come from (a path, or `-` for standard input):
a UTF-8 byte-order mark is dropped, CRLF line ends become LF (so strings, comments and carets
see one line end), and bytes that are not UTF-8 are an error at their line and column --
reported as binary data when a control byte comes first, as the parser reports it in text.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from ..errors import HloError, HloSyntaxError, position_of

_BOM = b"\xef\xbb\xbf"
_CONTROL_BYTES = re.compile(rb"[\x00-\x08\x0e-\x1f\x7f]")


def decode_hlo(data: bytes, name: str) -> str:
    """HLO file bytes -> text; raises HloSyntaxError (with file, line, column) on bytes that
    are not UTF-8."""
    if data.startswith(_BOM):
        data = data[len(_BOM):]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        ctrl = _CONTROL_BYTES.search(data, 0, e.start)
        at = ctrl.start() if ctrl else e.start
        before = data[:at].decode("utf-8")  # valid: the first bad byte is at e.start
        line, col = position_of(before, len(before))
        msg = (f"binary data in HLO text (control character 0x{data[at]:02x})" if ctrl else
               f"file is not UTF-8 text (byte 0x{data[at]:02x})")
        err = HloSyntaxError(msg, file=name, line=line, column=col)
        raise err.located(name, data.decode("utf-8", "replace")) from None
    return text.replace("\r\n", "\n") if "\r" in text else text


def read_hlo(path: str) -> tuple[str, str]:
    """(text, display name) of an HLO file; `-` reads standard input."""
    if path == "-":
        return decode_hlo(sys.stdin.buffer.read(), "<stdin>"), "<stdin>"
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise HloError(f"cannot read '{path}': {e.strerror or e}") from None
    return decode_hlo(data, str(path)), str(path)
