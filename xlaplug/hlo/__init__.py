"""HLO: the IR and its semantics (ir, dtypes, opcodes, builder, rewrite, verifier,
shape_rules) here; the text front end (grammar, parser, printer, literals, attribute
syntax) in `hlo/text/`, which builds on the IR and is never imported by it."""
from .errors import HloError, HloSyntaxError, HloVerifyError
from .ir import Computation, Instruction, Layout, Module, Shape

__all__ = ["HloError", "HloSyntaxError", "HloVerifyError", "Computation", "Instruction",
           "Layout", "Module", "Shape", "parse_file", "parse_module"]


def __getattr__(name: str):
    # `from xlaplug.hlo import parse_module` keeps working without the IR package importing
    # the text front end when it is itself imported.
    if name in ("parse_file", "parse_module"):
        from .text import parser
        return getattr(parser, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
