"""HLO passes: one per file, a dataclass whose fields are its options; the table of
built-in passes, pipeline specs and the pass manager in manager.py."""
from .context import HloPass, PassContext
from .manager import (BUILTIN_PASSES, DEFAULT_PIPELINE, PassManager, default_pipeline,
                      make_pass, parse_pipeline, resolve_pipeline)

__all__ = ["BUILTIN_PASSES", "DEFAULT_PIPELINE", "HloPass", "PassContext", "PassManager",
           "default_pipeline", "make_pass", "parse_pipeline", "resolve_pipeline"]
