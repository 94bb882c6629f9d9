"""HLO passes: one per file, registered by name in manager.PASSES."""
from .manager import DEFAULT_PIPELINE, PASSES, PassManager, register_pass, resolve_pipeline

__all__ = ["DEFAULT_PIPELINE", "PASSES", "PassManager", "register_pass", "resolve_pipeline"]
