"""Execution conformance against jax (issue 3).

Every program of tests/jax_corpus.py, in both forms jax gives us (the lowered HLO and the
XLA-compiled HLO), is parsed, run through the default pass pipeline (`compile_module`),
executed on the corpus inputs, and every output leaf is compared with jax's own result:

* integers, pred and random bits: exactly;
* floats: `runner.compare`'s per-dtype tolerance (f32 rtol 1e-5/atol 1e-6, f64 1e-12,
  f16 1e-3, bf16 1e-2, complex like their parts).  NaN must meet NaN and an infinity the
  same infinity.  Programs whose float ops are all exactly rounded (data movement,
  conversions, rounding, selects, sorts, single adds/multiplies) are held to bit equality
  instead (`EXACT_FLOAT`: -0.0 vs 0.0 counts, NaN payloads do not).  Programs that need a
  looser bound are in `TOLERANCE_OVERRIDES`, each with its reason.

Modules run as `xlaplug run` runs them by default: with the bundled plugins loaded (so the
jnp.linalg programs' LAPACK custom calls go to the bundled jax_lapack plugin).

Nothing is skipped silently.  A program that cannot run is in exactly one of:

* `NEEDS_PLUGIN`: it contains a custom-call no plugin provides yet; asserted to fail with
  the "no plugin provides target '<target>'" error naming a target its reason mentions.
* `ELIDED_CONSTANTS`: jax's compiled text prints a constant as `{...}`, so its values are
  not in the text at all; asserted to fail with the elided-literal error.
* `KNOWN_FAILURES`: a kernel bug; asserted to still fail (strict xfail: when it starts
  passing, the test fails until the entry is removed).

Keys are `program` (both forms) or `program/lowered` / `program/compiled` (one form).
`test_coverage` checks the passing programs' breadth: at least `MIN_PASSING` distinct
programs (a program counts when either form passes), and every opcode of
`REQUIRED_OPCODES` executed by some passing program -- the opcodes of the computations the
entry reaches after `compile_module` -- minus `UNREACHABLE_OPCODES`, those no jax program
in the corpus can produce.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pytest

import jax_corpus as corpus
from xlaplug.runtime.driver import compile_module
from xlaplug.hlo import parse_module
from xlaplug.hlo.ir import Module
from xlaplug.plugin import Session
from xlaplug.runtime.runner import compare, execute

VARIANTS = ("lowered", "compiled")

# ---- expectations --------------------------------------------------------------------------

# XLA's own custom-call targets (TopK, Sharding) are lowered to core HLO by the
# custom-call lowering pass; no corpus program needs a plugin beyond the bundled ones.
NEEDS_PLUGIN: dict[str, str] = {}

ELIDED_CONSTANTS: dict[str, str] = {
    "large_constant_tensor/compiled": "compiled.as_text() prints the f32[8,8] constant as "
                                      "{...}; the values are not in the text",
}

KNOWN_FAILURES: dict[str, str] = {}

# Float ops in these programs are exactly rounded (or pure data movement), so every float
# leaf must be bit-identical to jax's (sign of zero included, NaN payloads ignored).
EXACT_FLOAT: frozenset[str] = frozenset({
    "unary_rounding", "convert_float_to_int", "convert_float_to_64", "convert_int_to_float",
    "convert_float_widths", "bitcast_same_width", "bitcast_different_width", "bitcast_64",
    "reduce_precision", "f16_special_values", "fp8_convert", "no_inputs_constants",
    "constants_64", "large_constant_tensor", "broadcast_reshape_transpose", "rev_slice",
    "dynamic_slice_oob", "dynamic_slice_s64_indices", "dynamic_update_slice_oob",
    "pad_negative_interior", "concatenate_iota", "expand_like_ops", "gather_indexing",
    "gather_batching_dims", "take_along_axis_oob", "lax_gather_scatter", "sort_2d",
    "sort_multi_operand", "sort_nan_total_order", "select_clamp", "scalar_and_empty",
    "pytree_outputs", "donated_input_output_alias", "compare_float_nan",
})

# program -> (rtol, atol, reason); applies to every float leaf of the program.
TOLERANCE_OVERRIDES: dict[str, tuple[float, float, str]] = {
    "mlp_value_and_grad": (1e-4, 5e-5, "sum order: backprop through two matmuls and "
                           "log_softmax; vs an f64 reference jax's f32 grads are off by up to "
                           "1.2e-5 (values up to 18), ours by 2.3e-6"),
    "conv2d_grads": (1e-4, 1e-5, "sum order: conv backward (transposed/dilated convs) "
                     "accumulates in a different order than XLA's Eigen convolution"),
}

MIN_PASSING = 80

REQUIRED_OPCODES = """
abs negate sign not popcnt count-leading-zeros floor ceil round-nearest-afz round-nearest-even
exponential exponential-minus-one log log-plus-one logistic sqrt rsqrt cbrt sine cosine tan
tanh atan2 erf is-finite real imag complex add subtract multiply divide remainder power
maximum minimum and or xor shift-left shift-right-arithmetic shift-right-logical compare
select clamp convert bitcast-convert reduce-precision broadcast reshape transpose reverse
slice dynamic-slice dynamic-update-slice pad concatenate iota copy gather scatter tuple
get-tuple-element opt-barrier reduce reduce-window select-and-scatter sort dot convolution
fft while conditional call fusion rng-bit-generator
""".split()

# Required opcodes that no program of the corpus can make jax emit (with the reason).
UNREACHABLE_OPCODES: dict[str, str] = {
    "logistic": "jax (0.10) lowers lax.logistic / jax.nn.sigmoid to 1 / (1 + exp(-x)) and "
                "XLA:CPU keeps it expanded; neither corpus form contains a logistic op",
}


# ---- running -------------------------------------------------------------------------------

def _lookup(table: dict, name: str, variant: str):
    return table.get(f"{name}/{variant}", table.get(name))


def _expectation(name: str, variant: str) -> str:
    kinds = [k for k, t in (("plugin", NEEDS_PLUGIN), ("elided", ELIDED_CONSTANTS),
                            ("known", KNOWN_FAILURES)) if _lookup(t, name, variant) is not None]
    assert len(kinds) <= 1, f"{name}/{variant} is listed in more than one table: {kinds}"
    return kinds[0] if kinds else "pass"


@dataclass
class Outcome:
    error: BaseException | None = None
    problems: list[str] = field(default_factory=list)
    module: Module | None = None

    @property
    def passed(self) -> bool:
        return self.error is None and not self.problems

    def describe(self) -> str:
        if self.error is not None:
            return f"{type(self.error).__name__}: {self.error}"
        return "\n".join(self.problems)


@pytest.fixture(scope="module")
def plugins():
    """Run like `xlaplug run` does by default: with the bundled plugins loaded (only those:
    no XLAPLUG_PLUGIN_PATH, no entry points), so NEEDS_PLUGIN entries flip when a bundled
    plugin starts providing their targets.  The registry: tests make sessions of it."""
    from xlaplug.plugin import load_plugins
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("XLAPLUG_PLUGIN_PATH", raising=False)
        return load_plugins(entry_points=False)


@pytest.fixture(scope="module")
def entries(jax_corpus) -> dict:
    """The session corpus (conftest's `jax_corpus` fixture) by program name."""
    return {e.name: e for e in jax_corpus}


def _exact_problems(k: int, got: np.ndarray, want: np.ndarray) -> list[str]:
    parts = [(got.real, want.real), (got.imag, want.imag)] if got.dtype.kind == "c" else \
        [(got, want)]
    for g, w in parts:
        g = np.asarray(g).astype(np.float64)
        w = np.asarray(w).astype(np.float64)
        nan = np.isnan(g) & np.isnan(w)
        same = nan | ((g == w) & (np.signbit(g) == np.signbit(w)))
        if not same.all():
            idx = tuple(int(i) for i in np.argwhere(~same)[0])
            return [f"out{k}: {int((~same).sum())} of {got.size} elements not bit-identical; "
                    f"first at {idx}: got {got[idx]!r}, expected {want[idx]!r}"]
    return []


def _check_outputs(name: str, outputs: list[np.ndarray], expected: list[np.ndarray]) -> list[str]:
    if len(outputs) != len(expected):
        return [f"{len(outputs)} output leaves, jax has {len(expected)}"]
    problems = []
    for k, (got, want) in enumerate(zip(outputs, expected)):
        if got.dtype != want.dtype or got.shape != want.shape:
            problems.append(f"out{k}: {got.dtype}{list(got.shape)}, jax has "
                            f"{want.dtype}{list(want.shape)}")
    if problems:
        return problems
    rtol = atol = None
    if name in TOLERANCE_OVERRIDES:
        rtol, atol, _ = TOLERANCE_OVERRIDES[name]
    with np.errstate(invalid="ignore", over="ignore"):
        problems += [f"{m.leaf} ({outputs[int(m.leaf[3:])].dtype}): {m.message}"
                     for m in compare(outputs, {f"out{k}": w for k, w in enumerate(expected)},
                                      rtol, atol)]
        if name in EXACT_FLOAT and not problems:
            for k, (got, want) in enumerate(zip(outputs, expected)):
                if got.dtype.kind not in "biu":  # floats, complex, ml_dtypes (kind "V")
                    problems += _exact_problems(k, got, want)
    return problems


_OUTCOMES: dict[tuple[str, str], Outcome] = {}


def run_program(entry, variant: str, registry) -> Outcome:
    """Parse, compile, execute and compare one form of one program (memoized), with the
    plugins of `registry` on the CPU."""
    key = (entry.name, variant)
    if key not in _OUTCOMES:
        _OUTCOMES[key] = _run(entry, variant, registry)
    return _OUTCOMES[key]


def _run(entry, variant: str, registry) -> Outcome:
    name = entry.name
    out = Outcome()
    try:
        module = parse_module(getattr(entry, f"{variant}_hlo"), f"{name}.{variant}.hlo")
        session = Session(registry)
        compile_module(module, session)
        out.module = module
        nparams = len(module.entry.parameters)
        if nparams != len(entry.inputs):
            out.problems.append(f"entry takes {nparams} parameters, the corpus has "
                                f"{len(entry.inputs)} inputs")
            return out
        result = execute(module, list(entry.inputs), session)
    except Exception as e:  # noqa: BLE001 - recorded and judged by the caller
        out.error = e
        return out
    out.problems = _check_outputs(name, result.outputs, entry.outputs)
    return out


# ---- the tests -----------------------------------------------------------------------------

CASES = [(n, v) for n in corpus.names() for v in VARIANTS]


@pytest.mark.parametrize("name,variant", CASES, ids=[f"{n}-{v}" for n, v in CASES])
def test_conformance(entries, plugins, name, variant):
    kind = _expectation(name, variant)
    outcome = run_program(entries[name], variant, plugins)
    if kind == "pass":
        assert outcome.passed, f"{name} ({variant}) differs from jax:\n{outcome.describe()}"
    elif kind == "plugin":
        reason = _lookup(NEEDS_PLUGIN, name, variant)
        m = re.search(r"no plugin provides target '([^']+)'", str(outcome.error or ""))
        assert m is not None, (f"{name} ({variant}) is in NEEDS_PLUGIN ({reason}) but did not "
                               f"fail for a missing plugin; update NEEDS_PLUGIN. Outcome: "
                               f"{'passed' if outcome.passed else outcome.describe()}")
        assert m[1] in reason, (f"{name} ({variant}): missing target '{m[1]}' is not the one "
                                f"NEEDS_PLUGIN names ({reason})")
    elif kind == "elided":
        reason = _lookup(ELIDED_CONSTANTS, name, variant)
        assert "{...}" in getattr(entries[name], f"{variant}_hlo"), reason
        assert outcome.error is not None and "elided literal" in str(outcome.error), (
            f"{name} ({variant}) is in ELIDED_CONSTANTS but did not fail with the elided-"
            f"literal error: {'passed' if outcome.passed else outcome.describe()}")
    else:
        reason = _lookup(KNOWN_FAILURES, name, variant)
        if outcome.passed:
            pytest.fail(f"[XPASS(strict)] {name} ({variant}) now passes; remove it from "
                        f"KNOWN_FAILURES ({reason})")
        pytest.xfail(f"{reason} -- {outcome.describe()[:500]}")


def _reachable_opcodes(module: Module) -> set[str]:
    seen, ops, todo = set(), set(), [module.entry]
    while todo:
        comp = todo.pop()
        if id(comp) in seen:
            continue
        seen.add(id(comp))
        for ins in comp.instructions:
            ops.add(ins.opcode)
            todo.extend(ins.called_computations())
    return ops


def test_tables_name_corpus_programs():
    known = set(corpus.names())
    for table in (NEEDS_PLUGIN, ELIDED_CONSTANTS, KNOWN_FAILURES, TOLERANCE_OVERRIDES):
        for key in table:
            name, _, variant = key.partition("/")
            assert name in known, f"{key}: no such corpus program"
            assert variant in ("",) + VARIANTS, f"{key}: bad variant"
    assert EXACT_FLOAT <= known, EXACT_FLOAT - known


def test_coverage(entries, plugins):
    passing: set[str] = set()
    ops: set[str] = set()
    for name, variant in CASES:
        if _expectation(name, variant) != "pass":
            continue
        outcome = run_program(entries[name], variant, plugins)
        if outcome.passed:
            passing.add(name)
            ops |= _reachable_opcodes(outcome.module)
    missing = [op for op in REQUIRED_OPCODES if op not in ops]
    print(f"\n{len(passing)} distinct passing programs; {len(ops)} distinct opcodes executed")
    if missing:
        print("required opcodes no passing program executes: " + " ".join(missing))
    assert len(passing) >= MIN_PASSING, f"only {len(passing)} programs pass"
    unexplained = [op for op in missing if op not in UNREACHABLE_OPCODES]
    assert not unexplained, f"opcodes not executed by any passing program: {unexplained}"
