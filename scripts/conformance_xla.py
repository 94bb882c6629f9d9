"""Run StableHLO conformance cases through today's XLA:CPU (jaxlib) and through xlaplug, and
compare the two bit for bit as well as each against the suite's expected values.

  python scripts/conformance_xla.py [--dir DIR] [--max-ulp N] [--json OUT] [--fold]
                                    [--fuse-all] [--names FILE] [--device D] [PATTERN]

Each case is rewritten so that XLA can compile it and nothing is folded at compile time:
  * the `inputs.N` constants become entry parameters (XLA's constant folding would otherwise
    evaluate the whole case with its HloEvaluator, not with XLA:CPU's kernels; `--fold` keeps
    them as constants, to see what the evaluator gives);
  * the `check.*` custom calls (no XLA kernel) are dropped, and the entry returns a tuple of
    every check's (actual, expected) operands instead.
Both sides run the same rewritten text; the check rules are xlaplug.runtime.conformance's.
Prints, per case where anything differs, XLA's and our verdicts and the largest ULP distance
between our output and XLA's; then the totals.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import re
import sys
from pathlib import Path

import numpy as np

# The suite lies next to the repository (../shared); from a worktree, further up.
DEFAULT_DIR = next((d / "shared" / "conformance" / "stablehlo"
                    for d in Path(__file__).resolve().parents
                    if (d / "shared" / "conformance" / "stablehlo").is_dir()),
                   Path(__file__).resolve().parents[1].parent / "shared")
CHECK_RE = re.compile(r"^\s*[\w.\-]+ = \(\) custom-call\(([\w.\-]+), ([\w.\-]+)\), "
                      r'custom_call_target="(check\.\w+)".*$')
INPUTS_RE = re.compile(r"^(\s*)(?:ROOT )?([\w.\-]+) = (.+?) call\(\), to_apply=(inputs\.\d+)\s*$")


def _blocks(text: str) -> dict[str, tuple[int, int]]:
    """Computation name -> (first line, closing-brace line) of the module text."""
    lines, out, start, name = text.splitlines(), {}, None, None
    for i, line in enumerate(lines):
        m = re.match(r"^(ENTRY )?([\w.\-]+) .*\{\s*$", line)
        if m and start is None:
            start, name = i, m.group(2)
        elif line.startswith("}") and start is not None:
            out[name] = (start, i)
            start = None
    return out


def _shape_of(lines: list[str], name: str) -> str:
    for line in lines:
        m = re.match(rf"^\s*(?:ROOT )?{re.escape(name)} = (.+?) [a-z][\w\-]*\(", line)
        if m:
            return m.group(1)
    raise ValueError(f"no definition of {name}")


def _drop_entry_layout(text: str) -> str:
    """The header without `entry_computation_layout={...}` (the entry's result changes);
    the braces may nest."""
    key = ", entry_computation_layout={"
    start = text.find(key)
    if start < 0:
        return text
    depth, i = 1, start + len(key)
    while depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[:start] + text[i:]


def rewrite(text: str, fold: bool):
    """(rewritten text, [(check target, index of actual, index of expected)], inputs
    computation name or None, its line range) -- see the module docstring."""
    text = _drop_entry_layout(text)
    lines = text.splitlines()
    blocks = _blocks(text)
    entry = next(n for n in blocks if lines[blocks[n][0]].startswith("ENTRY"))
    first, last = blocks[entry]
    body, checks, operands, inputs = [], [], [], None
    for line in lines[first + 1:last]:
        m = CHECK_RE.match(line)
        if m:
            a, e, target = m.groups()
            checks.append((target, len(operands), len(operands) + 1))
            operands += [a, e]
            continue
        m = INPUTS_RE.match(line)
        if m and not fold:
            inputs = (m.group(2), m.group(3), m.group(4))
            body.append(None)  # the parameters go here, once their shapes are known
            continue
        body.append(line.replace("ROOT ", "", 1) if line.lstrip().startswith("ROOT ") else line)
    if not fold and any("to_apply=inputs." in line for line in body if line):
        raise ValueError("an inputs call this script does not recognise")
    shapes = [_shape_of(lines[first:last], n) for n in operands]
    root = (f"  ROOT xla.checked = ({', '.join(shapes)}) tuple({', '.join(operands)})")
    return lines, first, last, body, root, checks, inputs


def input_values(text: str, comp: str, lines, blocks) -> list[np.ndarray]:
    """The leaves of computation `comp` (constants only), evaluated by xlaplug."""
    from xlaplug.runtime.executor import run_module
    from xlaplug.hlo.text.parser import parse_module
    first, last = blocks[comp]
    sub = "HloModule inputs\n\nENTRY " + "\n".join(lines[first:last + 1]) + "\n"
    out = run_module(parse_module(sub), [])
    return [np.asarray(v) for v in (out if isinstance(out, tuple) else (out,))]


def build(path: Path, fold: bool):
    """(text both sides run, input arrays, checks)."""
    text = path.read_text()
    lines, first, last, body, root, checks, inputs = rewrite(text, fold)
    args = []
    if inputs is not None:
        name, shape, comp = inputs
        args = input_values(text, comp, lines, _blocks("\n".join(lines)))
        i = body.index(None)
        if shape.startswith("("):
            leaf_shapes = _leaf_shapes(shape)
            params = [f"  xla.in{k} = {s} parameter({k})" for k, s in enumerate(leaf_shapes)]
            names = ", ".join(f"xla.in{k}" for k in range(len(leaf_shapes)))
            params.append(f"  {name} = {shape} tuple({names})")
        else:
            params = [f"  {name} = {shape} parameter(0)"]
        body[i:i + 1] = params
    new = lines[:first + 1] + body + [root] + lines[last:]
    return "\n".join(new) + "\n", args, checks


def _leaf_shapes(shape: str) -> list[str]:
    """The top-level element shapes of a tuple shape string `(a, b, ...)` (no nesting)."""
    inner, depth, cur, out = shape[1:-1], 0, "", []
    for ch in inner:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    if any(s.startswith("(") for s in out):
        raise ValueError(f"nested tuple inputs: {shape}")
    return out


# ---- the two executors -------------------------------------------------------------------

def xla_run(text: str, args: list[np.ndarray]) -> list[np.ndarray]:
    """Compile HLO text with XLA:CPU (jaxlib: text -> HloModule -> StableHLO -> compile) and
    run it on `args`; the outputs as numpy arrays (the tuple's leaves)."""
    import jax
    jax.config.update("jax_enable_x64", True)  # f64/c128/s64 arguments keep their width
    from jax._src import compiler, xla_bridge
    from jax._src.interpreters import mlir
    from jax._src.lib import _jax
    from jax._src.lib import xla_client as xc
    from jax._src.lib.mlir import ir
    from jaxlib import _hlo
    proto = _hlo.hlo_module_from_text(text).as_serialized_hlo_module_proto()
    backend = xla_bridge.get_backend("cpu")
    dev = backend.local_devices()[0]
    with mlir.make_ir_context():
        module = ir.Module.parse(_jax.mlir.hlo_to_stablehlo(proto))
        exe = compiler.backend_compile_and_load(backend, module, xc.DeviceList((dev,)),
                                                xc.CompileOptions(), [])
    res = exe.execute_sharded([jax.device_put(a, dev) for a in args])
    return [np.asarray(o[0]) for o in res.disassemble_into_single_device_arrays()]


def ours_run(text: str, args: list[np.ndarray], device: str, fuse_all: bool = False
             ) -> list[np.ndarray]:
    from xlaplug.runtime.conformance import suite_session
    from xlaplug.runtime.driver import compile_module
    from xlaplug.hlo.text.parser import parse_module
    from xlaplug.runtime.runner import execute
    module = parse_module(text)
    session = suite_session(device)
    if fuse_all:  # fuse as XLA:CPU does at any size (FMA contraction included)
        compile_module(module, session, options={"loop-fusion": {"min_elements": 1}})
        return execute(module, list(args), session, max_while_iterations=10_000_000,
                       fusion_min_elements=1).outputs
    compile_module(module, session)
    return execute(module, list(args), session, max_while_iterations=10_000_000).outputs


def verdict(outs: list[np.ndarray], checks, max_ulp: int) -> str | None:
    """None when every check holds, else the first failing check's message."""
    from xlaplug.runtime.conformance import CheckFailure, run_check
    for target, a, e in checks:
        try:
            run_check(target, outs[a], outs[e], max_ulp=max_ulp)
        except CheckFailure as err:
            return err.message
    return None


def ulps_between(ours: np.ndarray, xla: np.ndarray) -> int | None:
    """Largest ULP distance between our output and XLA's (0: same bits up to NaN payloads;
    None: not floating)."""
    from xlaplug.runtime.conformance import _components, ulp_distance
    if ours.dtype.kind not in "fc" and "float" not in ours.dtype.name:
        return 0 if np.array_equal(ours, xla) else None
    worst = 0
    for a, b in zip(_components(ours), _components(xla)):
        both_nan = np.isnan(a.astype(np.float64)) & np.isnan(b.astype(np.float64))
        d = np.where(both_nan, 0, ulp_distance(a, b))
        worst = max(worst, int(d.max(initial=0)))
    return worst


def compare(path: Path, fold: bool, max_ulp: int, device: str, fuse_all: bool = False) -> dict:
    r = {"name": path.stem}
    try:
        text, args, checks = build(path, fold)
    except Exception as e:  # noqa: BLE001 - reported per case
        return r | {"status": "skipped", "detail": f"rewrite: {e}"}
    try:
        xla = xla_run(text, args)
    except Exception as e:  # noqa: BLE001
        return r | {"status": "xla-error", "detail": str(e).splitlines()[0][:200]}
    try:
        ours = ours_run(text, args, device, fuse_all)
    except Exception as e:  # noqa: BLE001
        return r | {"status": "our-error", "detail": str(e).splitlines()[0][:200]}
    xv, ov = verdict(xla, checks, max_ulp), verdict(ours, checks, max_ulp)
    dist = [ulps_between(ours[a], xla[a]) for _, a, _ in checks]
    return r | {"status": "ok", "xla_pass": xv is None, "ours_pass": ov is None,
                "xla_detail": xv or "", "ours_detail": ov or "",
                "ulps_vs_xla": None if None in dist else max(dist, default=0)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("pattern", nargs="?", default="*")
    ap.add_argument("--dir", default=str(DEFAULT_DIR))
    ap.add_argument("--max-ulp", type=int, default=1)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--fold", action="store_true", help="keep inputs as constants (XLA folds)")
    ap.add_argument("--fuse-all", action="store_true",
                    help="xlaplug fuses elementwise chains of any size (default: >= 65,536)")
    ap.add_argument("--names", default=None, help="file with one case name per line")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    files = sorted(p for p in Path(args.dir).glob("*.hlo")
                   if fnmatch.fnmatch(p.stem, args.pattern) and not p.stem.startswith("dynamic__"))
    if args.names:
        wanted = set(Path(args.names).read_text().split())
        files = [p for p in files if p.stem in wanted]
    results = []
    for p in files:
        r = compare(p, args.fold, args.max_ulp, args.device, args.fuse_all)
        results.append(r)
        if r["status"] != "ok" or not (r["xla_pass"] and r["ours_pass"]) or r["ulps_vs_xla"]:
            if r["status"] != "ok":
                print(f"{r['name']}: {r['status']}: {r['detail']}", flush=True)
            else:
                print(f"{r['name']}: xla {'pass' if r['xla_pass'] else 'FAIL'}, ours "
                      f"{'pass' if r['ours_pass'] else 'FAIL'}, ours vs xla "
                      f"{r['ulps_vs_xla']} ULP | xla: {r['xla_detail'][:90]} | ours: "
                      f"{r['ours_detail'][:90]}", flush=True)
    ok = [r for r in results if r["status"] == "ok"]
    print(f"{len(results)} cases: {len(ok)} ran on both; XLA passes "
          f"{sum(r['xla_pass'] for r in ok)}, xlaplug passes {sum(r['ours_pass'] for r in ok)} "
          f"(max ULP {args.max_ulp}); same bits as XLA in "
          f"{sum(r['ulps_vs_xla'] == 0 for r in ok)}; XLA passes and we fail: "
          f"{sum(r['xla_pass'] and not r['ours_pass'] for r in ok)}; we pass and XLA fails: "
          f"{sum(r['ours_pass'] and not r['xla_pass'] for r in ok)}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
