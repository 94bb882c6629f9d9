"""JSON summaries of modules (for `--emit json`)."""
from __future__ import annotations

from collections import Counter

from ..hlo.text.attributes import format_value
from ..hlo.ir import Module


def module_json(module: Module, pm=None) -> dict:
    counts = Counter(i.opcode for c in module.computations for i in c.instructions)
    out = {
        "module": module.name,
        "entry": module.entry.name,
        "attributes": {k: format_value(k, v) for k, v in module.attrs.items()},
        "instruction_count": module.instruction_count(),
        "opcode_counts": dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
        "computations": [
            {"name": c.name, "is_entry": c is module.entry,
             "parameters": [str(p.shape) for p in c.parameters],
             "result": str(c.root.shape), "instructions": len(c.instructions),
             **({"execution_thread": c.execution_thread} if c.execution_thread else {})}
            for c in module.computations],
    }
    if pm is not None:
        out["passes"] = [{"name": n, "changed": ch} for n, ch in pm.log]
    return out
