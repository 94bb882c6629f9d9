"""`list-plugins`: a table (rich) or JSON of what each plugin file provides."""
from __future__ import annotations

from ..hlo.opcodes import ALL_OPCODES
from .registry import Registry


def _rows(reg: Registry) -> list[dict]:
    rows = []
    for rec in reg.records:
        if not rec.plugins:
            rows.append({"plugin": "-", "version": "-", "source": rec.source, "ops": [],
                         "decompositions": [], "kernels": {}, "overrides": [], "passes": [],
                         "status": rec.error or "no Plugin objects"})
        for p in rec.plugins:
            kernels: dict[str, list[str]] = {}
            for (op, dev) in sorted(p.kernels):
                kernels.setdefault(dev, []).append(op)
            rows.append({
                "plugin": p.name, "version": p.version, "source": p.source,
                "description": p.description, "ops": p.ops,
                "decompositions": sorted(p.decompositions), "kernels": kernels,
                "overrides": [f"{op} ({dev})" for op, dev in p.overrides],
                "passes": sorted(p.passes), "status": rec.error or "ok"})
    return rows


def plugins_json(reg: Registry) -> dict:
    return {"plugins": _rows(reg),
            "overrides": {f"{op}:{dev}": e.plugin.name for (op, dev), e in reg.kernels.items()
                          if (op, dev) in reg.replaced or op in ALL_OPCODES}}


def plugins_table(reg: Registry):
    from rich.table import Table
    t = Table(title="plugins")
    for h in ("plugin", "version", "source", "ops", "decomposition", "kernels", "overrides",
              "passes", "status"):
        t.add_column(h)
    for r in _rows(reg):
        deco = "yes" if r["decompositions"] and set(r["decompositions"]) >= set(r["ops"]) \
            else ("partly" if r["decompositions"] else "no")
        kern = "; ".join(f"{d}: {len(v)}" for d, v in r["kernels"].items()) or "-"
        t.add_row(r["plugin"], r["version"], r["source"], ", ".join(r["ops"]) or "-", deco, kern,
                  ", ".join(r["overrides"]) or "-", ", ".join(r["passes"]) or "-",
                  r["status"] if r["status"] == "ok" else f"[red]{r['status']}[/red]")
    return t
