"""Module files in, StableHLO out.

A FILE given to `run` or `compile` is HLO text, or MLIR -- StableHLO or MHLO, as text
(`.mlir`, or text that starts like a module) or bytecode (`.mlirbc`, or the `ML\\xefR`
magic: `jax.export(...).mlir_module_serialized`, `jax.export(...).serialize()`'s module).
MLIR goes through jaxlib's converter into HLO text, then is handled like any HLO module.
A file that is neither is a one-line error saying so.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from ..hlo.errors import HloError, HloSyntaxError
from .jaxlib_names import BYTECODE_MAGIC

MLIR_SUFFIXES = (".mlir", ".mlirbc")
NEITHER = "neither HLO text nor MLIR (StableHLO or MHLO text, or bytecode)"
_MLIR_START = re.compile(r'(?:module\b[^{\n]*\{|func\.func\b|"builtin\.module"|#\w+\s*=)')


def read_bytes(path: str) -> tuple[bytes, str]:
    """(bytes, display name); `-` reads standard input."""
    if path == "-":
        return sys.stdin.buffer.read(), "<stdin>"
    try:
        return Path(path).read_bytes(), str(path)
    except OSError as e:
        raise HloError(f"cannot read '{path}': {e.strerror or e}") from None


def _first_code(text: str) -> str:
    """The text from its first line that is not blank or a // comment."""
    for m in re.finditer(r"^[ \t]*(?!//)(\S.*)$", text, re.M):
        return text[m.start(1):]
    return ""


def is_mlir(data: bytes, name: str) -> bool:
    if name.endswith(MLIR_SUFFIXES) or data.startswith(BYTECODE_MAGIC):
        return True
    head = _first_code(data[:4096].decode("utf-8", "replace"))
    return bool(_MLIR_START.match(head)) and not head.startswith("HloModule")


def mlir_as_hlo_text(data: bytes, name: str) -> str:
    """MLIR bytes (text or bytecode) as HLO text; an MLIR error is located in the file."""
    from .jaxlib_names import XlaError, mlir_to_hlo_text, require_jax
    require_jax(f"reading MLIR ({name})")
    if data.startswith(BYTECODE_MAGIC):
        return mlir_to_hlo_text(data, f"reading MLIR ({name})")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise HloSyntaxError(f"MLIR text is not UTF-8 (byte 0x{data[e.start]:02x}); MLIR "
                             f"bytecode starts with 'ML\\xefR'", file=name) from None
    try:
        return mlir_to_hlo_text(text, f"reading MLIR ({name})")
    except XlaError as e:
        raise e.located(name, text) from None


def read_module_text(path: str) -> tuple[str, str]:
    """(HLO text, display name) of FILE: HLO text as it is, MLIR converted.  The name of a
    converted module says so, since positions in it are positions in the HLO text."""
    from ..hlo.text.reader import decode_hlo
    data, name = read_bytes(path)
    if is_mlir(data, name):
        return mlir_as_hlo_text(data, name), f"{name} (as HLO)"
    try:
        return decode_hlo(data, name), name
    except HloSyntaxError as e:
        e.message = f"{NEITHER}: {e.message}"
        raise


def explain_not_hlo(e: HloError, text: str) -> HloError:
    """A parse error in text with no sign of HLO (no `HloModule`, no `ENTRY`) says the file
    is neither HLO nor MLIR, keeping the parser's position and message.  (An empty file
    keeps the parser's own `empty module` message.)"""
    if _first_code(text) and not re.search(r"\b(HloModule|ENTRY)\b", text):
        e.message = f"{NEITHER}: {e.message}"
    return e


def to_stablehlo(hlo_text: str) -> str:
    """HLO text as StableHLO text, through XLA's parser and jaxlib's converter."""
    from .jaxlib_names import bytecode_to_text, hlo_to_stablehlo_bytecode
    what = "--emit stablehlo"
    return bytecode_to_text(hlo_to_stablehlo_bytecode(hlo_text, what), what)
