"""Start-up and parsing through the CLI, as a user meets them (issue 23 item 6): whole
processes, timed from outside.

* `run`: `xlaplug run examples/mlp.hlo` with a warm JIT cache (one run first warms it).
* `compile`: `xlaplug compile --passes none BIG.hlo -o OUT` of a module jax prints with its
  metadata (parse_speed.py's, 22,505 instructions at the default size): instructions per
  second of the whole process -- start-up, plugins, parse, verify and printing.

Each command runs `--repeat` times; with `--baseline DIR` (another checkout) the two
alternate, A B A B, and the ratio is taken pair by pair, so drift in a shared machine's
speed cancels.  The children get Python's bytecode cache (PYTHONDONTWRITEBYTECODE is
dropped: an installed package has its .pyc files) and their own JIT cache directory.
Figures at load average > 0.5 are noisy: a warning says so.
Run: python benchmarks/startup.py [--repeat 7] [--instructions 10000] [--baseline DIR]
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(cmd: list[str], env: dict) -> tuple[float, float]:
    """(wall s, CPU s) of one process running `cmd` to a zero exit."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    # In the checkout's own folder: `python -m` puts the working directory first on sys.path.
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, cwd=env["PYTHONPATH"])
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def child_env(checkout: Path, cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(checkout), XLAPLUG_CACHE_DIR=str(cache))
    return env


def rounds(cmds: dict[str, tuple[list[str], dict]], repeat: int) -> dict[str, list]:
    """Each command once to warm (JIT cache, bytecode, OS file cache), then `repeat` rounds
    in turn."""
    for cmd, env in cmds.values():
        timed(cmd, env)
    out: dict[str, list] = {k: [] for k in cmds}
    for _ in range(repeat):
        for k, (cmd, env) in cmds.items():
            out[k].append(timed(cmd, env))
    return out


def report(what: str, got: dict[str, list], per: int | None = None) -> None:
    for k, runs in got.items():
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        rate = f", {per / wall:,.0f} instructions/s wall ({per / cpu:,.0f} CPU)" if per else ""
        print(f"{what} [{k}]: wall median {wall:.3f} s (min {min(w for w, _ in runs):.3f}), "
              f"CPU median {cpu:.3f} s{rate}")
    if len(got) == 2:
        a, b = got.values()
        ratios = [x[0] / y[0] for x, y in zip(a, b)]
        print(f"{what}: wall this / baseline, pair by pair: median {statistics.median(ratios):.2f}"
              f" (min {min(ratios):.2f}, max {max(ratios):.2f})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--instructions", type=int, default=10_000,
                    help="size of the jax-built module (parse_speed.py's builder)")
    ap.add_argument("--baseline", default=None, help="another checkout to alternate with")
    ap.add_argument("--only", choices=["run", "compile"], default=None)
    args = ap.parse_args()
    load = os.getloadavg()[0]
    print(f"load average {load:.2f} on {os.cpu_count()} cores")
    if load > 0.5:
        print("WARNING: load average over 0.5: the figures are noisy", file=sys.stderr)
    checkouts = {"this": ROOT}
    if args.baseline:
        checkouts["baseline"] = Path(args.baseline).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        envs = {k: child_env(c, tmp / f"cache-{k}") for k, c in checkouts.items()}
        py = [sys.executable, "-m", "xlaplug"]
        if args.only in (None, "run"):
            mlp = str(ROOT / "examples" / "mlp.hlo")
            report("warm run of examples/mlp.hlo",
                   rounds({k: (py + ["run", mlp], e) for k, e in envs.items()}, args.repeat))
        if args.only in (None, "compile"):
            sys.path.insert(0, str(ROOT / "benchmarks"))
            from parse_speed import build_module_text
            big = tmp / "big.hlo"
            big.write_text(build_module_text(args.instructions))
            sys.path.insert(0, str(ROOT))
            from xlaplug.hlo.text.parser import parse_module
            count = parse_module(big.read_text()).instruction_count()
            cmds = {k: (py + ["compile", "--passes", "none", str(big), "-o",
                              str(tmp / f"out-{k}.hlo")], e) for k, e in envs.items()}
            report(f"compile --passes none of {count:,} instructions ({big.stat().st_size / 1e6:.1f}"
                   f" MB, jax-printed with metadata)", rounds(cmds, args.repeat), count)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
