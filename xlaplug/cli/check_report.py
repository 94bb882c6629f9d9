"""`xlaplug check-plugins`' report: one row per op (its checks, the result, the first
failure or what every check found) and a summary line; `--verbose` one row per check (each
example and trial), as the JSON lists them."""
from __future__ import annotations

from ..hlo.errors import plural


def print_checks(results, verbose: bool) -> None:
    from .terminal import console
    out = console(soft_wrap=True)
    out.print(trials_table(results) if verbose else ops_table(results))
    out.print(summary(results), highlight=False)


def ops_table(results):
    from rich.markup import escape

    from .terminal import table
    t = table("plugin checks (one row per op; --verbose: every check)")
    for h in ("op", "plugin", "checks", "result", "detail"):
        t.add_column(h, justify="right" if h == "checks" else "left")
    for (op, plugin), rows in _by_op(results).items():
        failed = failures(rows)
        result = (f"[red]FAIL[/red] {len(failed)} of {len(rows)}" if failed else
                  "[yellow]not checked[/yellow]" if _unchecked(rows) else "[green]ok[/green]")
        # the first failure; else what the checks found, each distinct finding once
        detail = failed[0].detail if failed else "; ".join(dict.fromkeys(r.detail for r in rows))
        t.add_row(escape(op), escape(plugin), str(len(rows)), result, escape(detail))
    return t


def trials_table(results):
    from rich.markup import escape

    from .terminal import table
    t = table("plugin checks")
    for h in ("op", "example", "trial", "result", "detail"):
        t.add_column(h, justify="right" if h == "trial" else "left")
    for r in results:
        t.add_row(escape(r.op), escape(r.example), str(r.trial),
                  "[yellow]not checked[/yellow]" if r.ok is None else
                  "[green]ok[/green]" if r.ok else "[red]FAIL[/red]", escape(r.detail))
    return t


def failures(results) -> list:
    """The checks that failed (`ok` False; None is a check that could not be made)."""
    return [r for r in results if r.ok is False]


def _unchecked(rows) -> bool:
    return any(r.ok is None for r in rows)


def summary(results) -> str:
    """`3 ops checked (18 checks): all ok` or `1 of 3 ops failed (2 of 18 checks): acme.x`,
    then `; 2 ops not checked: acme.y, acme.z` for ops the check could not run."""
    ops = _by_op(results)
    skipped = [op for (op, _), rows in ops.items() if _unchecked(rows)]
    checked = {k: rows for k, rows in ops.items() if not _unchecked(rows)}
    results = [r for rows in checked.values() for r in rows]
    bad_ops = [op for (op, _), rows in checked.items() if failures(rows)]
    bad = len(failures(results))
    tail = f"; {plural(len(skipped), 'op')} not checked: {_names(skipped)}" if skipped else ""
    if not ops:
        return "no ops checked: no loaded plugin has a kernel for this device"
    if not bad:
        return (f"{plural(len(checked), 'op')} checked ({plural(len(results), 'check')}): "
                f"all ok{tail}")
    return (f"{len(bad_ops)} of {plural(len(checked), 'op')} failed ({bad} of "
            f"{plural(len(results), 'check')}): {', '.join(bad_ops)}{tail}")


def _names(ops: list[str], most: int = 8) -> str:
    return ", ".join(ops[:most]) + (f" and {len(ops) - most} more" if len(ops) > most else "")


def _by_op(results) -> dict:
    out: dict = {}
    for r in results:
        out.setdefault((r.op, r.plugin), []).append(r)
    return out
