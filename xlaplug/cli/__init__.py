"""The `xlaplug` command line: click commands, terminal output and report tables.  This is
the only layer that prints or exits; everything below returns values or raises HloErrors."""
from .main import main

__all__ = ["main"]
