"""Run the StableHLO conformance suite (../shared/conformance/stablehlo) and print pass rates.

  python scripts/conformance.py [--dir DIR] [--max-ulp N] [--device cpu|cuda] [--json OUT]
                                [--show N] [PATTERN]

A case passes when every `check.expect_*` in it holds.  Cases whose constants were elided
(`constant({...})`) carry no values and cannot run: they are counted separately.
"""
from __future__ import annotations

import argparse
import collections
import fnmatch
import json
import sys
from pathlib import Path

from xlaplug.cli.progress import progress_bar
from xlaplug.runtime.conformance import run_cases

# The suite lies next to the repository (../shared); from a git worktree, further up.
DEFAULT_DIR = next((d / "shared" / "conformance" / "stablehlo" for d in Path(__file__).resolve().parents
              if (d / "shared" / "conformance" / "stablehlo").is_dir()),
             Path(__file__).resolve().parents[1].parent / "shared" / "conformance" / "stablehlo")


def classify(r) -> str:
    if r.status != "error":
        return r.status
    if "elided literal" in r.detail:
        return "elided"
    return "error"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("pattern", nargs="?", default="*")
    ap.add_argument("--dir", default=str(DEFAULT_DIR))
    ap.add_argument("--max-ulp", type=int, default=1)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="cuda needs a GPU or NUMBA_ENABLE_CUDASIM=1 (numba's simulator)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--show", type=int, default=15)
    args = ap.parse_args()
    files = sorted(p for p in Path(args.dir).glob("*.hlo") if fnmatch.fnmatch(p.stem, args.pattern))
    if not files:
        print(f"no cases in {args.dir}", file=sys.stderr)
        return 2
    if args.device == "cuda":
        from xlaplug.backends.cuda_support import require_cuda
        from xlaplug.hlo.errors import HloError
        try:
            require_cuda()
        except HloError as e:
            print(e.message, file=sys.stderr)
            return 2
    with progress_bar(f"{len(files)} cases") as progress:  # drawn on a terminal only
        results = run_cases(files, args.max_ulp, args.device, progress)
    counts = collections.Counter(classify(r) for r in results)
    runnable = len(results) - counts["elided"] - counts["noinputs"]
    print(f"{len(results)} cases on {args.device}, max ULP {args.max_ulp}: {counts['pass']} pass, {counts['fail']} "
          f"fail, {counts['error']} error; not runnable: {counts['elided']} with elided constants "
          f"({{...}}), {counts['noinputs']} taking parameters with no inputs or checks")
    if runnable:
        print(f"pass rate: {counts['pass'] / runnable:.1%} of runnable cases, "
              f"{counts['pass'] / len(results):.1%} of all")
    reasons = collections.Counter(r.detail.split(":")[0][:70] for r in results
                                  if classify(r) in ("fail", "error"))
    for reason, n in reasons.most_common(args.show):
        print(f"  {n:5d}  {reason}")
    if args.json:
        Path(args.json).write_text(json.dumps([r.__dict__ for r in results], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
