"""The mutation fuzzer (scripts/fuzz.py): deterministic mutants, each run in a process of its
own and classified clean / crash / hang, crashes minimized to a small reproducer; and a
short run of it, where no mutant may crash or hang."""
import random
import sys
import time
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
sys.path.insert(0, str(SCRIPTS))

import fuzz  # noqa: E402
from fuzz_minimize import minimize  # noqa: E402
from fuzz_mutations import FAMILIES, mutate  # noqa: E402



def test_mutants_are_deterministic():
    programs = fuzz.corpus()
    assert len(programs) >= 3  # the examples at least
    assert [fuzz.mutant(programs, 7, k) for k in range(20)] == \
        [fuzz.mutant(programs, 7, k) for k in range(20)]
    assert fuzz.mutant(programs, 7, 0) != fuzz.mutant(programs, 8, 0) or \
        fuzz.mutant(programs, 7, 1) != fuzz.mutant(programs, 8, 1)


def test_every_family_changes_text():
    text = (Path(__file__).resolve().parents[1] / "examples" / "mlp.hlo").read_text()
    for family, fns in FAMILIES.items():
        for fn in fns:
            changed = any(fn(text, random.Random(s)) != text for s in range(10))
            assert changed, (family, fn.__name__)
    assert mutate(text, random.Random(0))[0] != text


def test_judge_classes():
    assert fuzz.judge("run", 0, "") == ("clean", "exit 0")
    assert fuzz.judge("run", 1, "MISMATCH out0: ...")[0] == "clean"
    assert fuzz.judge("compile", 2, "m.hlo:3:5: error: unknown opcode 'frob'\n x\n ^")[0] \
        == "clean"
    assert fuzz.judge("compile", 2, "warning: plugin x\nm.hlo: error: no entry")[0] == "clean"
    assert fuzz.judge("compile", 2, "error: out of memory")[0] == "clean"
    for verb, code, err in [("run", 1, "Aborted!"), ("run", 2, "Usage: oops"),
                            ("run", 2, "Traceback (most recent call last):\n  ...\nKeyError: 1"),
                            ("compile", 3, ""), ("compile", "exception", "boom")]:
        assert fuzz.judge(verb, code, err)[0] == "crash", (code, err)


def _fake_cli(script: str):
    """A stand-in for the CLI: `script` runs with the mutant's path in argv[1]."""
    # -S: no site-packages to scan -- a third of the start-up, paid per minimizing candidate
    return lambda path: [sys.executable, "-S", "-c", script, path]


def test_signals_timeouts_and_tracebacks_are_classified(tmp_path):
    f = tmp_path / "m.hlo"
    f.write_text("x")
    segv = _fake_cli("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    assert fuzz.classify(str(f), 30, segv) == ("crash", "compile: killed by signal 11")
    hang = _fake_cli("import time; time.sleep(30)")
    assert fuzz.classify(str(f), 0.5, hang)[0] == "hang"
    tb = _fake_cli("raise KeyError('x')")
    cls, detail = fuzz.classify(str(f), 30, tb)
    assert cls == "crash" and "KeyError" in detail, detail


def test_minimize_keeps_what_still_fails():
    text = "HloModule m\nENTRY e {\n  p = f32[] parameter(0)\n  ROOT r = f32[] BOOM(p)\n}\n"
    calls = []

    def fails(t):
        calls.append(t)
        return "BOOM" in t
    assert minimize(text, fails, 30) == "BOOM"
    assert minimize("fine", fails, 30) == "fine"  # not failing: kept whole
    start = time.monotonic()
    slow = minimize(text * 50, lambda t: time.sleep(0.01) or "BOOM" in t, 0.5)
    assert time.monotonic() - start < 5 and "BOOM" in slow  # the budget bounds it


@pytest.mark.slow  # a process per candidate while minimizing
def test_crashes_are_saved_with_minimized_reproducers(tmp_path):
    crash_on_root = _fake_cli("import sys; t = open(sys.argv[1], encoding='utf-8', "
                              "errors='replace').read(); sys.exit(3 if 'ROOT' in t else 0)")
    report = fuzz.fuzz(seed=0, count=3, jobs=2, timeout=30, save_dir=tmp_path,
                       minimize_s=60, command=crash_on_root)
    crashes = [f for f in report["findings"] if f["class"] == "crash"]
    assert crashes and report["counts"]["crash"] == len(crashes)
    for f in crashes:
        assert f["detail"].startswith("exit 3")
        assert Path(f["reproducer"]).read_text() == "ROOT"
        assert (tmp_path / f"crash_{f['mutant']}.hlo").is_file()  # the mutant as found


@pytest.mark.slow  # a dozen mutants, a process each (scripts/fuzz.py runs more)
def test_short_fuzz_run_finds_no_crash_or_hang(tmp_path):
    # 60 s a mutant: a real hang runs into it all the same, and a mutant whose fused loops
    # compile cold on loaded cores does not.
    report = fuzz.fuzz(seed=0, count=12, budget_s=600, timeout=60, jobs=2, save_dir=tmp_path)
    counts = report["counts"]
    assert report["mutants"] == 12, report
    assert counts["clean"] == 12, report["findings"]
    assert report["clean_exits"]["exit 2"] > 0
