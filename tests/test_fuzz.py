"""The mutation fuzzer (scripts/fuzz.py) on a short budget: no mutant may crash (a
traceback), hang, exhaust memory or end in a message that is not an error headline."""
import random
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
sys.path.insert(0, str(SCRIPTS))

import fuzz  # noqa: E402
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


@pytest.mark.slow  # mutants run in worker processes: out of the fast loop
def test_short_fuzz_run_finds_no_crash_or_hang():
    # 60 s a mutant: a real hang runs into it all the same, and a mutant whose fused loops
    # compile cold on loaded cores does not (one took over 20 s at load 10, 2 s alone).
    report = fuzz.fuzz(seed=0, count=60, budget_s=240, timeout=60)
    counts = report["counts"]
    assert report["mutants"] >= 30, report
    assert counts["clean"] > 0
    for bad in fuzz.BAD:
        assert counts[bad] == 0, report["findings"]
