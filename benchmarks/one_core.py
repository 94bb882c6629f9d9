"""run.py's second column: every workload again with xlaplug and XLA:CPU both held to one core.

The run happens in a child process that holds itself to one CPU of the parent's affinity
set before any library starts (as `taskset -c N` would), so that both libraries see a single schedulable core from the start:
XLA:CPU sizes its thread pools from the affinity mask, and the thread settings of the
libraries that read a count instead (numba, OpenBLAS, OpenMP, MKL) are set to 1 for the
child -- the same holding for both sides, chosen before either library starts.  The child
is run.py itself with `--cores one`, which prints its records as JSON; the parent merges
them into its own records as `one_core`.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

ENV_FLAG = "XLAPLUG_BENCH_ONE_CORE"  # in the child: the CPU it holds itself to
THREAD_VARS = ("NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
               "MKL_NUM_THREADS")


def held() -> bool:
    """Whether this process is the one-core child."""
    return ENV_FLAG in os.environ


def hold() -> None:
    """In the child, before numpy, numba or jax start: run on the one CPU the parent chose
    (setting it here rather than between fork and exec keeps the parent's subprocess a
    plain spawn: jax warns against fork in its threaded process)."""
    if held():
        os.sched_setaffinity(0, {int(os.environ[ENV_FLAG])})


def _one_cpu() -> int:
    """The CPU the child runs on: the highest of the parent's set (cpu 0 takes most of
    the machine's interrupts)."""
    return max(os.sched_getaffinity(0))


def run_child(script: str, argv: list[str]) -> tuple[dict | None, str]:
    """run.py `argv` with `--cores one --json` in a child held to one core: (its JSON
    record, or None and why it failed)."""
    if not hasattr(os, "sched_setaffinity"):
        return None, "this platform cannot set a process's CPU affinity"
    cpu = _one_cpu()
    env = dict(os.environ, **{v: "1" for v in THREAD_VARS}, **{ENV_FLAG: str(cpu)})
    cmd = [sys.executable, script, *argv, "--cores", "one", "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env)
    sys.stderr.write(p.stderr)
    try:
        return json.loads(p.stdout), ""
    except json.JSONDecodeError:
        last = (p.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"the one-core run failed (exit {p.returncode}): {last}"


def merge(results: list[dict], child: dict) -> None:
    """Each workload's one-core figures (xlaplug ms, XLA ms, ratio, the load when it
    started) into the parent's record of it."""
    by_name = {r["workload"]: r for r in child.get("results", [])}
    for r in results:
        c = by_name.get(r["workload"])
        if c is None:
            continue
        r["one_core"] = {"xlaplug_ms": c["xlaplug"].get("run_ms"),
                         "xla_ms": c["xla"].get("run_ms"),
                         "ratio_xlaplug_xla": c.get("ratio_xlaplug_xla"),
                         "load": c.get("load"), "cpu": child["environment"].get("cpu_held"),
                         "matches_xla": c["xlaplug"].get("matches_xla")}


def forward_args(opts) -> list[str]:
    """The parent's options that the child repeats."""
    args = ["--repeat", str(opts.repeat), "--device", opts.device]
    if opts.only:
        args += ["--only", opts.only]
    if opts.passes:
        args += ["--passes", opts.passes]
    if opts.quick:
        args.append("--quick")
    return args
