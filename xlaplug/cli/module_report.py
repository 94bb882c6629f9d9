"""What `compile --emit` shows of a module: its JSON summary (`--emit json`) and the thunk
sequence as a terminal table (the plain-text form is runtime.thunks.thunks_text)."""
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


def thunks_table(seq):
    """The thunk sequence as a terminal table (rows and footer from runtime.thunks)."""
    from ..runtime.thunks import THUNK_HEADER, thunk_rows, thunks_footer
    from .terminal import table
    t = table(f"thunk sequence: {seq.computation.name}", thunks_footer(seq))
    for h in THUNK_HEADER:
        t.add_column(h, justify="right" if h in ("#", "bytes") else "left")
    for r in thunk_rows(seq):
        t.add_row(*r)
    return t
