"""Whole-loop compilation of `while` (backends/cpu/compiled_while.py).

A loop runs INTERPRETED_ITERATIONS iterations through the interpreter, then the rest as one
compiled call when its condition and body are straight-line element code.  jax gives the
expected values; the interpreter (the threshold raised out of reach) must agree bit for bit,
since both evaluate the same SCALAR_OPS templates.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from xlaplug.backends.cpu import compiled_while as CW
from xlaplug.driver import compile_module
from xlaplug.hlo import parse_module
from xlaplug.runner import RunError, execute


def _module(f, *args):
    text = jax.jit(f).lower(*args).as_text(dialect="hlo")
    m = parse_module(text)
    compile_module(m, None)
    return m, jax.jit(f)(*args)


def _whiles(m):
    return [i for c in m.computations for i in c.instructions if i.opcode == "while"]


def _interpreted(f, args, monkeypatch):
    monkeypatch.setattr(CW, "INTERPRETED_ITERATIONS", 10 ** 9)
    m, _ = _module(f, *args)
    out = execute(m, list(args)).outputs
    monkeypatch.undo()
    return out


X = np.random.default_rng(0).standard_normal(16).astype(np.float32)


def fori(x):
    return lax.fori_loop(0, 300, lambda i, v: jnp.sin(v) * 0.9 + jnp.cos(v) * 0.1
                         + i.astype(jnp.float32) * 1e-3, x)


def grow(x):  # data-dependent trip count, integer and f64 state
    def cond(s):
        return s[0] < 1000.0

    def body(s):
        return s[0] * 1.01 + 0.5, s[1] + 1, s[2] ^ (s[1] * 7)
    return lax.while_loop(cond, body, (x, jnp.int32(0), jnp.int32(3)))


CASES = {
    "fori_f32": (fori, (X,)),
    "grow_f64": (grow, (np.float64(1.0),)),
    "bf16_state": (lambda x: lax.fori_loop(0, 100, lambda i, v: v * 0.99 + 0.01, x),
                   (X.astype(ml_dtypes.bfloat16),)),
    "single_array_state": (lambda x: lax.while_loop(lambda v: jnp.sum(v) < 1e6,
                                                    lambda v: v * 2.0 + 1.0, x), (np.abs(X),)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_loop_matches_jax_and_the_interpreter(name, monkeypatch):
    f, args = CASES[name]
    m, want = _module(f, *args)
    got = execute(m, list(args)).outputs
    want = [np.asarray(w) for w in (want if isinstance(want, (tuple, list)) else (want,))]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64),
                                   rtol=1e-5, atol=1e-5)
    for g, i in zip(got, _interpreted(f, args, monkeypatch)):
        np.testing.assert_array_equal(g.reshape(-1).view(np.uint8), i.reshape(-1).view(np.uint8))


def test_loops_compile_once_and_later_runs_start_compiled(monkeypatch):
    m, _ = _module(fori, X)
    (loop,) = _whiles(m)
    execute(m, [X])
    assert CW._known_plan(loop) not in (None, CW._NO_PLAN)
    from xlaplug.backends import executor
    runs = []
    real = executor.ExecContext.run

    def counting(self, comp, args):
        runs.append(comp.name)
        return real(self, comp, args)
    monkeypatch.setattr(executor.ExecContext, "run", counting)
    execute(m, [X])
    assert len(runs) == 1, runs  # the entry only: the loop ran compiled from iteration 0


def test_short_loops_never_compile():
    m, want = _module(lambda x: lax.fori_loop(0, 5, lambda i, v: v * 2.0, x), X)
    (loop,) = _whiles(m)
    np.testing.assert_array_equal(execute(m, [X]).outputs[0], np.asarray(want))
    assert CW._known_plan(loop) is CW._NO_PLAN


def test_loop_the_code_cannot_express_stays_interpreted():
    # A sort in the body has no loop-code form; the loop still runs correctly.
    f = lambda x: lax.fori_loop(0, 40, lambda i, v: jnp.sort(v * -1.5 + 0.1), x)  # noqa: E731
    m, want = _module(f, X)
    (loop,) = _whiles(m)
    got = execute(m, [X]).outputs[0]
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-6)
    assert CW._known_plan(loop) is None


ARRAY_CASES = {
    # reduce in the condition, dot in the body
    "reduce_dot": (lambda x: lax.while_loop(lambda v: jnp.max(jnp.abs(v)) > 1e-3,
                                            lambda v: (np.eye(16, dtype=np.float32) * 0.9) @ v,
                                            x), (X,), 1e-6),
    # scan: dynamic-slice of xs, dynamic-update-slice of ys, a matrix state
    "scan_rnn": (lambda h, xs, w: lax.scan(lambda c, x: (jnp.tanh(w @ c + x), c.sum()), h, xs),
                 (X[:4], np.random.default_rng(1).standard_normal((50, 4)).astype(np.float32),
                  np.random.default_rng(2).standard_normal((4, 4)).astype(np.float32) * 0.3),
                 2e-6),
    # slices, transposes, concatenates, iota, broadcasts along a dimension
    "shuffle": (lambda x: lax.fori_loop(0, 60, lambda i, v: jnp.concatenate(
        [v[8:], v[:8] * 0.5]).reshape(4, 4).T.reshape(16)
        + jnp.arange(16, dtype=jnp.float32) * 1e-3 + i.astype(jnp.float32), x), (X,), 1e-6),
}


@pytest.mark.parametrize("name", sorted(ARRAY_CASES))
def test_array_loops_compile_and_match_jax(name):
    f, args, rtol = ARRAY_CASES[name]
    m, want = _module(f, *args)
    got = execute(m, list(args)).outputs
    assert all(CW._known_plan(w) not in (None, CW._NO_PLAN) for w in _whiles(m)), \
        "the loop did not compile"
    want = [np.asarray(w) for w in (want if isinstance(want, (tuple, list)) else (want,))]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("limit,ok", [(299, False), (300, True), (20, False)])
def test_max_while_iterations_spans_both_phases(limit, ok):
    m, want = _module(fori, X)
    if ok:
        execute(m, [X], max_while_iterations=limit)
    else:
        with pytest.raises(RunError, match=f"exceeded --max-while-iterations={limit}"):
            execute(m, [X], max_while_iterations=limit)


def test_xla_optimized_loops_compile_with_their_fusions():
    """XLA's optimized HLO wraps the condition's compare (and body ops) in fusions: they are
    inlined into the compiled loop."""
    f = CASES["fori_f32"][0]
    text = jax.jit(f).lower(X).compile().as_text()
    m = parse_module(text)
    compile_module(m, None)
    loops = _whiles(m)
    got = execute(m, [X]).outputs[0]
    assert any(CW._known_plan(w) not in (None, CW._NO_PLAN) for w in loops)
    np.testing.assert_allclose(got, np.asarray(jax.jit(f)(X)), rtol=1e-5, atol=1e-5)


# Corpus programs run with every elementwise chain fused (whatever its size) and every loop
# compiled from its first iteration -- the compiled paths against jax's outputs.  (The whole
# corpus passes this way -- a few minutes; these cover loops, scans, attention, layer norm
# and narrow-float math.)
FORCED = ("fori_loop", "scan_rnn", "scan_reverse_unroll", "while_collatz", "nested_control",
          "stop_gradient_and_while_grad", "attention", "layernorm_gelu",
          "softmax_logsumexp", "bf16_math", "polynomial_and_where_chain")


@pytest.mark.parametrize("variant", ["lowered", "compiled"])
@pytest.mark.parametrize("name", FORCED)
def test_corpus_program_fused_and_compiled(name, variant, monkeypatch):
    import jax_corpus as corpus
    from test_conformance_jax import _check_outputs
    monkeypatch.setattr(CW, "INTERPRETED_ITERATIONS", 0)
    entry = corpus.load_entry(name)
    m = parse_module(getattr(entry, f"{variant}_hlo"))
    compile_module(m, None, options={"loop-fusion": {"min_elements": 1}})
    out = execute(m, list(entry.inputs), fusion_min_elements=1).outputs
    assert not _check_outputs(name, out, list(entry.outputs))


def test_interpret_option_keeps_every_loop_and_fusion_interpreted(tmp_path, monkeypatch):
    """`xlaplug run --interpret` (execute(interpret=True)): same results, nothing compiled."""
    big = np.random.default_rng(3).standard_normal((256, 256)).astype(np.float32)
    f = lambda x: lax.fori_loop(0, 40, lambda i, v: v * 0.5 + 1.0, x * 2.0 + x)  # noqa: E731
    m, want = _module(f, big)
    from xlaplug.backends.cpu import fused_loop
    compiled = []
    monkeypatch.setattr(fused_loop, "compiled_loop_fn",
                        lambda comp, roles: compiled.append(roles))
    got = execute(m, [big], interpret=True).outputs[0]
    assert not compiled and all(CW._known_plan(w) is CW._NO_PLAN for w in _whiles(m))
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-6)
    from click.testing import CliRunner
    from xlaplug.cli import main
    path = tmp_path / "m.hlo"
    path.write_text(jax.jit(f).lower(big).as_text(dialect="hlo"))
    np.savez(tmp_path / "in.npz", in0=big)
    r = CliRunner().invoke(main, ["run", str(path), "--interpret", "--inputs",
                                  str(tmp_path / "in.npz"), "--out", str(tmp_path / "o.npz")])
    assert r.exit_code == 0, r.output
    np.testing.assert_allclose(np.load(tmp_path / "o.npz")["out0"], np.asarray(want), rtol=1e-6)
