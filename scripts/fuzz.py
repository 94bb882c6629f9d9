"""A deterministic mutation fuzzer: mutants of corpus programs through compile, then run.

    python scripts/fuzz.py --seed 0 --count 2000 --budget-seconds 3600 [--save-dir DIR]

The corpus is examples/*.hlo, a fixed sample of the StableHLO conformance modules (when the
suite sits next to the repository, as tests/oracle.py finds it) and the jax-lowered programs
of tests/.corpus_cache (when the jax corpus has been built).  Mutant k is a pure function of
(seed, k) (scripts/fuzz_mutations.py).  Each goes through `xlaplug compile FILE` and then
`xlaplug run FILE --max-memory 1G --max-while-iterations 10000`, in a worker process (the
CLI in-process, so a mutant costs no interpreter start) under an alarm and an address-space
limit; a worker that dies or stops answering is replaced.  Each mutant is classified:

  clean      exit 2 with a one-line `...error: ...` headline (parse, verify, option errors)
  ran        run exit 0                     check      run exit 1 (a check failed)
  crash      a Python traceback, or a worker that died
  hang       past --timeout seconds         exhausted  out of memory under the limit
  message    exit 2 but the first line is not an error headline

Prints one JSON object of counts; exit 1 if any mutant crashed, hung, exhausted memory or
gave a malformed message.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from fuzz_mutations import mutate  # noqa: E402

BAD = ("crash", "hang", "exhausted", "message")
GUARDS = ["--max-memory", "1G", "--max-while-iterations", "10000"]
MEMORY_LIMIT = 6 << 30  # the worker's address space: past it, MemoryError


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


# ---- the worker ------------------------------------------------------------------------

class _Alarm(BaseException):
    """Raised by the per-mutant alarm; a BaseException so no error handler swallows it."""


def _cli(args: list[str]) -> tuple[int, str]:
    import contextlib
    import io

    from xlaplug.cli.main import main
    buf = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(buf):
        try:
            main(args, standalone_mode=False)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    return code, buf.getvalue()


def classify(path: str) -> tuple[str, str]:
    """(class, first line of the message) of one mutant file, in this process."""
    import traceback
    try:
        code, err = _cli(["compile", path])
        if code == 0:
            code, err = _cli(["run", path, *GUARDS])
    except _Alarm:
        return "hang", ""
    except MemoryError:
        return "exhausted", ""
    except Exception:
        return "crash", traceback.format_exc().strip().splitlines()[-1][:300]
    first = err.strip().splitlines()[0] if err.strip() else ""
    if code == 2:
        if "out of memory" in first:
            return "exhausted", first
        ok = ": error: " in first or first.startswith("error: ")
        return ("clean" if ok else "message"), first[:300]
    return {0: "ran", 1: "check"}.get(code, "crash"), first[:300]


def _worker(conn, timeout: float) -> None:
    import resource
    import signal
    import warnings
    warnings.simplefilter("ignore")
    try:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    except (ValueError, OSError):
        pass

    def on_alarm(signum, frame):
        raise _Alarm()
    signal.signal(signal.SIGALRM, on_alarm)
    while True:
        path = conn.recv()
        if path is None:
            return
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            result = classify(path)
        except _Alarm:
            result = ("hang", "")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        conn.send(result)


class Worker:
    def __init__(self, timeout: float):
        self.timeout = timeout
        self.ctx = mp.get_context("spawn")
        self.start()

    def start(self) -> None:
        self.conn, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_worker, args=(child, self.timeout), daemon=True)
        self.proc.start()
        self.done = 0

    def stop(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()

    def check(self, path: str) -> tuple[str, str]:
        if self.done >= 200:  # a fresh interpreter now and then: caches only grow
            self.stop()
            self.start()
        self.conn.send(path)
        # The alarm fires in the worker first; the slack covers a worker stuck in C code.
        if not self.conn.poll(self.timeout + 30):
            self.stop()
            self.start()
            return "hang", "worker did not answer"
        try:
            result = self.conn.recv()
        except EOFError:
            code = self.proc.exitcode
            self.stop()
            self.start()
            return "crash", f"worker died (exit code {code})"
        self.done += 1
        return tuple(result)


def fuzz(seed: int, count: int, budget_s: float, timeout: float = 20.0,
         save_dir: Path | None = None, log=None) -> dict:
    programs = corpus()
    counts = dict.fromkeys(("clean", "ran", "check") + BAD, 0)
    findings: list[dict] = []
    start = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="xlaplug-fuzz-")
    os.environ.setdefault("XLAPLUG_CACHE_DIR", os.path.join(tmp, "cache"))
    worker = Worker(timeout)
    done = 0
    try:
        for k in range(count):
            if time.monotonic() - start > budget_s:
                break
            name, how, text = mutant(programs, seed, k)
            path = os.path.join(tmp, f"mutant_{k}.hlo")
            Path(path).write_text(text, encoding="utf-8", errors="surrogateescape")
            cls, detail = worker.check(path)
            counts[cls] += 1
            done += 1
            if cls in BAD:
                findings.append({"mutant": k, "from": name, "mutation": how, "class": cls,
                                 "detail": detail})
                if save_dir is not None:
                    save_dir.mkdir(parents=True, exist_ok=True)
                    (save_dir / f"{cls}_{k}.hlo").write_text(text, encoding="utf-8",
                                                             errors="surrogateescape")
            if log is not None:
                log(f"{k} {cls} {name} {how} {detail}")
            os.unlink(path)
    finally:
        worker.conn.send(None) if worker.proc.is_alive() else None
        worker.stop()
    return {"seed": seed, "mutants": done, "corpus": len(programs), "counts": counts,
            "seconds": round(time.monotonic() - start, 1), "findings": findings}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--budget-seconds", type=float, default=3600)
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per mutant")
    ap.add_argument("--save-dir", type=Path, default=None,
                    help="write crashing and hanging mutants here")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per mutant")
    args = ap.parse_args(argv)
    log = (lambda s: print(s, file=sys.stderr, flush=True)) if args.verbose else None
    report = fuzz(args.seed, args.count, args.budget_seconds, args.timeout, args.save_dir, log)
    print(json.dumps(report, indent=2))
    return 1 if any(report["counts"][c] for c in BAD) else 0


if __name__ == "__main__":
    sys.exit(main())
