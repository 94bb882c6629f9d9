"""A deterministic mutation fuzzer: mutants of corpus programs through compile, then run.

    python scripts/fuzz.py --seed 0 --count 500 [--jobs 2] [--timeout 60] [--save-dir DIR]

The corpus is examples/*.hlo, the modules of tests/data/xla_parser_cases.json (XLA's parser
tests), a fixed sample of the StableHLO conformance modules (when the suite sits next to the
repository, as tests/oracle.py finds it) and the jax-lowered programs of tests/.corpus_cache
(when the jax corpus has been built).  Mutant k is a pure function of (seed, k)
(scripts/fuzz_mutations.py).  Each runs in a process of its own, as a user runs the CLI:
`xlaplug compile FILE`, then `xlaplug run FILE --max-memory 1G --max-while-iterations
10000` (both verbs in one interpreter, each under click's own exit handling), under an
address-space limit and a timeout.  Each mutant is classified:

  clean   exit 0, 1 (a check failed) or 2 with an error headline (`FILE:L:C: error: ...`,
          `FILE: error: ...` or `error: ...`) and no traceback
  crash   a Python traceback, a signal (a segfault), another exit code, click's
          "Aborted!", or an exit 2 whose first line is not an error headline
  hang    past --timeout seconds

A crash or hang is minimized (delta debugging over lines, then characters: the smallest
text that still fails the same way) and written to --save-dir with the original.  Prints one
JSON object of counts; exit 1 if any mutant crashed or hung.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from fuzz_minimize import minimize  # noqa: E402
from fuzz_mutations import mutate  # noqa: E402

CLASSES = ("clean", "crash", "hang")
BAD = ("crash", "hang")
GUARDS = ["--max-memory", "1G", "--max-while-iterations", "10000"]
MEMORY_LIMIT = 6 << 30  # each mutant's address space: past it, MemoryError
HEADLINE = re.compile(r"^(?:\S.*?: )?error: \S")  # FILE:L:C: error, FILE: error, error

# Runs the verbs in one interpreter, each as the console entry point does (click's
# standalone mode: its exit codes and messages), and reports each verb's exit code and
# stderr as one JSON line on stdout (the verbs' own stdout is discarded).
DRIVER = r"""
import contextlib, io, json, os, sys, traceback
path, guards = sys.argv[1], sys.argv[2:]
out = sys.stdout
from xlaplug.cli import main
for verb in (["compile", path], ["run", path, *guards]):
    err = io.StringIO()
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), \
            contextlib.redirect_stderr(err):
        try:
            main(verb, prog_name="xlaplug")
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = "exception"
    out.write(json.dumps({"verb": verb[0], "code": code, "stderr": err.getvalue()}) + "\n")
    out.flush()
    if code != 0:
        break
"""


def conformance_dir() -> Path | None:
    """The StableHLO suite next to the repository (a worktree's is one folder further up)."""
    for base in (ROOT.parent, ROOT.parent.parent):
        d = base / "shared" / "conformance" / "stablehlo"
        if d.is_dir():
            return d
    return None


def corpus(sample: int = 150) -> list[tuple[str, str]]:
    """(name, text) of every corpus program, in a fixed order."""
    out = [(p.name, p.read_text()) for p in sorted((ROOT / "examples").glob("*.hlo"))]
    cases = ROOT / "tests" / "data" / "xla_parser_cases.json"
    if cases.is_file():
        out += [(f"xla:{c['name']}", c["text"]) for c in json.loads(cases.read_text())
                if c.get("text", "").strip()]
    d = conformance_dir()
    if d is not None:
        files = sorted(d.glob("*.hlo"))
        step = max(1, len(files) // sample)
        out += [(p.name, p.read_text()) for p in files[::step][:sample]]
    for p in sorted((ROOT / "tests" / ".corpus_cache").glob("*/*/lowered.hlo")):
        out.append((f"jax:{p.parent.name}", p.read_text()))
    return out


def mutant(programs: list[tuple[str, str]], seed: int, k: int) -> tuple[str, str, str]:
    rng = random.Random(f"{seed}:{k}")
    name, text = programs[rng.randrange(len(programs))]
    text, how = mutate(text, rng)
    return name, how, text


# ---- one mutant, one process ----------------------------------------------------------

# Each mutant's process gets the limit from a small launcher that sets it and execs the
# command, not from a preexec_fn: that makes subprocess fork() the whole calling process
# (no vfork), which in a test worker holding jax, numba and their compiled code costs
# 40-100 ms a process -- most of a minimization's time, a process per candidate -- and
# forks a multithreaded process (jax warns it may deadlock).  `-S -I`: no site, ~10 ms.
_LAUNCHER = ("import os, resource, sys\n"
             "limit = int(sys.argv[1])\n"
             "try:\n"
             "    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
             "except (ValueError, OSError):\n"
             "    pass\n"
             "os.execvp(sys.argv[2], sys.argv[2:])\n")


def _limited(command: list[str]) -> list[str]:
    """`command` run with its address space limited to MEMORY_LIMIT."""
    return [sys.executable, "-S", "-I", "-c", _LAUNCHER, str(MEMORY_LIMIT), *command]


def default_command(path: str) -> list[str]:
    return [sys.executable, "-c", DRIVER, path, *GUARDS]


def classify(path: str, timeout: float, command=default_command) -> tuple[str, str]:
    """(class, detail) of the mutant file at `path`, run in a fresh process."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "NUMBA_ENABLE_CUDASIM": "0"}
    try:
        p = subprocess.run(_limited(command(path)), capture_output=True, text=True,
                           timeout=timeout, env=env, cwd=ROOT, errors="backslashreplace")
    except subprocess.TimeoutExpired:
        return "hang", f"past {timeout:g} s"
    verbs = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    phase = ["compile", "run"][min(len(verbs), 1)] if p.returncode else \
        (verbs[-1]["verb"] if verbs else "?")
    if p.returncode < 0:
        return "crash", f"{phase}: killed by signal {-p.returncode}"
    if p.returncode != 0 and not verbs:
        return "crash", f"exit {p.returncode}: {_last_line(p.stderr)}"
    if not verbs:  # a command without the driver's report: its own exit code and stderr
        verbs = [{"verb": "?", "code": p.returncode, "stderr": p.stderr}]
    last = verbs[-1]
    return judge(last["verb"], last["code"], last["stderr"] + p.stderr)


def judge(verb: str, code, stderr: str) -> tuple[str, str]:
    """clean or crash, from one verb's exit code and stderr."""
    if "Traceback (most recent call last)" in stderr or code == "exception":
        return "crash", f"{verb}: traceback: {_last_line(stderr)}"
    lines = [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith("warning:")]
    first = lines[0] if lines else ""
    if code == 0:
        return "clean", "exit 0"
    if code == 1:
        if "Aborted!" in stderr:
            return "crash", f"{verb}: click's 'Aborted!' (an EOFError)"
        return "clean", f"exit 1: {first[:200]}"
    if code == 2:
        if HEADLINE.match(first):
            return "clean", f"exit 2: {first[:200]}"
        return "crash", f"{verb}: exit 2 without an error headline: {first[:200]!r}"
    return "crash", f"{verb}: exit {code}: {first[:200]}"


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def _signature(cls: str, detail: str) -> str:
    """What a smaller text must reproduce: the class, and for a crash its kind (the
    exception's type, the signal, the exit code), not the message that names the text."""
    if cls == "hang":
        return "hang"
    m = re.search(r"traceback: (\w+(?:\.\w+)*)", detail) or \
        re.search(r"(signal \d+|exit \d+ without|exit \d+|Aborted)", detail)
    return f"{cls}:{m.group(1) if m else detail}"


# ---- the campaign ---------------------------------------------------------------------

def fuzz(seed: int, count: int, budget_s: float = 3600, timeout: float = 60.0, jobs: int = 1,
         save_dir: Path | None = None, log=None, minimize_s: float = 300.0,
         command=default_command) -> dict:
    programs = corpus()
    counts = dict.fromkeys(CLASSES, 0)
    exits = {"exit 0": 0, "exit 1": 0, "exit 2": 0}
    findings: list[dict] = []
    start = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="xlaplug-fuzz-")
    os.environ.setdefault("XLAPLUG_CACHE_DIR", os.path.join(tmp, "cache"))

    def one(k: int):
        if time.monotonic() - start > budget_s:
            return None
        name, how, text = mutant(programs, seed, k)
        path = os.path.join(tmp, f"mutant_{k}.hlo")
        Path(path).write_text(text, encoding="utf-8", errors="surrogateescape")
        t0 = time.monotonic()
        cls, detail = classify(path, timeout, command)
        os.unlink(path)
        return k, name, how, text, cls, detail, time.monotonic() - t0

    done = 0
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for result in pool.map(one, range(count)):
            if result is None:
                continue
            k, name, how, text, cls, detail, took = result
            counts[cls] += 1
            done += 1
            if cls == "clean":
                exits[detail.split(":")[0]] += 1
            else:
                findings.append({"mutant": k, "from": name, "mutation": how, "class": cls,
                                 "detail": detail})
            if log is not None:
                log(f"{k} {cls} {took:.1f}s {name} {how} {detail}")
    minimize_each = minimize_s / max(1, len(findings))
    for f in findings:
        if save_dir is not None:
            f.update(_save(f, mutant(programs, seed, f["mutant"])[2], save_dir, timeout,
                           minimize_each, command, tmp))
    return {"seed": seed, "mutants": done, "corpus": len(programs), "counts": counts,
            "clean_exits": exits, "seconds": round(time.monotonic() - start, 1),
            "findings": findings}


def _save(finding: dict, text: str, save_dir: Path, timeout: float, budget_s: float,
          command, tmp: str) -> dict:
    """Write the mutant and its minimized reproducer; the reproducer's path and size."""
    save_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{finding['class']}_{finding['mutant']}"
    (save_dir / f"{stem}.hlo").write_text(text, encoding="utf-8", errors="surrogateescape")
    want = _signature(finding["class"], finding["detail"])
    path = os.path.join(tmp, f"{stem}.min.hlo")

    def fails(candidate: str) -> bool:
        Path(path).write_text(candidate, encoding="utf-8", errors="surrogateescape")
        return _signature(*classify(path, timeout, command)) == want

    small = minimize(text, fails, budget_s)
    out = save_dir / f"{stem}.min.hlo"
    out.write_text(small, encoding="utf-8", errors="surrogateescape")
    return {"reproducer": str(out), "reproducer_chars": len(small)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--count", type=int, default=500)
    ap.add_argument("--budget-seconds", type=float, default=3600)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per mutant")
    ap.add_argument("--jobs", type=int, default=1, help="mutants run at once")
    ap.add_argument("--save-dir", type=Path, default=Path("fuzz-findings"),
                    help="crashing and hanging mutants, and their minimized reproducers")
    ap.add_argument("--minimize-seconds", type=float, default=600,
                    help="time for minimizing, shared by the findings")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per mutant")
    args = ap.parse_args(argv)
    log = (lambda s: print(s, file=sys.stderr, flush=True)) if args.verbose else None
    report = fuzz(args.seed, args.count, args.budget_seconds, args.timeout, args.jobs,
                  args.save_dir, log, args.minimize_seconds)
    print(json.dumps(report, indent=2))
    return 1 if any(report["counts"][c] for c in BAD) else 0


if __name__ == "__main__":
    sys.exit(main())
