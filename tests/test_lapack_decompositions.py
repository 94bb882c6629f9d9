"""jax_lapack's decompositions (issue 26): jnp.linalg programs, which jax lowers on CPU to
`lapack_*_ffi` custom calls, decompose into core HLO; xlaplug runs them with the
decompositions (`prefer="decomposition"`), XLA:CPU runs the `--decompose-all` artifact,
and both agree with jax (real LAPACK) at the stated tolerances.

Tolerances: rtol = atol = 1e-4 (f32) / 1e-10 (f64), relative to max(1, |expected|): the
decompositions are the unblocked algorithms, LAPACK the blocked ones, on matrices n <= 6
with condition numbers ~10.  Results unique only up to a sign or phase per column
(eigenvectors, singular vectors, Q's columns when R's diagonal sign differs) are compared
through what is unique: reconstructions, orthogonality and sorted eigen/singular values.
"""
import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
import jax.scipy.linalg as jsl  # noqa: E402

import xlaplug  # noqa: E402
from xlaplug.xla.xla_executables import run_on_xla_cpu  # noqa: E402

pytestmark = pytest.mark.jax
TOL = {np.float32: 1e-4, np.float64: 1e-10, np.complex64: 1e-4, np.complex128: 1e-10}


def spd(n, dtype, seed=0, batch=()):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((*batch, n, n))
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal((*batch, n, n))
    a = x @ np.conj(np.swapaxes(x, -1, -2)) + n * np.eye(n)
    return a.astype(dtype)


def general(shape, dtype, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    n = shape[-1]
    if shape[-2] == n:
        x = x + n * np.eye(n)
    return x.astype(dtype)


def three_ways(f, *args):
    """(jax's outputs, xlaplug's with the decompositions, XLA:CPU's of the artifact)."""
    with jax.enable_x64(True):
        text = jax.jit(f).lower(*args).as_text(dialect="hlo")
        want = [np.asarray(w) for w in jax.tree_util.tree_leaves(jax.jit(f)(*args))]
    assert "lapack_" in text
    exe = xlaplug.compile(text, prefer="decomposition")
    assert all(s.via == "decomposition" for s in exe.plugins) and exe.plugins
    ours = exe(*args)
    art = xlaplug.compile(text, decompose_all=True).hlo
    assert "custom-call" not in art and "fusion" not in art
    theirs = run_on_xla_cpu(art, [list(args)], what="test")[0]
    return want, list(ours), theirs


def close(got, want, dtype):
    tol = TOL[dtype]
    scale = max(1.0, float(np.max(np.abs(want)))) if np.size(want) else 1.0
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


CASES = {
    "cholesky": (jnp.linalg.cholesky, lambda d: (spd(5, d, batch=(2,)),)),
    "cholesky_upper": (lambda a: jsl.cholesky(a, lower=False), lambda d: (spd(4, d),)),
    "solve": (jnp.linalg.solve, lambda d: (general((4, 4), d), general((4, 2), d, 2))),
    "inv": (jnp.linalg.inv, lambda d: (general((2, 5, 5), d),)),
    "slogdet": (lambda a: jnp.linalg.slogdet(a), lambda d: (general((5, 5), d),)),
    "triangular_solve": (lambda a, b: jsl.solve_triangular(a, b, lower=False, trans=1),
                         lambda d: (general((4, 4), d), general((4, 3), d, 3))),
    "lu": (lambda a: jsl.lu(a), lambda d: (general((5, 3), d),)),
    # singular values only, u and vt declared economy-size: the decomposition reads them
    "matrix_rank": (jnp.linalg.matrix_rank, lambda d: (
        (general((5, 2), d, 12) @ general((2, 4), d, 13)).astype(d),)),
    "tridiagonal_solve": (jax.lax.linalg.tridiagonal_solve, lambda d: tuple(
        general((5, 1), d, k)[:, 0] * (3 if k == 5 else 1) for k in (4, 5, 6)) + (
        general((5, 2), d, 7),)),
    # LAPACK's reflectors are the decomposition's too, so Q and R match as they are.
    "qr": (jnp.linalg.qr, lambda d: (general((2, 5, 3), d),)),
    "qr_complete": (lambda a: jnp.linalg.qr(a, mode="complete"), lambda d: (general((3, 4), d),)),
    "qr_pivoting": (lambda a: jsl.qr(a, pivoting=True, mode="economic"),
                    lambda d: (general((5, 4), d, 9),)),
}


@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=["f32", "c128"])
@pytest.mark.parametrize("name", list(CASES))
def test_unique_results_match_jax_in_xlaplug_and_on_xla_cpu(name, dtype):
    f, make = CASES[name]
    args = make(dtype)
    want, ours, theirs = three_ways(f, *args)
    assert len(want) == len(ours) == len(theirs)
    for w, o, t in zip(want, ours, theirs):
        close(o, w, dtype)
        close(t, w, dtype)


def hermitian(n, dtype, seed=4, batch=()):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((*batch, n, n))
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal((*batch, n, n))
    return (x + np.conj(np.swapaxes(x, -1, -2))).astype(dtype)


def check_eigh(a, w, v, want_w, dtype):
    """Eigenvalues ascending as jax's; A V = V diag(w); V unitary."""
    tol = TOL[dtype] * 10
    close(w, want_w, dtype)
    np.testing.assert_allclose(a @ v, v * w[..., None, :], atol=tol * np.abs(a).max())
    eye = np.broadcast_to(np.eye(a.shape[-1]), a.shape)
    np.testing.assert_allclose(np.conj(np.swapaxes(v, -1, -2)) @ v, eye, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64],
                         ids=["f32", "f64", "c64"])
def test_eigh_decomposes_up_to_eigenvector_signs(dtype):
    a = hermitian(5, dtype, batch=(2,))
    (want_w, want_v), ours, theirs = (lambda r: ((r[0][0], r[0][1]), r[1], r[2]))(
        three_ways(lambda x: tuple(jnp.linalg.eigh(x)), a))
    for w, v in (ours, theirs):
        check_eigh(a, w, v, want_w, dtype)


def test_eigvalsh_reads_the_upper_triangle_only():
    a = hermitian(4, np.float64)
    junk = a + np.tril(np.full((4, 4), 7.0), -1)  # the unread triangle
    # (jnp.linalg symmetrizes its input first; lax's eigh can leave that to LAPACK)
    f = lambda x: jax.lax.linalg.eigh(x, lower=False, symmetrize_input=False)[1]  # noqa: E731
    want, ours, theirs = three_ways(f, junk)
    close(want[0], np.linalg.eigvalsh(a), np.float64)
    close(ours[0], want[0], np.float64)
    close(theirs[0], want[0], np.float64)


def check_svd(a, s, u, vt, want_s, dtype, full):
    """Singular values as jax's; A = U_k diag(s) Vt_k; U, Vt with orthonormal columns/rows."""
    tol = TOL[dtype] * 10
    k = s.shape[-1]
    close(s, want_s, dtype)
    rebuilt = (u[..., :, :k] * s[..., None, :]) @ vt[..., :k, :]
    np.testing.assert_allclose(rebuilt, a, atol=tol * np.abs(a).max())
    for m in (u, np.conj(np.swapaxes(vt, -1, -2))):
        np.testing.assert_allclose(np.conj(np.swapaxes(m, -1, -2)) @ m,
                                   np.broadcast_to(np.eye(m.shape[-1]), m.shape[:-2] +
                                                   (m.shape[-1],) * 2), atol=tol)
    if full:
        assert u.shape[-1] == u.shape[-2] and vt.shape[-1] == vt.shape[-2]


@pytest.mark.parametrize("shape,full,dtype", [((5, 3), False, np.float32),
                                              ((2, 3, 4), True, np.float64),
                                              ((4, 3), True, np.complex64)],
                         ids=["f32-5x3-econ", "f64-batch-3x4-full", "c64-4x3-full"])
def test_svd_decomposes_up_to_singular_vector_phases(shape, full, dtype):
    a = general(shape, dtype, seed=5)
    want, ours, theirs = three_ways(lambda x: tuple(jnp.linalg.svd(x, full_matrices=full)), a)
    want_s = want[1]
    for u, s, vt in (ours, theirs):
        check_svd(a, s, u, vt, want_s, dtype, full)


def test_singular_values_only_and_pinv():
    a = general((4, 6), np.float32, seed=6)
    want, ours, theirs = three_ways(lambda x: jnp.linalg.svd(x, compute_uv=False), a)
    close(ours[0], want[0], np.float32)
    close(theirs[0], want[0], np.float32)
    want, ours, theirs = three_ways(jnp.linalg.pinv, a)
    close(ours[0], want[0], np.float32)
    close(theirs[0], want[0], np.float32)


@pytest.mark.parametrize("dtype", [np.float64, np.complex64], ids=["f64", "c64"])
def test_hessenberg_and_tridiagonal_reductions_match_lapacks_representation(dtype):
    a = general((2, 5, 5), dtype, seed=7)
    for f in (lambda x: jax.lax.linalg.hessenberg(x),
              lambda x: jax.lax.linalg.tridiagonal(x, lower=True),
              lambda x: jax.lax.linalg.tridiagonal(x, lower=False)):
        want, ours, theirs = three_ways(f, a)
        for w, o, t in zip(want, ours, theirs):
            close(o, w, dtype)
            close(t, w, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=["f32", "c128"])
def test_eig_decomposes_with_left_and_right_vectors(dtype):
    """Eigenvalues (sorted) as jax's; A vr = vr diag(w), vl^H A = diag(w) vl^H, unit norm:
    the order and each vector's phase are not unique."""
    a = general((2, 5, 5), dtype, seed=11) - 5 * np.eye(5, dtype=dtype)
    f = lambda x: tuple(jax.lax.linalg.eig(x, compute_left_eigenvectors=True))  # noqa: E731
    want, ours, theirs = three_ways(f, a)
    tol = TOL[dtype] * 20
    key = lambda w: np.sort_complex(np.round(w, 3))  # noqa: E731
    for w, vl, vr in (ours, theirs):
        np.testing.assert_allclose(key(w), key(want[0]), atol=tol * 10)
        np.testing.assert_allclose(a @ vr, vr * w[..., None, :], atol=tol * 10)
        vh = np.conj(np.swapaxes(vl, -1, -2))
        np.testing.assert_allclose(vh @ a, w[..., :, None] * vh, atol=tol * 10)
        for v in (vl, vr):
            np.testing.assert_allclose(np.linalg.norm(v, axis=-2), 1, atol=tol)
