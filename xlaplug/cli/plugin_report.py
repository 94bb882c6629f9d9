"""`list-plugins`: a table (rich) or JSON of what each plugin file provides."""
from __future__ import annotations

from ..hlo.opcodes import ALL_OPCODES
from ..plugin.registry import Registry


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


def _status_cell(status: str) -> str:
    from rich.markup import escape
    return "ok" if status == "ok" else f"[red]{escape(status)}[/red]"


def plugins_summary(reg: Registry):
    """One row per plugin (per file that failed to load), to fit 80 columns: name,
    version, op count, how many ops have a decomposition, kernels per device (core-opcode
    overrides included), passes, status.  `list-plugins NAME` / `--verbose` give the whole
    of it; load errors follow the table (`load_errors`)."""
    from ..plugin.api import DEVICES
    from .terminal import table
    t = table("plugins", "details: xlaplug list-plugins NAME (or --verbose)")
    t.add_column("plugin", no_wrap=True)
    t.add_column("version")
    for h in ("ops", "decomp", *DEVICES, "passes"):
        t.add_column(h, justify="right")
    t.add_column("status", no_wrap=True)
    for r in _rows(reg):
        name = r["plugin"] if r["plugin"] != "-" else r["source"].rsplit("/", 1)[-1]
        ops = set(r["ops"])
        t.add_row(name, r["version"], str(len(ops)),
                  str(len(set(r["decompositions"]) & ops)) if ops else "-",
                  *(str(len(r["kernels"].get(d, ()))) for d in DEVICES),
                  str(len(r["passes"])),
                  "ok" if r["status"] == "ok" else "[red]not loaded[/red]")
    return t


def load_errors(reg: Registry) -> list[str]:
    """`SOURCE: error` of each plugin file that did not load, printed below the summary."""
    from rich.markup import escape
    return [f"[red]not loaded[/red] {escape(r.source)}: {escape(r.error)}"
            for r in reg.records if r.error]


def plugin_details(reg: Registry, names=()) -> list:
    """For each plugin named (all when none): a line saying what it is and where it comes
    from, and a table of its ops -- shape rule, decomposition, a kernel per device --,
    overrides and passes.  An unknown name is an error naming the loaded ones."""
    from rich.markup import escape

    from ..plugin.api import DEVICES, PluginError
    from .terminal import table
    rows = _rows(reg)
    known = {r["plugin"] for r in rows}
    missing = [n for n in names if n not in known]
    if missing:
        raise PluginError(f"no loaded plugin is named '{missing[0]}' (loaded: "
                          f"{', '.join(sorted(known - {'-'})) or 'none'})")
    out = []
    for r in rows:
        if names and r["plugin"] not in names:
            continue
        head = (f"[bold]{escape(r['plugin'])}[/bold] {escape(r['version'])}"
                + (f" -- {escape(r['description'])}" if r.get("description") else "")
                + f"\nsource: {escape(r['source'])}\nstatus: {_status_cell(r['status'])}")
        out.append(head)
        plugin = next((p for p in reg.plugins if p.name == r["plugin"]), None)
        if r["ops"] and plugin is not None:
            t = table()
            for h in ("op", "shape", "decomposition", *DEVICES):
                t.add_column(h)
            for op in r["ops"]:
                t.add_row(escape(op), "yes" if op in plugin.shapes else "-",
                          "yes" if op in plugin.decompositions else "-",
                          *("yes" if (op, d) in plugin.kernels else "-" for d in DEVICES))
            out.append(t)
        for what in ("overrides", "passes"):
            if r[what]:
                out.append(f"{what}: {escape(', '.join(r[what]))}")
        out.append("")
    return out
