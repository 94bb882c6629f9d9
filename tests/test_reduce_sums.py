"""The CPU reduce's compiled sums over a block of dimensions with a short kept block after it
(backends/cpu/reductions._leading_sums: a bias gradient's form): numpy's add.reduce bits,
but a column of -0.0 sums to +0.0 from the init 0, as XLA folds it; other forms stay
numpy's."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from xlaplug.backends.cpu import reductions  # noqa: E402
from xlaplug.hlo.text.parser import parse_module  # noqa: E402
from xlaplug.runtime.executor import ExecContext  # noqa: E402

pytestmark = pytest.mark.jax
RNG = np.random.default_rng(31)


def _sum(x: np.ndarray, dims, monkeypatch) -> tuple[np.ndarray, bool]:
    """x summed over `dims` by the reduce kernel (jax's lowering), and whether the compiled
    sums ran."""
    f = lambda v: v.sum(axis=dims)  # noqa: E731
    module = parse_module(jax.jit(f).lower(x).as_text(dialect="hlo"))
    ran = []
    real = reductions._leading_sums

    def spy(*a):
        r = real(*a)
        ran.append(r is not None)
        return r
    monkeypatch.setattr(reductions, "_leading_sums", spy)
    return np.asarray(ExecContext("cpu").run(module.entry, [x])), any(ran)


@pytest.mark.parametrize("shape,dims", [((16, 32, 32, 32), (0, 1, 2)), ((16, 16, 16, 64), (1, 2)),
                                        ((5, 1000, 2, 3), (1,)), ((3000, 2), (0,))])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_leading_sums_are_numpys_bits(shape, dims, dt, monkeypatch):
    x = RNG.standard_normal(shape).astype(dt)
    with jax.enable_x64(dt == np.float64):
        got, ran = _sum(x, dims, monkeypatch)
        want = np.asarray(jax.jit(lambda v: v.sum(axis=dims))(x))
    assert ran and got.dtype == dt
    np.testing.assert_array_equal(got, np.add.reduce(x, axis=dims))
    tol = 1e-5 if dt == np.float32 else 1e-13
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


def test_negative_zero_column_sums_to_xlas_zero(monkeypatch):
    x = RNG.standard_normal((64, 128, 8)).astype(np.float32)
    x[:, :, 3] = -0.0
    got, ran = _sum(x, (0, 1), monkeypatch)
    want = np.asarray(jax.jit(lambda v: v.sum(axis=(0, 1)))(x))
    assert ran and np.signbit(want[3]) == np.signbit(got[3]) and not np.signbit(got[3])


def test_other_forms_keep_numpys_reduce(monkeypatch):
    """A reduced innermost dimension (numpy's pairwise sum), a kept block too long, a
    reduced set with a gap: not the compiled sums."""
    for shape, dims in [((64, 128), (1,)), ((8, 8, 8192), (0, 1)), ((8, 64, 64), (0, 2))]:
        x = RNG.standard_normal(shape).astype(np.float32)
        got, ran = _sum(x, dims, monkeypatch)
        assert not ran
        np.testing.assert_array_equal(got, np.add.reduce(x, axis=dims))
