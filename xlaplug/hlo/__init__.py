"""HLO text front end: IR, parser, printer, verifier."""
from .errors import HloError, HloSyntaxError, HloVerifyError
from .ir import Computation, Instruction, Layout, Module, Shape
from .parser import parse_file, parse_module

__all__ = ["HloError", "HloSyntaxError", "HloVerifyError", "Computation", "Instruction",
           "Layout", "Module", "Shape", "parse_file", "parse_module"]
