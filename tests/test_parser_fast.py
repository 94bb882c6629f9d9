"""parser_fast reads the common path of HLO text without lark; lark reads everything else.
Both must build the same module -- printed text, every computation's and instruction's line
and column, stack tables -- or fail with the same error, on every text we have: examples,
XLA's own parser tests, mutants of them (tests/../scripts/fuzz_mutations.py), and (marked
suite) the jax corpus and a sample of the StableHLO conformance suite."""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

import xlaplug.hlo.text.parser as P
from suite_location import find_conformance_dir
from xlaplug.hlo.errors import HloError
from xlaplug.hlo.text.parser_state import parse_state
from xlaplug.hlo.text.printer import module_to_text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from fuzz_mutations import mutate  # noqa: E402


def _outcome(text: str, fast: bool, monkeypatch) -> tuple:
    with monkeypatch.context() as mp:
        if not fast:
            mp.setattr(P, "fast_items", lambda *a: None)
        try:
            m = P.parse_module(text, "case.hlo")
        except HloError as e:
            return ("error", str(e))
    where = [(c.name, c.line, c.column, [(i.name, i.line, i.column) for i in c.instructions])
             for c in m.computations]
    return ("ok", module_to_text(m), where, dict(m.stack_tables))


def _took_fast_path(text: str) -> bool:
    state = parse_state(text)
    try:
        return P.fast_items(text, P._terminals(), P._Builder()) is not None
    finally:
        state.close()


def _texts() -> list[tuple[str, str]]:
    out = [(p.name, p.read_text()) for p in sorted((ROOT / "examples").glob("*.hlo"))]
    cases = json.loads((ROOT / "tests" / "data" / "xla_parser_cases.json").read_text())
    return out + [(c["name"], c["text"]) for c in cases]


def _mutants(texts, n: int) -> list[tuple[str, str]]:
    out = []
    for k in range(n):
        rng = random.Random(f"parser_fast:{k}")
        name, text = texts[rng.randrange(len(texts))]
        out.append((f"mutant {k} of {name}", mutate(text, rng)[0]))
    return out


def _same(texts, monkeypatch) -> int:
    fast = 0
    for name, text in texts:
        assert _outcome(text, True, monkeypatch) == _outcome(text, False, monkeypatch), name
        fast += _took_fast_path(text)
    return fast


def test_examples_and_xlas_parser_cases_read_the_same_both_ways(monkeypatch):
    texts = _texts()
    fast = _same(texts, monkeypatch)
    assert fast >= len(texts) // 2  # most of them are on the common path


def test_mutants_read_the_same_both_ways(monkeypatch):
    _same(_mutants(_texts(), 400), monkeypatch)


def test_jax_output_takes_the_fast_path():
    pytest.importorskip("jax")
    import jax
    import jax.numpy as jnp

    def f(x, w):
        y = jnp.tanh(x @ w) * 0.5 + x
        return jax.lax.fori_loop(0, 3, lambda i, c: c * 2.0, y).sum(axis=0)
    x = jnp.ones((4, 4), jnp.float32)
    text = jax.jit(f).lower(x, x).as_text(dialect="hlo", debug_info=True)
    assert "FileNames" in text and _took_fast_path(text)
    assert _took_fast_path(jax.jit(f).lower(x, x).compile().as_text())


@pytest.mark.suite
def test_jax_corpus_and_the_conformance_suite_read_the_same_both_ways(jax_corpus, monkeypatch):
    texts = [(e.name, t) for e in jax_corpus for t in (e.lowered_hlo, e.compiled_hlo) if t]
    suite = find_conformance_dir()  # the corpus alone without it
    if suite is not None:
        texts += [(p.name, p.read_text()) for p in sorted(suite.glob("*.hlo"))[::25]]
    fast = _same(texts, monkeypatch)
    assert fast >= len(texts) * 9 // 10
