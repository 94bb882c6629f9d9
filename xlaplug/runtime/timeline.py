"""A run as a Chrome / Perfetto trace (`xlaplug run --trace`, `RunOptions(trace=True)`).

The profilers of a run's devices keep every kernel call's clock readings (profiler.py); this
module turns them into Trace Event Format events: an "X" (complete) slice per kernel call and
per entry run, with `ts` and `dur` in microseconds, and "M" (metadata) events naming the
tracks.  One process per MPI rank (pid = rank; a run in one process is pid 0), one thread
per device (tid = device id) and one for the host's phases (parsing, the pass pipeline,
preparing the kernels).

Times are kept as integer nanoseconds since the epoch until the trace is finished
(`chrome_trace`): perf_counter readings plus this process's offset to the wall clock, so the
ranks of an MPI run line up on one time axis, and a slice nested in another (a while body's
thunks in the while's slice) stays inside it after the shift to the trace's start.
"""
from __future__ import annotations

import time

HOST_TID = 1_000_000  # the host's track, beside the device ids


def clock_offset_ns() -> int:
    """Nanoseconds to add to a perf_counter reading (in ns) to get the wall clock."""
    return time.time_ns() - time.perf_counter_ns()


def _ns(t: float, offset_ns: int) -> int:
    return round(t * 1e9) + offset_ns


def _slice(name: str, cat: str, start: float, end: float, pid: int, tid: int,
           offset_ns: int, args: dict) -> dict:
    t0, t1 = _ns(start, offset_ns), _ns(end, offset_ns)
    return {"name": name, "cat": cat, "ph": "X", "ts": t0, "dur": t1 - t0, "pid": pid,
            "tid": tid, "args": args}


def _meta(kind: str, pid: int, tid: int, value) -> dict:
    key = "sort_index" if kind.endswith("sort_index") else "name"
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": {key: value}}


def process_events(pid: int, name: str) -> list[dict]:
    return [_meta("process_name", pid, 0, name), _meta("process_sort_index", pid, 0, pid)]


def host_events(phases: list[tuple[str, float, float]], pid: int, offset_ns: int) -> list[dict]:
    """The host's phases, (name, start, end) perf_counter readings, on the host track."""
    out = [_meta("thread_name", pid, HOST_TID, "host: parse, compile"),
           _meta("thread_sort_index", pid, HOST_TID, -1)]
    out += [_slice(name, "phase", start, end, pid, HOST_TID, offset_ns, {})
            for name, start, end in phases]
    return out


def device_events(profiler, device: int, grid, pid: int, offset_ns: int,
                  communicates=None) -> list[dict]:
    """Device `device`'s track: a slice per entry run and per kernel call its profiler kept.
    `communicates(ins)`: whether a custom call's kernel takes a communicator (its peers are
    then every device)."""
    label = f"device {device}"
    if grid.count > 1:
        label += f" (replica {grid.replica_of(device)}, partition {grid.partition_of(device)})"
    out = [_meta("thread_name", pid, device, label),
           _meta("thread_sort_index", pid, device, device)]
    args_of: dict[int, dict] = {}
    runs = 0
    for start, end, st in profiler.timeline:
        if st is None:
            out.append(_slice(f"run {runs}", "run", start, end, pid, device, offset_ns,
                              {"device": device, "run": runs}))
            runs += 1
            continue
        args = args_of.get(id(st))
        if args is None:
            args = args_of[id(st)] = thunk_args(st, grid, device, communicates)
        out.append(_slice(st.instruction, st.opcode, start, end, pid, device, offset_ns,
                          args))
    return out


def thunk_args(st, grid, device: int, communicates=None) -> dict:
    """What a thunk's slice shows: its instruction, bytes, and a collective's peers."""
    args = {"opcode": st.opcode, "instruction": st.instruction, "computation": st.computation,
            "shape": st.shape, "kind": st.kind, "bytes_in": st.bytes_in,
            "bytes_out": st.bytes_out, "bytes_moved": st.bytes_in + st.bytes_out}
    ins = st.ins
    if ins is not None:
        target = ins.attrs.get("custom_call_target") if st.opcode == "custom-call" else None
        if target is not None:
            args["target"] = str(target)
        args.update(collective_peers(ins, grid, device, communicates))
    return args


def collective_peers(ins, grid, device: int, communicates=None) -> dict:
    """{"peers": the devices `device` meets at `ins`, ...} for a collective (its replica
    groups and mode, or a permute's pairs), {} for any other instruction."""
    from ..backends.common.errors import ExecutionError
    from ..backends.spmd.groups import group_mode, listed_groups, participants, permute_domain
    from ..backends.spmd.place import PERMUTES
    from .spmd.runner import GROUPED
    op = ins.opcode
    try:
        if op in GROUPED:
            out = {"peers": list(participants(ins, grid, device)),
                   "replica_groups": [list(g) for g in listed_groups(ins)],
                   "group_mode": group_mode(ins).value}
        elif op in PERMUTES:
            domain = permute_domain(ins, grid, device)
            me = domain.index(device)
            pairs = [tuple(p) for p in ins.attrs.get("source_target_pairs", ())]
            out = {"peers": sorted({domain[t] for s, t in pairs if s == me} |
                                   {domain[s] for s, t in pairs if t == me}),
                   "sends_to": [domain[t] for s, t in pairs if s == me],
                   "receives_from": [domain[s] for s, t in pairs if t == me],
                   "source_target_pairs": [list(p) for p in pairs]}
        elif op == "custom-call" and communicates is not None and communicates(ins):
            out = {"peers": list(range(grid.count)), "communicator": True}
        else:
            return {}
    except (ExecutionError, ValueError, KeyError):
        return {}  # a group the run itself refused: the run's error said so
    channel = ins.attrs.get("channel_id")
    if channel is not None:
        out["channel_id"] = int(channel)
    return out


def chrome_trace(events: list[dict], **other) -> dict:
    """The trace object to write as JSON: `events` (times in epoch ns) shifted to start at 0
    and given in microseconds; `other`: what the file says about the run (otherData)."""
    meta = [e for e in events if e["ph"] != "X"]
    # Each track in time order, an enclosing slice before the slices it holds (viewers that
    # read the file in order then nest them without sorting).
    timed = sorted((e for e in events if e["ph"] == "X"),
                   key=lambda e: (e["pid"], e["tid"], e["ts"], -e["dur"]))
    origin = min((e["ts"] for e in timed), default=0)
    out = meta + [{**e, "ts": (e["ts"] - origin) / 1000, "dur": e["dur"] / 1000}
                  for e in timed]
    return {"traceEvents": out, "displayTimeUnit": "ms", "otherData": other}
