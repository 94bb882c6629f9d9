"""HLO text, as XLA and JAX print it: the grammar (hlo.lark), the parser and its
diagnostics, shapes, literals and attribute syntax, the canonical printer, and the one
file reader the CLI and the library share."""
from .parser import parse_file, parse_module
from .printer import module_to_text
from .reader import read_hlo

__all__ = ["parse_file", "parse_module", "module_to_text", "read_hlo"]
