"""Extract the HLO module strings of XLA's parser tests into a JSON fixture.

    python scripts/xla_parser_cases.py XLA_CHECKOUT [-o tests/data/xla_parser_cases.json]
    python scripts/xla_parser_cases.py --measure [tests/data/xla_parser_cases.json]

XLA_CHECKOUT is a work tree or a bare git directory of github.com/openxla/xla; the file read
is xla/hlo/parser/hlo_parser_test.cc.  Each case records where it came from and what XLA's
test expects of it:
  - "roundtrip": the parameterized CreateTestCases / CreateShortTestCases tables (XLA parses
    them and prints them back identically) and the inputs of CreateNonRoundtripTestCases;
  - "accept" / "reject": the raw strings of the TEST_F bodies, by whether the test expects the
    parse to fail (`EXPECT_FALSE(...ok())`, `EXPECT_NE(absl::OkStatus(), ...)`, a check of
    `status().message()`), in which case every module string of that test is "reject".
Strings that are format templates (`%s`, `$0`) or not HLO modules are left out.

`--measure` parses every case with xlaplug and counts how many parse and round-trip
(print(parse(print(parse(t)))) == print(parse(t))), and how many "reject" cases are rejected
by the parser or the verifier (XLA's tests parse some of them with verification).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

TEST_FILE = "xla/hlo/parser/hlo_parser_test.cc"
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "xla_parser_cases.json"

# A C++ raw string literal R"delim( ... )delim".
_RAW = re.compile(r'R"([^(\s]*)\((.*?)\)\1"', re.S)
_TABLE = re.compile(r"std::vector<(TestData|NonRoundtripTestData)> (\w+)\(\)")
_ENTRY = re.compile(r'\{\s*"(\w+)",\s*(?:\n\s*)*R"', re.S)
_TEST_F = re.compile(r"^TEST_F\(\s*\w+,\s*(\w+)\)", re.M)
_FAILS = re.compile(r"EXPECT_FALSE\([^;]*ok\(\)\)|EXPECT_NE\(absl::OkStatus\(\)|"
                    r"status\(\)\s*\.message\(\)|ASSERT_FALSE\([^;]*ok\(\)\)|"
                    r"StatusIs\([\s\w:]*(?:Invalid|INVALID|NotFound|NOT_FOUND)|"
                    r"\.status\(\)\.ToString\(\)")


def read_test_file(checkout: str) -> str:
    p = Path(checkout) / TEST_FILE
    if p.is_file():
        return p.read_text()
    return subprocess.run(["git", "-C", checkout, "show", f"HEAD:{TEST_FILE}"], check=True,
                          capture_output=True, text=True).stdout


def _is_module(s: str) -> bool:
    """A whole module: not a format template, not a fragment to be completed by StrCat."""
    return (("ENTRY" in s or "HloModule" in s) and "%s" not in s and "$0" not in s
            and s.count("{") == s.count("}"))


def _tables(src: str) -> tuple[list[dict], int]:
    """The parameterized tables; returns the cases and where the tables end."""
    cases, end = [], 0
    heads = list(_TABLE.finditer(src))
    for k, head in enumerate(heads):
        stop = src.find("\n});", head.end())
        body = src[head.end():stop]
        end = max(end, stop)
        for m in _ENTRY.finditer(body):
            raw = _RAW.match(body, m.end() - 2)
            if raw and _is_module(raw.group(2)):
                cases.append({"name": m.group(1), "source": head.group(2),
                              "expect": "roundtrip", "text": raw.group(2)})
    return cases, end


def _test_bodies(src: str, start: int) -> list[dict]:
    cases = []
    tests = list(_TEST_F.finditer(src, start))
    for k, t in enumerate(tests):
        body = src[t.end():tests[k + 1].start() if k + 1 < len(tests) else len(src)]
        expect = "reject" if _FAILS.search(body) else "accept"
        strings = [m.group(2) for m in _RAW.finditer(body) if _is_module(m.group(2))]
        for j, s in enumerate(strings):
            name = t.group(1) + (f"#{j}" if len(strings) > 1 else "")
            cases.append({"name": name, "source": "TEST_F", "expect": expect, "text": s})
    return cases


def extract(src: str) -> list[dict]:
    cases, end = _tables(src)
    return cases + _test_bodies(src, end)


def _roundtrip(text: str, verify: bool = False) -> str:
    """'' when the text parses (and with `verify`, verifies) and prints back stably, else the
    first error line."""
    from xlaplug.hlo import parse_module
    from xlaplug.hlo.errors import HloError
    from xlaplug.hlo.text.printer import module_to_text
    from xlaplug.hlo.verifier import verify_module
    try:
        module = parse_module(text, "case.hlo")
    except HloError as e:
        return "parse: " + str(e).splitlines()[0]
    except RecursionError:
        return "parse: RecursionError"
    if verify:
        try:
            verify_module(module)
        except HloError as e:
            return "verify: " + str(e).splitlines()[0]
    once = module_to_text(module)
    try:
        twice = module_to_text(parse_module(once, "printed.hlo"))
    except HloError as e:
        return "reparse: " + str(e).splitlines()[0]
    return "" if once == twice else "print differs"


def measure(cases: list[dict]) -> dict:
    out = {"roundtrip": [0, 0], "accept": [0, 0], "reject": [0, 0], "failures": {}}
    for c in cases:
        reject = c["expect"] == "reject"
        why = _roundtrip(c["text"], verify=reject)
        tally = out[c["expect"]]
        tally[1] += 1
        if reject:
            tally[0] += why.startswith(("parse:", "verify:"))
            if not why.startswith(("parse:", "verify:")):
                out["failures"][c["name"]] = "accepted, XLA rejects it"
        elif not why:
            tally[0] += 1
        else:
            out["failures"][c["name"]] = why
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("checkout", nargs="?")
    ap.add_argument("-o", "--out", default=str(DEFAULT_OUT))
    ap.add_argument("--measure", action="store_true")
    args = ap.parse_args()
    if args.measure:
        cases = json.loads(Path(args.checkout or DEFAULT_OUT).read_text())
        res = measure(cases)
        for name, why in sorted(res.pop("failures").items()):
            print(f"{name}: {why}")
        for k, (ok, n) in res.items():
            verb = "rejected" if k == "reject" else "parse and round-trip"
            print(f"{k}: {ok} of {n} {verb}")
        return
    if not args.checkout:
        ap.error("give an XLA checkout, or --measure")
    cases = extract(read_test_file(args.checkout))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(cases, indent=1) + "\n")
    print(f"{len(cases)} cases -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
