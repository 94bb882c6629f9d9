"""XLA's own parser tests (xla/hlo/parser/hlo_parser_test.cc) as a yardstick: the module
strings extracted by scripts/xla_parser_cases.py into tests/data/xla_parser_cases.json.

Every case XLA parses ("roundtrip": the parameterized tables; "accept": TEST_F bodies that
expect success) must parse here and print back stably (print(parse(print(parse(t)))) ==
print(parse(t))); every case XLA rejects must be rejected by the parser or the verifier --
except the ones listed below, each with its reason.  The counts are held exactly, so a fix
moves a case off the list and a regression fails."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from xla_parser_cases import _roundtrip  # noqa: E402

CASES = json.loads((ROOT / "tests" / "data" / "xla_parser_cases.json").read_text())

# Cases XLA parses that we do not, yet.
NOT_PARSED = {
    "OriginalValueRecoveryTableWithNestedQuotes":
        "origin_recovery_table holds a string spanning lines (a whole module); XLA's lexer "
        "lets strings span lines, ours ends them at the line end to locate unterminated ones",
}
# Cases XLA rejects that we accept, yet.
NOT_REJECTED = {
    **{name: "XLA checks that an async chain's ops wrap the same computation, opcode and "
             "thread; we do not"
       for name in ("AsyncDoneWithSyntaxSugarWrongOp", "AsyncDoneWrongComputation",
                    "AsyncDoneWrongDefaultThread", "AsyncOpSharedComputation",
                    "AsyncUpdateWithSyntaxSugarWrongOp", "AsyncUpdateWrongComputation",
                    "AsyncUpdateWrongDefaultThread")},
    "NontupleInfeed#1": "XLA requires infeed's result to be a (data, token) tuple at parse "
                        "time; our verifier takes its data shape as declared",
    "NontupleInfeed#2": "as NontupleInfeed#1",
}
COUNTS = {"roundtrip": (160, 161), "accept": (90, 90), "reject": (82, 91)}


def _outcome(case) -> str:
    reject = case["expect"] == "reject"
    why = _roundtrip(case["text"], verify=reject)
    if reject:
        return "ok" if why.startswith(("parse:", "verify:")) else "accepted"
    return "ok" if not why else why


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case(case):
    got = _outcome(case)
    name = case["name"]
    if name in NOT_PARSED:
        assert got != "ok", f"{name} now passes: take it off NOT_PARSED"
        assert got.startswith("parse:"), got
    elif name in NOT_REJECTED:
        assert got == "accepted", f"{name} is now rejected: take it off NOT_REJECTED"
    else:
        assert got == "ok", got


def test_counts():
    tally = {k: [0, 0] for k in COUNTS}
    for case in CASES:
        t = tally[case["expect"]]
        t[1] += 1
        t[0] += case["name"] not in NOT_PARSED and case["name"] not in NOT_REJECTED
    assert {k: tuple(v) for k, v in tally.items()} == COUNTS
    assert set(NOT_PARSED) | set(NOT_REJECTED) <= {c["name"] for c in CASES}
