"""How many programs agree under `--reference xla`: the jax corpus (tests/jax_corpus.py,
its lowered HLO with its recorded inputs) and the StableHLO suite (../shared/conformance).

    python scripts/reference_agreement.py [--corpus] [--suite] [--every N] [--json OUT]

Each program runs on xlaplug (bundled plugins, kernels preferred) and, as `run --reference
xla` does it (xlaplug/xla/reference.py), on XLA:CPU through jaxlib; a program agrees when
every output is within runner.compare's tolerances.  Suite cases: the `check.*` custom calls
(side effects after ROOT that nothing uses; XLA has no handler for them) are dropped, and
the entry's ROOT is compared; the 200 shape-polymorphic `dynamic__*` cases take parameters
and have no inputs, and are counted apart.  `--every N` takes every N-th suite case.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
SUITE = ROOT.parent / "shared" / "conformance" / "stablehlo"
CHECK_LINE = re.compile(r'^.*custom_call_target="check\.[^"]*".*\n', re.M)


def agree(text: str, inputs, registry) -> tuple[str, str]:
    """(status, detail): agree / disagree / xla-refused / xlaplug-error."""
    from xlaplug.runtime.driver import compile_module
    from xlaplug.hlo.errors import HloError
    from xlaplug.hlo.text.parser import parse_module
    from xlaplug.hlo.verifier import verify_module
    from xlaplug.plugin import Session
    from xlaplug.runtime.runner import execute
    from xlaplug.xla.jaxlib_names import XlaError
    from xlaplug.runtime.on_xla import diff_devices
    from xlaplug.xla.reference import check_arguments, portable_text, run_reference
    try:
        module = parse_module(text)
        verify_module(module)
        session = Session(registry)
        compile_module(module, session)
        ours = execute(module, list(inputs), session).outputs
    except HloError as e:
        return "xlaplug-error", e.headline()
    try:
        fresh = parse_module(text)
        check_arguments(fresh)
        (theirs,) = run_reference(portable_text(fresh, registry), [list(inputs)])
    except XlaError as e:
        return "xla-refused", e.message[:300]
    except HloError as e:
        return "xla-refused", e.headline()[:300]
    bad = [d for d in diff_devices([ours], [theirs]) if not d.ok]
    if bad:
        return "disagree", "; ".join(f"{d.name}: {d.message} (max ULP {d.max_ulp})"
                                     for d in bad)[:300]
    return "agree", ""


def corpus(registry) -> list[tuple[str, str, str]]:
    import jax

    import jax_corpus
    rows = []
    for name in jax_corpus.names():
        entry = jax_corpus.load_entry(name)
        with jax.enable_x64(entry.x64):
            status, detail = agree(entry.lowered_hlo, entry.inputs, registry)
        rows.append((name, status, detail))
    return rows


def suite(registry, every: int, folder: Path) -> list[tuple[str, str, str]]:
    if not folder.is_dir():
        raise SystemExit(f"error: no StableHLO suite at {folder} (--suite-dir)")
    rows = []
    for k, path in enumerate(sorted(folder.glob("*.hlo"))):
        if k % every:
            continue
        if path.name.startswith("dynamic__"):
            rows.append((path.stem, "no-inputs", "shape-polymorphic: takes parameters"))
            continue
        text = CHECK_LINE.sub("", path.read_text())
        rows.append((path.stem, *agree(text, [], registry)))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", action="store_true")
    ap.add_argument("--suite", action="store_true")
    ap.add_argument("--every", type=int, default=1, help="every N-th suite case")
    ap.add_argument("--suite-dir", default=str(SUITE), help=f"default: {SUITE}")
    ap.add_argument("--json", default=None, help="write every program's status here")
    args = ap.parse_args(argv)
    if not (args.corpus or args.suite):
        args.corpus = args.suite = True
    from xlaplug.plugin import load_plugins
    registry = load_plugins(entry_points=False)
    report = {}
    for what, run in (("corpus", lambda: corpus(registry)),
                      ("suite", lambda: suite(registry, args.every, Path(args.suite_dir)))):
        if not getattr(args, what):
            continue
        t0 = time.perf_counter()
        rows = run()
        counts = Counter(status for _, status, _ in rows)
        print(f"{what}: {len(rows)} programs in {time.perf_counter() - t0:.0f} s: "
              + ", ".join(f"{n} {s}" for s, n in counts.most_common()))
        for name, status, detail in rows:
            if status not in ("agree", "no-inputs"):
                print(f"  {status:14} {name}: {detail}")
        report[what] = [{"name": n, "status": s, "detail": d} for n, s, d in rows]
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
