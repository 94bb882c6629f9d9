"""A scan step in a compiled loop: its matrix-times-vector dot over a matrix the loop never changes
(backends/cpu/loop_matvec.py): vector code over the matrix transposed once per run.  Its
sums are in its own order (two chains of vector multiply-adds), so results are compared
with jax within rounding, and with the sum in f64."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numba
import numpy as np
import pytest
from jax import lax

from xlaplug.backends.cpu import compiled_while as CW
from xlaplug.backends.cpu.loop_matvec import matvec_t
from xlaplug.hlo import parse_module
from xlaplug.runtime.driver import compile_module
from xlaplug.runtime.runner import execute

R = np.random.default_rng(11)


def _rnn(h, xs, w):
    return lax.scan(lambda c, x: (jnp.tanh(w @ c + x), c.sum()), h, xs)


def _const_w(h):  # the matrix a constant of the module, f64
    w = np.linspace(-0.3, 0.3, 6 * 10).reshape(6, 10)
    return lax.fori_loop(0, 30, lambda i, v: jnp.tanh(jnp.concatenate([w @ v, v[:-6]])), h)


def _odd_k(h, w):  # 12 sums of 9 terms
    return lax.fori_loop(0, 30, lambda i, v: jnp.tanh(w @ v)[:9] + 0.01, (h))


CASES = {
    # f32, 24 outputs (vectors of 8 lanes)
    "leaf_f32": (_rnn, (R.standard_normal(24).astype(np.float32) * 0.5,
                        R.standard_normal((60, 24)).astype(np.float32),
                        R.standard_normal((24, 24)).astype(np.float32) * 0.2)),
    # f32 64 x 64, as the benchmark's scan; an odd number of terms below
    "leaf_64": (_rnn, (R.standard_normal(64).astype(np.float32),
                       R.standard_normal((30, 64)).astype(np.float32),
                       R.standard_normal((64, 64)).astype(np.float32) * 0.125)),
    "leaf_odd_k": (_odd_k, (R.standard_normal(9).astype(np.float32),
                            R.standard_normal((12, 9)).astype(np.float32) * 0.3)),
    "const_f64": (_const_w, (R.standard_normal(10),)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_invariant_matvec_is_vector_code_and_matches_jax(name, monkeypatch):
    with jax.enable_x64(name.endswith("f64")):  # scoped: never clobbers another file's setting
        f, args = CASES[name]
        text = jax.jit(f).lower(*args).as_text(dialect="hlo")
        want = jax.jit(f)(*args)
    m = parse_module(text)
    compile_module(m, None)
    (loop,) = [i for c in m.computations for i in c.instructions if i.opcode == "while"]
    assert "_matvec_t(" in CW.generate(loop).src.split("def body")[1]
    got = execute(m, list(args)).outputs
    for g, w in zip(got, jax.tree_util.tree_leaves(want)):
        w = np.asarray(w)
        tol = 1e-12 if w.dtype == np.float64 else 3e-6
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("n,k", [(64, 64), (8, 3), (96, 17), (4, 1)])
def test_matvec_t_sums_every_term(dt, n, k):
    """out = x @ wt for the shapes' vector widths, blocks and odd k, against an f64 sum."""
    @numba.njit
    def call(wt, x, out):
        matvec_t(wt, x, out, n, k)
    wt = R.standard_normal(n * k).astype(dt)
    x = R.standard_normal(k).astype(dt)
    out = np.full(n, np.nan, dt)
    call(wt, x, out)
    want = x.astype(np.float64) @ wt.astype(np.float64).reshape(k, n)
    np.testing.assert_allclose(out, want, rtol=1e-5 if dt == np.float32 else 1e-13,
                               atol=1e-5 if dt == np.float32 else 1e-13)


def test_a_sum_of_tanh_in_a_scan_step_gives_the_interpreters_bits(monkeypatch):
    """An RNN step's tanh feeds its sum: tanh of a flushed value holds no subnormal
    (loop_daz), so the fold loads it unflushed -- the interpreter's bits all the same, with
    state values at the smallest normals, subnormals, and around tanh's |x| = 0.0004."""
    def f(h, w):
        return lax.scan(lambda c, x: (jnp.tanh(w @ c * x + c * 0.5), jnp.tanh(c * 1.0).sum()),
                        h, jnp.linspace(0.5, 1.0, 40, dtype=jnp.float32))
    h = np.array([1.2e-38, -1.1754944e-38, 1e-40, -3e-42, 3.9e-4, 4e-4, -4.1e-4, 0.3] * 2,
                 np.float32)
    w = (np.eye(16) * 0.01).astype(np.float32)
    m = parse_module(jax.jit(f).lower(h, w).as_text(dialect="hlo"))
    compile_module(m, None)
    (loop,) = [i for c in m.computations for i in c.instructions if i.opcode == "while"]
    got = execute(m, [h, w]).outputs
    monkeypatch.setattr(CW, "_switch_at", lambda ctx, ins, state: -1)
    m2 = parse_module(jax.jit(f).lower(h, w).as_text(dialect="hlo"))
    compile_module(m2, None)
    want = execute(m2, [h, w]).outputs
    for g, i in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g).view(np.uint32), np.asarray(i).view(np.uint32))
