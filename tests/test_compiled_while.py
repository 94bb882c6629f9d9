"""Whole-loop compilation of `while` (backends/cpu/compiled_while.py).

A loop whose condition and body are straight-line array code runs as one compiled call:
from iteration 0 when its code is ready (compiled, or in the disk cache) or its trip count
is known and long, else after INTERPRETED_ITERATIONS interpreted iterations.  jax gives the
expected values; the interpreter (loops kept interpreted) must agree bit for bit on
elementwise loops, since both evaluate the same SCALAR_OPS templates.
"""
from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import xlaplug

from xlaplug.backends.cpu import compiled_while as CW
from xlaplug.backends.cpu import jit_cache
from xlaplug.backends.cpu import tile_dot as TD
from xlaplug.backends.cpu import loop_trip_count as TC
from xlaplug.runtime.driver import compile_module
from xlaplug.hlo import parse_module
from xlaplug.runtime.runner import RunError, execute


def _module(f, *args):
    text = jax.jit(f).lower(*args).as_text(dialect="hlo")
    m = parse_module(text)
    compile_module(m, None)
    return m, jax.jit(f)(*args)


def _whiles(m):
    return [i for c in m.computations for i in c.instructions if i.opcode == "while"]


def _interpreted(f, args, monkeypatch):
    monkeypatch.setattr(CW, "_switch_at", lambda ctx, ins, state: -1)
    m, _ = _module(f, *args)
    out = execute(m, list(args)).outputs
    monkeypatch.undo()
    return out


@pytest.fixture
def record(monkeypatch):
    """{"generated": {loop name: code or None}, "compiled": [loop names run compiled],
    "runs": [computations the executor ran]} of the executes that follow."""
    seen = {"generated": {}, "compiled": [], "runs": []}
    generate, run_compiled = CW.generate, CW._run_compiled

    def gen(ins):
        code = seen["generated"][ins.name] = generate(ins)
        return code

    def rc(ins, code, state, limit_left):
        res = run_compiled(ins, code, state, limit_left)
        if res is not None:
            seen["compiled"].append(ins.name)
        return res
    monkeypatch.setattr(CW, "generate", gen)
    monkeypatch.setattr(CW, "_run_compiled", rc)
    from xlaplug.runtime import executor
    real = executor.ExecContext.run

    def counting(self, comp, args):
        seen["runs"].append(comp.name)
        return real(self, comp, args)
    monkeypatch.setattr(executor.ExecContext, "run", counting)
    return seen


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


def test_loops_compile_once_and_later_runs_start_compiled(record):
    m, _ = _module(grow, np.float64(1.0))  # a data-dependent trip count
    (loop,) = _whiles(m)
    execute(m, [np.float64(1.0)])
    assert record["compiled"] == [loop.name]
    record["runs"].clear()
    execute(m, [np.float64(1.0)])  # a new run context: the code is ready, so iteration 0
    assert record["runs"] == [m.entry.name], record["runs"]


def test_a_short_run_of_a_loop_compiled_in_this_process_runs_compiled(record):
    # A counted loop from a start the caller gives: 100 iterations compile it; a later call
    # of the same executable that runs it 10 times (known short) runs compiled too.
    f = lambda k, x: lax.fori_loop(k, 100, lambda i, v: jnp.sin(v) * 0.5 + 0.25, x)  # noqa
    exe = xlaplug.compile(jax.jit(f).lower(np.int32(0), X).as_text(dialect="hlo"))
    for k in (0, 90):
        np.testing.assert_array_equal(exe(np.int32(k), X)[0],
                                      np.asarray(jax.jit(f)(np.int32(k), X)))
    assert len(record["compiled"]) == 2 and record["runs"] == [exe.module.entry.name] * 2


def lstm(h0, c0, xs, wx, wh):
    def cell(carry, x):
        h, c = carry
        i, f, g, o = jnp.split(x @ wx + h @ wh, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h
    return lax.scan(cell, (h0, c0), xs)


def test_a_short_loop_run_again_and_again_compiles(record):
    """A 32-step scan (a model step's LSTM) is short: its first call runs interpreted; the
    executable's next call takes its iterations past INTERPRETED_ITERATIONS and runs it
    compiled -- jax's values, and bit for bit the interpreted call's."""
    r = np.random.default_rng(4)
    args = [r.standard_normal(s).astype(np.float32) * k for s, k in
            (((4, 16), 1), ((4, 16), 1), ((32, 4, 8), 1), ((8, 64), 0.3), ((16, 64), 0.25))]
    jf = jax.jit(lstm)
    exe = xlaplug.compile(jf.lower(*args).as_text(dialect="hlo"))
    want = [np.asarray(w) for w in jax.tree.leaves(jf(*args))]
    first = exe(*args)
    assert record["compiled"] == [] and record["generated"] == {}
    for _ in range(2):
        got = exe(*args)
        for g, i, w in zip(got, first, want):
            np.testing.assert_array_equal(g, i)
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    (loop,) = _whiles(exe.module)
    assert record["compiled"] == [loop.name] * 2
    # its sigmoid/tanh loops run in functions of their own (loop_emitters.outline), where they
    # vectorize -- the same lines, so the same values as the interpreted call above
    src = record["generated"][loop.name].src
    assert "_xexp32(" in src and "_xexp32(" not in src[src.index("def body("):]


def test_outline_moves_template_loops_only():
    from xlaplug.backends.cpu.loop_emitters import outline
    lines = ["for o in range(4):", "    s_v1 = _xftz32(p0[o] + v2_3[o])", "    v1[o] = s_v1",
             "np.dot(p1, p2, v5)",
             "for o in range(8):", "    s_v6 = _xtanh32(v5[o])", "    v6[o] = s_v6",
             "x = v6[0]"]
    pieces: list = []
    out = outline(lines, pieces, "b")
    assert out == lines[:4] + ["bE0(v5, v6)", "x = v6[0]"]
    assert pieces[0].splitlines()[1:5] == ["def bE0(v5, v6):", "    for o in range(8):",
                                           "        s_v6 = _xtanh32(v5[o])",
                                           "        v6[o] = s_v6"]


def test_short_loops_never_compile(record):
    m, want = _module(lambda x: lax.fori_loop(0, 5, lambda i, v: v * 2.0, x), X)
    np.testing.assert_array_equal(execute(m, [X]).outputs[0], np.asarray(want))
    assert record["generated"] == {} and record["compiled"] == []  # 5 <= 32: no code made


def test_loop_the_code_cannot_express_stays_interpreted(record):
    # A sort in the body has no loop-code form; the loop still runs correctly.
    f = lambda x: lax.fori_loop(0, 40, lambda i, v: jnp.sort(v * -1.5 + 0.1), x)  # noqa: E731
    m, want = _module(f, X)
    (loop,) = _whiles(m)
    got = execute(m, [X]).outputs[0]
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-6)
    assert record["generated"] == {loop.name: None} and record["compiled"] == []


def _grow_trips() -> int:
    return int(jax.jit(grow)(np.float64(1.0))[1])


def test_trip_counts_jax_and_xla_state():
    """The counted loops jax lowers (fori_loop from any start, scan) and XLA's
    known_trip_count; a data-dependent loop has none."""
    m, _ = _module(fori, X)
    (loop,) = _whiles(m)
    start = (np.int32(0), X)
    assert TC.trip_count(loop, start) == 300
    assert TC.trip_count(loop, (np.int32(290), X)) == 10
    assert TC.trip_count(loop, (np.int32(301), X)) == 0
    m, _ = _module(lambda h, xs: lax.scan(lambda c, x: (c * x, c.sum()), h, xs), X[:4],
                   np.ones((70, 4), np.float32))
    (scan,) = _whiles(m)
    assert TC.trip_count(scan, (np.int32(0), X[:4], np.zeros(70, np.float32),
                                np.ones((70, 4), np.float32))) == 70
    opt = parse_module(jax.jit(fori).lower(X).compile().as_text())
    assert [TC.known_trip_count(w) for w in _whiles(opt)] == [300]
    m, _ = _module(grow, np.float64(1.0))
    (dd,) = _whiles(m)
    assert TC.trip_count(dd, (np.float64(1.0), np.int32(0), np.int32(3))) is None


@pytest.mark.parametrize("ready", [False, True])
def test_when_a_loop_starts_compiled(ready, record, monkeypatch):
    """Not ready (nothing compiled or cached): a counted loop longer than
    INTERPRETED_ITERATIONS compiles at once, a data-dependent one after that many
    interpreted iterations; ready (a load, not a compile): every loop from iteration 0."""
    monkeypatch.setattr(CW.LoopCode, "ready", lambda self: ready)
    m, want = _module(fori, X)
    np.testing.assert_allclose(execute(m, [X]).outputs[0], np.asarray(want), rtol=1e-5)
    assert record["runs"] == [m.entry.name]
    record["runs"].clear()
    m, _ = _module(grow, np.float64(1.0))
    (loop,) = _whiles(m)
    execute(m, [np.float64(1.0)])
    interpreted = 0 if ready else CW.INTERPRETED_ITERATIONS
    assert record["runs"].count(loop.attrs["body"].name) == interpreted
    assert record["compiled"][-1] == loop.name


ARRAY_CASES = {
    # reduce in the condition, dot in the body
    # (a vector times a matrix: a small dot in contraction order)
    "reduce_dot": (lambda x: lax.while_loop(lambda v: jnp.max(jnp.abs(v)) > 1e-3,
                                            lambda v: v @ (np.eye(16, dtype=np.float32) * 0.9),
                                            x), (X,), 1e-6),
    # scan: dynamic-slice of xs, dynamic-update-slice of ys, a matrix state
    "scan_rnn": (lambda h, xs, w: lax.scan(lambda c, x: (jnp.tanh(w @ c + x), c.sum()), h, xs),
                 (X[:4], np.random.default_rng(1).standard_normal((50, 4)).astype(np.float32),
                  np.random.default_rng(2).standard_normal((4, 4)).astype(np.float32) * 0.3),
                 2e-6),
    # rows written into a state leaf the caller passed in (updated in place on a copy), a
    # transposed matrix-matrix dot
    "rows_in_place": (lambda ys, a: lax.fori_loop(
        0, 40, lambda i, s: (lax.dynamic_update_slice(s[0], s[1][:1] * 0.5, (i, 0)),
                             (s[1].T @ a) * 0.25), (ys, a))[0],
        (np.zeros((40, 16), np.float32), np.eye(16, dtype=np.float32) + X * 0.01), 1e-5),
    # slices, transposes, concatenates, iota, broadcasts along a dimension
    "shuffle": (lambda x: lax.fori_loop(0, 60, lambda i, v: jnp.concatenate(
        [v[8:], v[:8] * 0.5]).reshape(4, 4).T.reshape(16)
        + jnp.arange(16, dtype=jnp.float32) * 1e-3 + i.astype(jnp.float32), x), (X,), 1e-6),
    # the left operand contracted along its first dimension, the right one along its
    # second: neither rows nor tiles, BLAS
    "blas_dot": (lambda a: lax.fori_loop(0, 40, lambda i, s: jnp.tanh(_dg(s, a, 0, 1)), a),
                 (np.eye(16, dtype=np.float32) + X * 0.05,), 1e-5),
    # small dots (tile_dot.py where BLAS's order allows): 5 rows (a block of 4 and one), 7
    # steps of k (4 and 3), a left operand contracted along its first dimension, a vector
    # times a matrix, a matrix contracted along its first dimension times a vector
    "tile_dots": (lambda x, v, w: lax.fori_loop(0, 40, lambda i, s: (
        jnp.tanh(s[0] @ w) + jnp.tanh(_dg(s[0], s[0], 0, 0))[:5] * 0.1,
        jnp.tanh(s[1] @ w) + jnp.tanh(_dg(w, s[1], 0, 0))), (x, v)),
        (np.random.default_rng(4).standard_normal((5, 7)).astype(np.float32),
         X[:7], np.random.default_rng(5).standard_normal((7, 7)).astype(np.float32) * 0.2),
        1e-5),
}


def _dg(a, b, lc, rc):
    """A dot contracting a's dimension lc with b's rc, as written (jnp's `.T @` would add
    transposes)."""
    return lax.dot_general(a, b, (((lc,), (rc,)), ((), ())))


def test_dots_take_the_tiled_loop_where_it_is_blas_order(record):
    """tile_dots' dots are tiled loops where tile_dot.blas_chains finds BLAS's order for
    their shapes (else BLAS); blas_dot's form is never tiled."""
    for name in ("tile_dots", "blas_dot"):
        f, args, _ = ARRAY_CASES[name]
        m, _ = _module(f, *args)
        (loop,) = _whiles(m)
        body = CW.generate(loop).src.split("def body")[1]
        dots = [i for c in m.computations for i in c.instructions if i.opcode == "dot"]
        tiled = [TD.blas_chains(tuple(d.operands[0].shape.dims), tuple(d.operands[1].shape.dims),
                                d.attrs["lhs_contracting_dims"][0],
                                d.attrs["rhs_contracting_dims"][0]) is not None for d in dots]
        assert len(set(re.findall(r"\bbT\d+\(", body))) == sum(tiled)
        if name == "blas_dot":
            assert tiled == [False] and body.count("np.dot(") == 1


@pytest.mark.parametrize("chains", [1, 2])
def test_tiled_dot_loops_compute_their_chains(chains):
    """Each form of tiled loop (rows in blocks and one by one, steps of k in blocks and
    the rest, x read along its rows or its columns) gives its chains' values exactly."""
    r = np.random.default_rng(6)
    for (ld, rd, lc, rc) in [((5, 7), (7, 6), 1, 0), ((9, 5), (9, 3), 0, 0),
                             ((11,), (11, 8), 0, 0), ((13, 4), (13,), 0, 0),
                             ((8, 16), (16, 32), 1, 0)]:
        x_is_lhs, m, k, n, xi = TD.tile_form(ld, rd, lc, rc)
        src = TD.tile_source("t", m, k, n, xi, chains) + "def call(*a):\n    t(*a)\n"
        fn = jit_cache.cached_function(src, {}, "call")
        lhs, rhs = (r.standard_normal(d).astype(np.float32) for d in (ld, rd))
        x, y = (lhs, rhs) if x_is_lhs else (rhs, lhs)
        out = np.empty(m * n, np.float32)
        fn(x.reshape(-1), y.reshape(-1), out, *([np.empty_like(out)] if chains == 2 else []))
        xm = x.reshape(1, k) if x.ndim == 1 else (x if lc == 1 else x.T)
        want = TD._emulated(np.ascontiguousarray(xm), y.reshape(k, n), chains)
        np.testing.assert_array_equal(out.view(np.uint32), want.reshape(-1).view(np.uint32))


@pytest.mark.parametrize("name", sorted(ARRAY_CASES))
def test_array_loops_compile_and_match_jax(name, record):
    f, args, rtol = ARRAY_CASES[name]
    m, want = _module(f, *args)
    before = [np.array(a, copy=True) for a in args]
    got = execute(m, list(args)).outputs
    assert record["compiled"] == [w.name for w in _whiles(m)], "the loop did not compile"
    for a, b in zip(args, before):  # in-place updates write the loop's own copy
        np.testing.assert_array_equal(a, b)
    want = [np.asarray(w) for w in (want if isinstance(want, (tuple, list)) else (want,))]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("limit,ok", [(299, False), (300, True), (20, False)])
def test_max_while_iterations_compiled_from_iteration_0(limit, ok, record):
    m, want = _module(fori, X)
    if ok:
        execute(m, [X], max_while_iterations=limit)
    else:
        with pytest.raises(RunError, match=f"exceeded --max-while-iterations={limit}"):
            execute(m, [X], max_while_iterations=limit)
    assert record["runs"] == [m.entry.name]  # no interpreted iteration


@pytest.mark.parametrize("where", ["interpreted", "compiled", "none"])
def test_max_while_iterations_spans_both_phases(where, monkeypatch):
    """A data-dependent loop: interpreted, then compiled; the limit counts both."""
    monkeypatch.setattr(CW.LoopCode, "ready", lambda self: False)
    trips = _grow_trips()
    assert trips > CW.INTERPRETED_ITERATIONS
    limit = {"interpreted": CW.INTERPRETED_ITERATIONS - 12, "compiled": trips - 1,
             "none": trips}[where]
    m, want = _module(grow, np.float64(1.0))
    if where == "none":
        out = execute(m, [np.float64(1.0)], max_while_iterations=limit).outputs
        assert int(out[1]) == trips
    else:
        with pytest.raises(RunError, match=f"exceeded --max-while-iterations={limit}"):
            execute(m, [np.float64(1.0)], max_while_iterations=limit)


def test_loop_code_lives_in_the_run_context():
    """No module-global plans: each run context (a device, a run) keeps its own."""
    from xlaplug.runtime.executor import ExecContext
    assert not hasattr(CW, "_PLANS")
    m, _ = _module(grow, np.float64(1.0))
    (loop,) = _whiles(m)
    a, b = ExecContext("cpu", {}), ExecContext("cpu", {})
    a.run(m.entry, [np.float64(1.0)])
    assert CW.loop_code(a, loop) is not None
    assert b.kernel_cache.table(CW._TABLE) == {}


BIG = np.random.default_rng(3).standard_normal(1024).astype(np.float32)
FOUR = np.arange(4.0, dtype=np.float32)

WRITE_BACK = {
    # a leaf passed on as another (a swap of two leaves), one passed through unchanged
    "crossed": (lambda a, b: lax.fori_loop(0, 50, lambda i, s: (s[1] * 0.5 + 1.0, s[0], s[2]),
                                           (a, b, a)), (X, X[::-1].copy())),
    # leaves of 4 KiB (swapped with their buffers), one value returned as two leaves, a
    # constant returned as a leaf
    "big_twice_constant": (lambda a, b: lax.fori_loop(
        0, 40, lambda i, s: _twice(s[1] * 0.5 + s[0]) + (s[2] * 0.25 + 1.0, jnp.asarray(FOUR)),
        (a, b, a, jnp.zeros(4, jnp.float32))), (BIG, BIG[::-1].copy())),
}


def _twice(v):
    return v, v


@pytest.mark.parametrize("name", sorted(WRITE_BACK))
def test_crossed_leaves_and_passthrough_match_the_interpreter(name, record, monkeypatch):
    """However a leaf takes its new value (kept, copied from another leaf through a
    temporary, swapped with a big buffer, copied from a buffer or a constant), the
    compiled loop gives the interpreter's bits, and the caller's arrays stay unwritten."""
    f, args = WRITE_BACK[name]
    before = [a.copy() for a in args]
    m, want = _module(f, *args)
    got = execute(m, list(args)).outputs
    assert record["compiled"] == [w.name for w in _whiles(m)]
    for a, b in zip(args, before):
        np.testing.assert_array_equal(a, b)
    for g, w, i in zip(got, want, _interpreted(f, args, monkeypatch)):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-6)
        np.testing.assert_array_equal(g.view(np.uint8), i.view(np.uint8))


def _views_body(i, s):
    x, y, w, b = s
    a = jnp.tanh(x + b) * y[:, :6] + y[:, 6:] * 0.5    # slices and a broadcast, 6 columns
    d = a.reshape(6, 4) + w[:, 2:6]                      # a 4-column slice in the same loop
    return d.reshape(4, 6), jnp.concatenate([a, a * 2.0], axis=1), w, b


def test_slices_and_broadcasts_read_in_place_match_the_interpreter(record, monkeypatch):
    """Slices and broadcasts read only elementwise are read in place by loops over rows
    and columns (loop_views.py); one whose columns differ from its loop's is copied: the
    interpreter's bits either way."""
    r = np.random.default_rng(7)
    args = tuple(r.standard_normal(d).astype(np.float32) for d in ((4, 6), (4, 12), (6, 8), (6,)))
    f = lambda *a: lax.fori_loop(0, 40, _views_body, a)  # noqa: E731
    m, want = _module(f, *args)
    got = execute(m, list(args)).outputs
    assert record["compiled"] == [w.name for w in _whiles(m)]
    body = record["generated"][_whiles(m)[0].name].src
    assert "for r in range(4):" in body and "for j0 in range(6):" in body  # read; copied
    for g, w, i in zip(got, want, _interpreted(f, args, monkeypatch)):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(g.view(np.uint8), i.view(np.uint8))


def _sums_body(i, s):
    x, t = s
    return x * 0.999 + 0.001, t + jnp.sum(x, axis=1) + jnp.max(x, axis=1) * 0.5 \
        + jnp.sum(x) * 1e-3


def test_reduces_give_the_interpreters_bits(record, monkeypatch):
    """A compiled loop's sums are numpy's, as the interpreter's reduce kernel's
    (loop_reduce.py): row sums of 100 (8 lanes and a rest), a maximum, a sum of
    everything -- jax's values, and the interpreter's bits."""
    args = (np.random.default_rng(8).standard_normal((6, 100)).astype(np.float32),
            np.zeros(6, np.float32))
    f = lambda x, t: lax.fori_loop(0, 40, _sums_body, (x, t))  # noqa: E731
    m, want = _module(f, *args)
    got = execute(m, list(args)).outputs
    assert record["compiled"] == [w.name for w in _whiles(m)]
    assert "RPP" in record["generated"][_whiles(m)[0].name].src  # numpy's pairwise program
    for g, w, i in zip(got, want, _interpreted(f, args, monkeypatch)):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(g.view(np.uint8), i.view(np.uint8))


def test_xla_optimized_loops_compile_with_their_fusions(record):
    """XLA's optimized HLO wraps the condition's compare (and body ops) in fusions: they are
    inlined into the compiled loop, from iteration 0 (its known_trip_count)."""
    f = CASES["fori_f32"][0]
    compiled = jax.jit(f).lower(X).compile()  # one XLA compile: its HLO and its values
    m = parse_module(compiled.as_text())
    compile_module(m, None)
    got = execute(m, [X]).outputs[0]
    assert record["compiled"] and record["runs"] == [m.entry.name]
    np.testing.assert_allclose(got, np.asarray(compiled(X)), rtol=1e-5, atol=1e-5)


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
    monkeypatch.setattr(CW.LoopCode, "ready", lambda self: True)
    entry = corpus.load_entry(name)
    m = parse_module(getattr(entry, f"{variant}_hlo"))
    compile_module(m, None, options={"loop-fusion": {"min_elements": 1}})
    out = execute(m, list(entry.inputs), fusion_min_elements=1).outputs
    assert not _check_outputs(name, out, list(entry.outputs))


def test_interpret_option_keeps_every_loop_and_fusion_interpreted(tmp_path, monkeypatch,
                                                                 record):
    """`xlaplug run --interpret` (execute(interpret=True)): same results, nothing compiled."""
    big = np.random.default_rng(3).standard_normal((256, 256)).astype(np.float32)
    f = lambda x: lax.fori_loop(0, 40, lambda i, v: v * 0.5 + 1.0, x * 2.0 + x)  # noqa: E731
    m, want = _module(f, big)
    from xlaplug.backends.cpu import fused_loop
    compiled = []
    monkeypatch.setattr(fused_loop, "compiled_loop_fn",
                        lambda comp, roles, **kw: compiled.append(roles))
    got = execute(m, [big], interpret=True).outputs[0]
    assert not compiled and record["generated"] == {} and record["compiled"] == []
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-6)
    from click.testing import CliRunner
    from xlaplug.cli.main import main
    path = tmp_path / "m.hlo"
    path.write_text(jax.jit(f).lower(big).as_text(dialect="hlo"))
    np.savez(tmp_path / "in.npz", in0=big)
    r = CliRunner().invoke(main, ["run", str(path), "--interpret", "--inputs",
                                  str(tmp_path / "in.npz"), "--out", str(tmp_path / "o.npz")])
    assert r.exit_code == 0, r.output
    np.testing.assert_allclose(np.load(tmp_path / "o.npz")["out0"], np.asarray(want), rtol=1e-6)


def test_sum_whose_partial_sum_is_subnormal_flushes_as_xla(record):
    """A compiled f32 sum runs its adds unflushed while no partial sum is subnormal; here one
    is (1.5e-38 - 1.4e-38), and XLA flushes it: 2e-38, not 2.1e-38, after the third add."""
    v = np.array([1.5e-38, -1.4e-38, 2e-38, 0.0], np.float32)
    f = lambda v, y: lax.fori_loop(0, 40, lambda i, s: (s[0], s[1] + jnp.sum(s[0]) * 1e30),  # noqa
                                   (v, y))
    args = (v, np.float32(0.0))
    m, want = _module(f, *args)
    got = execute(m, list(args)).outputs
    np.testing.assert_allclose(got[1], np.asarray(want[1]), rtol=1e-6)  # not 8.4e-7
    assert record["compiled"] == [w.name for w in _whiles(m)]
