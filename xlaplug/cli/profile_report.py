"""The `xlaplug run --profile` report: per-thunk times and bytes, as a table and as JSON.

Figures are per run (a Profiler's totals divided by its run count; runs during which numba
compiled are left out and counted, runtime/profiler.py).  Thunks are sorted by
their time (self kernel time + dispatch time), so the shares of the rows sum to 100% of the
run's wall time; "dispatch" is time spent outside kernels (see backends/profiler.py).
"""
from __future__ import annotations

WIDTH = 80  # the table fits an 80-column terminal


def profile_json(profiler, entry: str) -> dict:
    """The profile per run; `entry` names the entry computation (others are nested)."""
    runs = max(profiler.runs, 1)
    stats = sorted(profiler.stats.values(), key=lambda s: -s.total_s)
    total = profiler.wall_s / runs
    kernel = sum(s.kernel_s for s in stats) / runs
    dispatch = sum(s.dispatch_s for s in stats) / runs
    calls = sum(s.calls for s in stats if s.opcode != "parameter") / runs
    rows = []
    for s in stats:
        t = s.total_s / runs
        moved = (s.bytes_in + s.bytes_out) * s.calls / runs
        rows.append({
            "computation": s.computation, "index": s.index, "instruction": s.instruction,
            "opcode": s.opcode, "kind": s.kind, "shape": s.shape,
            "calls": s.calls / runs, "time_s": t, "kernel_s": s.kernel_s / runs,
            "dispatch_s": s.dispatch_s / runs,
            "dispatch_per_call_s": s.dispatch_s / s.calls if s.calls else 0.0,
            "share": t / total if total > 0 else 0.0,
            "bytes_in": s.bytes_in, "bytes_out": s.bytes_out, "bytes_moved": moved,
            "gb_per_s": moved / (s.kernel_s / runs) / 1e9 if s.kernel_s > 0 else None,
        })
    return {"entry": entry, "runs": profiler.runs, "compiled_runs": profiler.compiled_runs,
            "wall_s": total, "kernel_s": kernel,
            "dispatch_s": dispatch, "kernel_calls": calls,
            "dispatch_per_call_s": dispatch / calls if calls else 0.0, "thunks": rows}


def _bytes(n: float) -> str:
    for unit in ("B", "K", "M", "G"):
        if n < 1000 or unit == "G":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return str(n)


def profile_table(profile: dict, top: int = 25) -> str:
    """Plain text, at most WIDTH columns: the `top` costliest thunks and one line for the rest."""
    head = (f"{'ms':>8} {'share':>6} {'calls':>6} {'kern ms':>8} {'disp us':>7} "
            f"{'moved':>7} {'GB/s':>5}  thunk")
    lines = [head, "-" * min(WIDTH, len(head) + 20)]
    rows = profile["thunks"]
    name_width = WIDTH - len(head) + len("thunk")

    def line(r):
        gbs = "-" if r["gb_per_s"] is None else f"{r['gb_per_s']:.1f}"
        name = f"{r['opcode']} {r['instruction']}"
        if r["computation"] != profile["entry"]:
            name = f"{r['computation']}/{name}"
        if len(name) > name_width:
            name = name[:name_width - 1] + "~"
        calls = r["calls"]
        calls_txt = f"{calls:.0f}" if calls == int(calls) else f"{calls:.1f}"
        return (f"{r['time_s'] * 1e3:8.3f} {r['share'] * 100:5.1f}% {calls_txt:>6} "
                f"{r['kernel_s'] * 1e3:8.3f} {r['dispatch_per_call_s'] * 1e6:7.1f} "
                f"{_bytes(r['bytes_moved']):>7} {gbs:>5}  {name}")

    for r in rows[:top]:
        lines.append(line(r))
    rest = rows[top:]
    if rest:
        t = sum(r["time_s"] for r in rest)
        share = sum(r["share"] for r in rest)
        lines.append(f"{t * 1e3:8.3f} {share * 100:5.1f}% {'':>6} {'':>8} {'':>7} "
                     f"{'':>7} {'':>5}  ({len(rest)} more thunks)")
    p = profile
    lines.append(f"per run (of {p['runs']}): {p['wall_s'] * 1e3:.3f} ms = kernels "
                 f"{p['kernel_s'] * 1e3:.3f} ms + dispatch {p['dispatch_s'] * 1e3:.3f} ms")
    lines.append(f"{p['kernel_calls']:.0f} kernel calls, dispatch "
                 f"{p['dispatch_per_call_s'] * 1e6:.1f} us per call")
    if p["compiled_runs"]:
        lines.append(f"left out: {p['compiled_runs']} run(s) during which numba compiled"
                     + ("" if p["runs"] else " -- every one: run with a larger --repeat"))
    return "\n".join(lines) + "\n"
