"""The jax corpus on `--device cuda`, and the CUDA backend's no-host-copy contract.

Every program of tests/jax_corpus.py whose inputs are small (at most MAX_INPUT_ELEMENTS
elements in all) is parsed, compiled and executed for a cuda session with the bundled
plugins (`compile_module(module, session)`, `runner.execute(module, args, session)`) and
compared with jax's outputs by
test_conformance_jax's own checks (same tolerances, same EXACT_FLOAT programs).  By default
the lowered form runs (the simulator is slow); XLAPLUG_CUDA_CORPUS_VARIANTS=lowered,compiled
adds the XLA-compiled form (scripts/gpu_check.sh does, on a GPU).

A program that cannot pass on cuda is in exactly one table, each asserted:

* `NOT_YET_ON_CUDA`: a CUDA kernel (or plugin) missing or wrong; strict: the test fails
  when a listed program starts passing, so the list stays honest.
* test_conformance_jax.ELIDED_CONSTANTS: the text has no constant values (fails on any device).

Keys are `program` (both forms) or `program/lowered` / `program/compiled`.
"""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

import jax_corpus as corpus
from test_conformance_jax import ELIDED_CONSTANTS, _check_outputs, plugins  # noqa: F401
from xlaplug.runtime.driver import compile_module
from xlaplug.hlo import parse_module
from xlaplug.plugin import Session
from xlaplug.runtime.runner import execute
from oracle import count_host_copies

MAX_INPUT_ELEMENTS = 256
VARIANTS = tuple(v.strip() for v in os.environ.get("XLAPLUG_CUDA_CORPUS_VARIANTS",
                                                   "lowered").split(",") if v.strip())

NOT_YET_ON_CUDA: dict[str, str] = {
    "eigh": "the jax_lapack CUDA syevd (cyclic Jacobi) gives LAPACK's eigenvalues, but "
            "eigenvectors that may differ from LAPACK's by a sign per column",
    "svd": "gesdd has no CUDA kernel and lowers to its one-sided Jacobi decomposition "
           "(issue 26): singular vectors that may differ from LAPACK's by a sign per column",
}


def _small(entry) -> bool:
    return sum(np.asarray(a).size for a in entry.inputs) <= MAX_INPUT_ELEMENTS


ENTRIES = {}


def _entries():
    if not ENTRIES:
        ENTRIES.update({e.name: e for e in corpus.load_corpus()})
    return ENTRIES


def _lookup(table: dict, name: str, variant: str):
    return table.get(f"{name}/{variant}", table.get(name))


# The simulator is slow: programs whose inputs exceed MAX_INPUT_ELEMENTS are not collected
# (not skipped); on a real GPU (scripts/gpu_check.sh) XLAPLUG_CUDA_CORPUS_ALL=1 takes them all.
_ALL = os.environ.get("XLAPLUG_CUDA_CORPUS_ALL") == "1"
CASES = [(n, v) for n in corpus.names() if _ALL or _small(corpus.load_entry(n))
         for v in VARIANTS]


def _run(entry, variant: str, counts: dict, registry):
    """(error, problems) of one form of one program on cuda, with the plugins of
    `registry` (as `xlaplug run --device cuda`: compiled and run for cuda)."""
    session = Session(registry, device="cuda")
    try:
        module = parse_module(getattr(entry, f"{variant}_hlo"), f"{entry.name}.{variant}.hlo")
        compile_module(module, session)
        for k in counts:
            counts[k] = 0
        result = execute(module, list(entry.inputs), session)
    except Exception as e:  # noqa: BLE001 - judged by the test
        return e, []
    problems = _check_outputs(entry.name, result.outputs, entry.outputs)
    # Inputs in once, outputs out once: the only other reads are control-flow scalars.
    allowed = counts["scalar"] + len(result.outputs)
    copies = max(counts["copy_to_host"], counts["device_to_host"])
    if copies > allowed:
        problems.append(f"{copies} device->host copies in one run; only {allowed} expected "
                        f"({len(result.outputs)} outputs, {counts['scalar']} control-flow "
                        "scalars): a kernel reads device data back to the host")
    return None, problems


@pytest.mark.parametrize("name,variant", CASES, ids=[f"{n}-{v}" for n, v in CASES])
def test_corpus_on_cuda(plugins, name, variant, monkeypatch):  # noqa: F811 - the fixture
    entry = _entries()[name]
    tables = [(k, _lookup(t, name, variant)) for k, t in
              (("not-yet", NOT_YET_ON_CUDA), ("elided", ELIDED_CONSTANTS))]
    listed = [(k, r) for k, r in tables if r is not None]
    assert len(listed) <= 1, f"{name}/{variant} is in more than one table: {listed}"
    error, problems = _run(entry, variant, count_host_copies(monkeypatch), plugins)
    passed = error is None and not problems
    outcome = "passed" if passed else (f"{type(error).__name__}: {error}" if error is not None
                                       else "\n".join(problems))
    if not listed:
        assert passed, f"{name} ({variant}) on cuda differs from jax:\n{outcome}"
        return
    kind, reason = listed[0]
    if kind == "elided":
        assert error is not None and "elided literal" in str(error), outcome[:800]
    else:
        if passed:
            pytest.fail(f"[XPASS(strict)] {name} ({variant}) now passes on cuda; remove it "
                        f"from NOT_YET_ON_CUDA ({reason})")
        target = re.match(r"custom-call '([^']+)'", reason)
        if target:  # fails for the reason given, not another
            assert f"no plugin provides target '{target[1]}' on cuda" in outcome, outcome[:800]
        if "eigenvectors" in reason:  # eigh returns (w, v): only v may differ
            assert error is None and all(p.startswith("out1") for p in problems), outcome[:800]
        pytest.xfail(f"{reason} -- {outcome[:300]}")


def test_tables_name_corpus_programs():
    known = set(corpus.names())
    for table in (NOT_YET_ON_CUDA,):
        for key in table:
            name, _, variant = key.partition("/")
            assert name in known, f"{key}: no such corpus program"
            assert variant in ("", "lowered", "compiled"), f"{key}: bad variant"


# ---- nothing comes back to the host inside a run ---------------------------------------------

WHILE_LOOP = """HloModule loop

cond {
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[4] get-tuple-element(s), index=1
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  c = f32[] constant(1.5)
  cb = f32[4] broadcast(c), dimensions={}
  m = f32[4] multiply(x, cb)
  e = f32[4] exponential(m)
  y = f32[4] subtract(e, x)
  ROOT t = (s32[], f32[4]) tuple(i1, y)
}

ENTRY main {
  x = f32[4] parameter(0)
  p = pred[] parameter(1)
  zero = s32[] constant(0)
  init = (s32[], f32[4]) tuple(zero, x)
  w = (s32[], f32[4]) while(init), condition=cond, body=body
  r = f32[4] get-tuple-element(w), index=1
  neg = f32[4] negate(r)
  ROOT out = (f32[4], f32[4]) tuple(r, neg)
}
"""


def test_no_host_copies_inside_a_run(monkeypatch):
    """A while loop of 5 iterations reads its predicate back 6 times; the two outputs come
    back once each; nothing else leaves the device."""
    module = parse_module(WHILE_LOOP)
    compile_module(module, None)
    x = np.array([0.5, -1.0, 0.25, 2.0], np.float32)
    want = execute(module, [x, np.array(True)]).outputs
    counts = count_host_copies(monkeypatch)
    got = execute(module, [x, np.array(True)], device="cuda").outputs
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    assert counts["scalar"] == 6, counts
    assert counts["copy_to_host"] == 6 + 2, counts
    # device_to_host is what copy_to_host itself uses on a GPU: one per copy, no others
    assert counts["device_to_host"] in (0, 8), counts


CONDITIONAL = """HloModule cond

t {
  x = f32[3] parameter(0)
  ROOT e = f32[3] exponential(x)
}

f {
  x = f32[3] parameter(0)
  ROOT n = f32[3] negate(x)
}

ENTRY main {
  x = f32[3] parameter(0)
  y = f32[3] parameter(1)
  p0 = pred[] constant(true)
  a = f32[3] add(x, y)
  ROOT c = f32[3] conditional(p0, a, a), true_computation=t, false_computation=f
}
"""


def test_conditional_reads_only_its_selector(monkeypatch):
    module = parse_module(CONDITIONAL)
    compile_module(module, None)
    x, y = np.array([0.5, 1.0, -2.0], np.float32), np.array([1.0, 1.0, 1.0], np.float32)
    counts = count_host_copies(monkeypatch)
    got = execute(module, [x, y], device="cuda").outputs[0]
    np.testing.assert_allclose(got, np.exp(x + y), rtol=1e-6)
    assert counts["scalar"] == 1 and counts["copy_to_host"] == 2, counts
