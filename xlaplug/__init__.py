"""xlaplug: XLA's HLO, extensible by plugins at run time."""
__version__ = "0.1.0"
