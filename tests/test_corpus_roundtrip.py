"""Parse -> print -> parse round trips over jax-generated HLO (tests/roundtrip.py says what
a round trip checks).  The StableHLO conformance suite's cases are round-tripped by its
shards (tests/test_conformance_stablehlo.py), which parse each case once for both."""
from __future__ import annotations

import pytest

import jax_corpus
from roundtrip import roundtrip_problems
from xlaplug.hlo.text.parser import parse_module


@pytest.fixture(scope="module")
def corpus_by_name(jax_corpus):
    return {e.name: e for e in jax_corpus}


@pytest.mark.parametrize("which", ["lowered", "compiled"])
@pytest.mark.parametrize("name", jax_corpus.names())
def test_jax_corpus_roundtrip(corpus_by_name, name, which):
    entry = corpus_by_name[name]
    text = entry.lowered_hlo if which == "lowered" else entry.compiled_hlo
    problems = roundtrip_problems(text, f"{name}.{which}.hlo")
    assert not problems, "\n".join(problems[:30])


def test_jax_corpus_entries_match_their_hlo(jax_corpus):
    """The stored inputs/outputs line up with the entry computation's parameters and root."""
    assert len(jax_corpus) >= 90
    bad = []
    for e in jax_corpus:
        entry = parse_module(e.lowered_hlo, f"{e.name}.lowered.hlo").entry
        params = [(p.shape.dtype, p.shape.dims) for p in entry.parameters]
        outs = [(s.dtype, s.dims) for s in entry.root.shape.leaves()]
        if params != [(a.dtype, a.shape) for a in e.inputs]:
            bad.append(f"{e.name}: parameters {params} vs inputs")
        if outs != [(a.dtype, a.shape) for a in e.outputs]:
            bad.append(f"{e.name}: root {outs} vs outputs")
        if not e.compiled_hlo.startswith("HloModule "):
            bad.append(f"{e.name}: compiled text does not start with HloModule")
    assert not bad, "\n".join(bad)
