"""tests/jax_corpus.py's cache on a fresh checkout: collection sizes programs without
generating them, and processes that load the corpus at once (xdist's workers) share its
generation -- an entry another process is generating is read once it is written, not
generated a second time."""
from __future__ import annotations

import threading
import time

import jax
import numpy as np
import pytest

import jax_corpus as corpus


@pytest.fixture
def tiny_corpus(tmp_path, monkeypatch):
    """Three small programs in an empty cache; returns the list of generated names."""
    jnp = jax.numpy
    programs = {}
    for name, fn in (("a", jnp.sin), ("b", jnp.cos), ("c", jnp.tanh)):
        programs[name] = corpus.Program(name, fn, lambda r: (corpus.f32(r, 3),))
    monkeypatch.setattr(corpus, "PROGRAMS", programs)
    monkeypatch.setattr(corpus, "CACHE_ROOT", tmp_path)
    generated = []
    real = corpus.generate
    monkeypatch.setattr(corpus, "generate", lambda p: generated.append(p.name) or real(p))
    return generated


def test_an_entry_another_process_generates_is_waited_for_not_generated(tiny_corpus):
    held = corpus._lock("b", wait=False)  # "another process" is generating b
    assert held is not None and corpus._lock("b", wait=False) is None
    result = {}
    loader = threading.Thread(target=lambda: result.update(entries=corpus.load_corpus()))
    loader.start()
    deadline = time.monotonic() + 60
    while len(tiny_corpus) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    loader.join(timeout=0.5)
    assert loader.is_alive()  # a and c done, waiting for b
    assert tiny_corpus == ["a", "c"]
    other = corpus.generate(corpus.PROGRAMS["b"])  # the other process writes b, unlocks
    corpus._write(other, corpus._fingerprint(corpus.PROGRAMS["b"]), corpus._cache_dir("b"))
    corpus._unlock(held)
    loader.join(timeout=60)
    assert not loader.is_alive()
    assert [e.name for e in result["entries"]] == ["a", "b", "c"]
    assert tiny_corpus == ["a", "c", "b"]  # b generated once, by the "other process"
    assert np.array_equal(result["entries"][1].outputs[0], other.outputs[0])
    assert [e.name for e in corpus.load_corpus()] == ["a", "b", "c"]  # now all read back
    assert len(tiny_corpus) == 3


def test_input_sizes_come_without_generating(tiny_corpus):
    assert [corpus.input_elements(n) for n in "abc"] == [3, 3, 3]
    assert tiny_corpus == []
