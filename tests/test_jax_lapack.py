"""The bundled jax_lapack plugin: JAX's CPU LAPACK custom calls, end to end.

Each case jits a jnp.linalg / jax.scipy.linalg / lax.linalg program, takes both its lowered
HLO (`lower().as_text(dialect="hlo")`) and XLA:CPU's compiled HLO (`compile().as_text()`),
runs each through the real pipeline (parse_module -> compile_module -> execute, with the
bundled plugins active) and compares every output leaf with what XLA:CPU (real LAPACK)
returned for the same inputs.

Tolerances (`_close`): integers (pivots, permutations, ranks) must be equal; floating
leaves use rtol = atol/scale = 1e-5 for f32/c64 outputs and 1e-12 for f64/c128 outputs,
scale = max(1, max |expected|), and NaNs must sit exactly where XLA's are.  Inputs are
well conditioned (condition numbers ~10), so these bound rounding only; the largest
errors seen are ~8e-7 (f32/c64) and ~1e-15 (f64/c128) on that scale.  potrf,
syevd/heevd, gesdd and geev go through numpy's wrappers of the very LAPACK routines and
match bit for bit in f32, f64 and c128; getrf, trsm, orgqr, ormqr, gehrd, sytrd, geqp3
and gtsv are numpy re-implementations of the reference algorithms (same pivots and
reflectors, different rounding); geqrf for f32/c64 and geev for c64 run LAPACK in
double and round (numpy has no single-precision loops for them).

Where LAPACK's answer is not unique and this plugin cannot reproduce XLA's choice, the
test compares up to that freedom instead (and says so): c64 geev's eigenvalue order
(zgeev may deflate in another order than cgeev; `_match_eig`), gesvd's singular vectors
(served by gesdd) up to a phase per singular pair, and geev's left eigenvectors of a
real matrix for complex-conjugate pairs up to sign.
"""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
import jax.scipy.linalg as jsl  # noqa: E402
from jax import lax  # noqa: E402

from xlaplug.driver import compile_module  # noqa: E402
from xlaplug.hlo import parse_module  # noqa: E402
from xlaplug.hlo.errors import HloError  # noqa: E402
from xlaplug.plugin import Session  # noqa: E402
from xlaplug.runner import execute  # noqa: E402

F32, F64, C64, C128 = np.float32, np.float64, np.complex64, np.complex128
TOL = {np.dtype(F32): 1e-5, np.dtype(C64): 1e-5, np.dtype(F64): 1e-12, np.dtype(C128): 1e-12}
VARIANTS = ("lowered", "compiled")


# ---- helpers -------------------------------------------------------------------------------

def _x64(dtype) -> bool:
    return np.dtype(dtype) in (np.dtype(F64), np.dtype(C128))


def _run_both(registry, f, args, dtype):
    """XLA's outputs, and ours (with the plugins of `registry`) for the lowered and the
    compiled HLO text."""
    args = [np.asarray(a) for a in args]
    with jax.enable_x64(_x64(dtype)):
        lowered = jax.jit(f).lower(*args)
        compiled = lowered.compile()
        want = [np.asarray(x) for x in jax.tree_util.tree_leaves(compiled(*args))]
        texts = {"lowered": lowered.as_text(dialect="hlo"), "compiled": compiled.as_text()}
    got = {}
    for variant, text in texts.items():
        assert "lapack_" in text, f"{variant} HLO has no LAPACK custom call"
        module = parse_module(text)
        compile_module(module, Session(registry))
        got[variant] = [np.asarray(x) for x in execute(module, args, Session(registry)).outputs]
        assert len(got[variant]) == len(want)
    return want, got


def _close(got, want, what: str):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, \
        f"{what}: {got.dtype}{got.shape} vs XLA's {want.dtype}{want.shape}"
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    tol = TOL[want.dtype]
    finite = want[np.isfinite(want)]
    scale = max(1.0, float(np.max(np.abs(finite)))) if finite.size else 1.0
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale, equal_nan=True,
                               err_msg=what)


def check(registry, f, args, dtype, eig_leaves=()):
    """Every output leaf close to XLA's.  `eig_leaves`: (values, vectors or None) index
    pairs of c64 geev results, compared up to eigenvalue order (see _match_eig)."""
    want, got = _run_both(registry, f, args, dtype)
    for variant in VARIANTS:
        outs = list(got[variant])
        if np.dtype(dtype) == np.dtype(C64):
            for wk, vk in eig_leaves:
                _match_eig(outs, want, wk, vk)
        for k, (g, w) in enumerate(zip(outs, want)):
            _close(g, w, f"{variant} output {k}")


def _match_eig(outs, want, wk, vk):
    """numpy has no complex64 geev loop, so c64 eig runs zgeev and rounds: the same
    eigenpairs, but the QR iteration may deflate them in another order than cgeev.
    Reorder ours (values, and vectors' columns) to XLA's before comparing."""
    w, ref = outs[wk], want[wk]
    flat_w, flat_ref = w.reshape(-1, w.shape[-1]), ref.reshape(-1, ref.shape[-1])
    perms = []
    for a, b in zip(flat_w, flat_ref):
        dist = np.abs(b[:, None] - a[None, :])
        perm = np.argmin(dist, axis=1)
        assert len(set(perm.tolist())) == len(perm), "eigenvalues do not pair up"
        perms.append(perm)
    perms = np.array(perms).reshape(w.shape)
    outs[wk] = np.take_along_axis(w, perms, axis=-1)
    if vk is not None:
        outs[vk] = np.take_along_axis(outs[vk], perms[..., None, :], axis=-1)


class Inputs:
    """Seeded, well-conditioned inputs of one dtype with leading batch dims."""

    def __init__(self, dtype, batch=(), seed=0):
        self.dtype, self.batch = np.dtype(dtype), tuple(batch)
        self.rng = np.random.default_rng(seed)

    def rand(self, *shape):
        s = self.batch + shape
        x = self.rng.standard_normal(s)
        if self.dtype.kind == "c":
            x = x + 1j * self.rng.standard_normal(s)
        return x.astype(self.dtype)

    def general(self, n):
        return (self.rand(n, n) + n * np.eye(n)).astype(self.dtype)

    def hermitian(self, n):
        x = self.rand(n, n)
        return ((x + np.swapaxes(x, -1, -2).conj()) / 2).astype(self.dtype)

    def spd(self, n):
        x = self.rand(n, n)
        return (x @ np.swapaxes(x, -1, -2).conj() + n * np.eye(n)).astype(self.dtype)

    def low_rank(self, m, n, r):
        return (self.rand(m, r) @ self.rand(r, n)).astype(self.dtype)


def _maybe_vmap(f, batch):
    for _ in batch:
        f = jax.vmap(f)
    return f


# ---- the jnp.linalg / jax.scipy.linalg functions, every dtype, batched and not -------------

# name -> (function, inputs, needs vmap for batches)
FUNCTIONS = {
    "cholesky": (jnp.linalg.cholesky, lambda g: (g.spd(4),), False),
    "inv": (jnp.linalg.inv, lambda g: (g.general(4),), False),
    "solve": (jnp.linalg.solve, lambda g: (g.general(4), g.rand(4, 2)), False),
    "det": (jnp.linalg.det, lambda g: (g.general(4),), False),
    "slogdet": (jnp.linalg.slogdet, lambda g: (g.general(4),), False),
    "eigh": (jnp.linalg.eigh, lambda g: (g.hermitian(4),), False),
    "eigvalsh": (jnp.linalg.eigvalsh, lambda g: (g.hermitian(4),), False),
    "qr": (lambda x: (*jnp.linalg.qr(x), *jnp.linalg.qr(jnp.swapaxes(x, -1, -2), mode="complete")),
           lambda g: (g.rand(5, 3),), False),
    "svd": (lambda x: (*jnp.linalg.svd(x, full_matrices=False), *jnp.linalg.svd(x)),
            lambda g: (g.rand(5, 3),), False),
    "pinv": (jnp.linalg.pinv, lambda g: (g.rand(5, 3),), False),
    "lstsq": (jnp.linalg.lstsq, lambda g: (g.rand(5, 3), g.rand(5, 2)), True),
    "matrix_rank": (jnp.linalg.matrix_rank, lambda g: (g.low_rank(5, 4, 2),), False),
    "eig": (jnp.linalg.eig, lambda g: (g.general(4),), False),
    "lu": (jsl.lu, lambda g: (g.general(4),), True),
    "lu_factor": (jsl.lu_factor, lambda g: (g.general(4),), True),
    "solve_triangular": (lambda a, b: (jsl.solve_triangular(a, b, lower=True),
                                       jsl.solve_triangular(a, b, trans=2, unit_diagonal=True)),
                         lambda g: (g.general(4), g.rand(4, 2)), False),
    "cho_solve": (lambda a, b: jsl.cho_solve(jsl.cho_factor(a, lower=True), b),
                  lambda g: (g.spd(4), g.rand(4, 2)), False),
}

# Each precision and each of real/complex is seen batched and unbatched.
DTYPES = [(F32, ()), (F64, (2,)), (C64, (2, 2)), (C128, ())]


@pytest.mark.parametrize("dtype,batch", DTYPES, ids=["f32", "f64-batched", "c64-batched",
                                                      "c128"])
@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_linalg_function_matches_xla(lapack, name, dtype, batch):
    f, inputs, vmap = FUNCTIONS[name]
    g = Inputs(dtype, batch, seed=len(name))
    check(lapack, _maybe_vmap(f, batch) if vmap else f, inputs(g), dtype,
          eig_leaves=[(0, 1)] if name == "eig" else ())


# ---- the other targets and the attributes' corners ---------------------------------------

@pytest.mark.parametrize("dtype", [F32, C128], ids=["f32", "c128"])
def test_triangular_solve_every_flag(lapack, dtype):
    """side x uplo x trans_x (N/T/C) x diag, one program (complex: conjugate too)."""
    conj = (False, True) if np.dtype(dtype).kind == "c" else (False,)
    flags = [(s, lo, t, c, u) for s in (True, False) for lo in (True, False)
             for t in (False, True) for c in conj for u in (False, True)]

    def f(a, b):
        return tuple(lax.linalg.triangular_solve(
            a, b if s else jnp.swapaxes(b, -1, -2), left_side=s, lower=lo, transpose_a=t,
            conjugate_a=c, unit_diagonal=u) for s, lo, t, c, u in flags)
    g = Inputs(dtype, (2,), seed=1)
    check(lapack, f, (g.general(4), g.rand(4, 3)), dtype)


@pytest.mark.parametrize("dtype", [F64, C64], ids=["f64", "c64"])
def test_qr_family_other_targets(lapack, dtype):
    """geqp3 (pivoting QR, tall and wide), ormqr/unmqr (all four side/transpose
    combinations, qr_multiply) and gehrd + orgqr (hessenberg with Q)."""
    def f(a, c):
        out = [*jsl.qr(a, pivoting=True), *jsl.qr(a[:3], pivoting=True, mode="economic")]
        h, taus = jnp.linalg.qr(a, mode="raw")
        for left in (True, False):
            for tr in (True, False):
                out.append(lax.linalg.ormqr(h.mT, taus, c if left else c.mT, left=left,
                                            transpose=tr))
        out += [*jsl.qr_multiply(a, c[:, 0]), *jsl.hessenberg(a, calc_q=True)]
        return tuple(out)
    g = Inputs(dtype, seed=2)
    check(lapack, f, (g.rand(5, 5), g.rand(5, 2)), dtype)


@pytest.mark.parametrize("dtype", [F32, C128], ids=["f32", "c128"])
def test_geqp3_with_fixed_columns(lapack, dtype):
    """jpvt != 0 marks columns dgeqp3 moves to the front and factors unpivoted (jax's own
    callers pass zeros; the primitive takes any jpvt)."""
    from jax._src.lax.linalg import geqp3  # the primitive; no public wrapper takes jpvt
    g = Inputs(dtype, (3,), seed=8)
    jpvt = np.array([[0, 0, 0, 0], [0, 1, 0, 1], [1, 1, 1, 1]], np.int32)
    check(lapack, geqp3, (g.rand(5, 4), jpvt), dtype)
    check(lapack, geqp3, (g.rand(2, 4), jpvt), dtype)


@pytest.mark.parametrize("dtype", [F32, C128], ids=["f32", "c128"])
def test_tridiagonal_reduction_and_solve(lapack, dtype):
    """sytrd/hetrd with both triangles; gtsv, batched."""
    def f(a, dl, d, du, b):
        return (*lax.linalg.tridiagonal(a, lower=True), *lax.linalg.tridiagonal(a, lower=False),
                lax.linalg.tridiagonal_solve(dl, d, du, b))
    g = Inputs(dtype, (2,), seed=3)
    dl, du = g.rand(6), g.rand(6)
    dl[..., 0] = 0
    du[..., -1] = 0
    check(lapack, f, (g.hermitian(5), dl, g.rand(6), du, g.rand(6, 2)), dtype)


@pytest.mark.parametrize("dtype", [F32, C64], ids=["f32", "c64"])
def test_svd_values_only_both_declared_shapes(lapack, dtype):
    """gesdd jobz='N': jax declares u/vt full (svd, norm) or economy (matrix_rank)."""
    def f(x):
        return (jnp.linalg.svd(x, compute_uv=False), jnp.linalg.matrix_rank(x),
                jnp.linalg.norm(x, 2), jnp.linalg.cond(x[:3]), jnp.linalg.eigvals(x[:3, :3]))
    check(lapack, f, (Inputs(dtype, seed=4).rand(5, 3),), dtype, eig_leaves=[(4, None)])


@pytest.mark.parametrize("dtype", [F64, C64], ids=["f64", "c64"])
def test_lu_rectangular_and_eigh_upper(lapack, dtype):
    """getrf on wide and tall batches; syevd/heevd reading only the upper triangle."""
    def f(w, t, a):
        return (*lax.linalg.lu(w), *lax.linalg.lu(t),
                *jnp.linalg.eigh(a, UPLO="U", symmetrize_input=False))
    g = Inputs(dtype, (2,), seed=5)
    check(lapack, f, (g.rand(3, 5), g.rand(5, 3), g.rand(4, 4)), dtype)


@pytest.mark.parametrize("dtype", [F64, C64], ids=["f64", "c64"])
def test_gesvd_up_to_phase(lapack, dtype):
    """lax.linalg.svd(algorithm=QR) emits ?gesvd, served by ?gesdd: singular values and
    reconstructions match; singular vectors match up to one phase per singular pair."""
    def f(x):
        qr = lax.linalg.SvdAlgorithm.QR
        return (*lax.linalg.svd(x, full_matrices=False, algorithm=qr),
                *lax.linalg.svd(x, full_matrices=True, algorithm=qr))
    x = Inputs(dtype, seed=6).rand(5, 3)
    want, got = _run_both(lapack, f, (x,), dtype)
    for variant in VARIANTS:
        u, s, vh, _, s_full, _ = got[variant]
        _close(s, want[1], f"{variant} s")
        _close(s_full, want[4], f"{variant} s (full)")
        _close((u * s) @ vh, x, f"{variant} U S Vh")
        phase = np.sum(want[0].conj() * u, axis=0)
        phase = phase / np.abs(phase)
        _close(u * phase.conj(), want[0], f"{variant} U up to phase")
        _close(vh * phase[:, None], want[2], f"{variant} Vh up to phase")


@pytest.mark.parametrize("dtype", [F64, C128], ids=["f64", "c128"])
def test_eig_left_eigenvectors(lapack, dtype):
    """geev with compute_left='V'.  Complex input: all of XLA's outputs.  Real input:
    eigenvalues, right vectors and real-eigenvalue left vectors are XLA's; for a complex
    pair the left vector is XLA's up to sign (dgeev's rotation sign is not reproduced)."""
    rng = np.random.default_rng(7)
    q = np.linalg.qr(rng.standard_normal((5, 5)))[0]
    x = q @ np.diag([3.0, -2.0, 1.0, 0.5, -0.25]) @ q.T    # real spectrum
    x[0, 1] += 1.5                                         # a little non-normal
    x[1, 0] -= 1.5                                         # and a complex pair
    if np.dtype(dtype).kind == "c":
        x = x + 0.3j * rng.standard_normal((5, 5))
    x = x.astype(dtype)

    def f(a):
        return lax.linalg.eig(a, compute_left_eigenvectors=True)
    want, got = _run_both(lapack, f, (x,), dtype)
    for variant in VARIANTS:
        w, vl, vr = got[variant]
        _close(w, want[0], f"{variant} w")
        _close(vr, want[2], f"{variant} vr")
        _close(vl.conj().T @ x, w[:, None] * vl.conj().T, f"{variant} vl^H A = w vl^H")
        flip = np.sign(np.sum(vl.conj() * want[1], axis=0).real)
        if np.dtype(dtype).kind == "c":
            assert (flip > 0).all()
        else:
            assert (flip[want[0].imag == 0] > 0).all(), "real eigenvalue: sign differs"
            assert (want[0].imag != 0).any()
        _close(vl * flip, want[1], f"{variant} vl (up to sign for complex pairs)")


@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
def test_failures_give_xla_nans_and_info(lapack, dtype):
    """Non-positive-definite potrf, singular getrf (info > 0 but a result), non-finite
    geev (info -4) and gesdd, NaN in syevd: NaNs and values exactly where XLA puts them."""
    def f(notpd, sing, bad, inf):
        return (jnp.linalg.cholesky(notpd), jnp.linalg.det(sing), *jsl.lu_factor(sing),
                jnp.linalg.slogdet(sing)[0], jnp.linalg.eigvals(bad), jnp.linalg.svd(bad),
                jnp.linalg.eigh(bad), jnp.linalg.eig(inf), jnp.linalg.svd(inf),
                jnp.linalg.svd(inf, compute_uv=False), jnp.linalg.eigh(inf))
    notpd = np.array([[1, 2, 0], [2, 1, 0], [0, 0, 1]], dtype)
    sing = np.array([[1, 2, 3], [2, 4, 6], [1, 0, 1]], dtype)
    bad = np.array([[1, np.nan, 0], [0, 1, 0], [0, 0, np.inf]], dtype)
    inf = np.array([[1, 2, 0], [0, 1, 0], [0, 0, np.inf]], dtype)
    check(lapack, f, (notpd, sing, bad, inf), dtype)


# ---- the plugin itself ---------------------------------------------------------------------

def test_every_target_has_a_shape_rule_kernel_and_example(lapack):
    plugin = next(p for p in lapack.plugins if p.name == "jax_lapack")
    targets = {op for op, _ in plugin.kernels}
    for p in "sdcz":
        for r in ("potrf", "getrf", "trsm", "geqrf", "geqp3", "gesdd", "gesvd", "geev",
                  "gehrd", "gtsv"):
            assert f"lapack_{p}{r}_ffi" in targets
    for r in ("ssyevd", "dsyevd", "cheevd", "zheevd", "sorgqr", "dorgqr", "cungqr", "zungqr",
              "sormqr", "dormqr", "cunmqr", "zunmqr", "ssytrd", "dsytrd", "chetrd", "zhetrd"):
        assert f"lapack_{r}_ffi" in targets
    for op in targets:
        assert op in plugin.shapes
        assert len(plugin.kernels[(op, "cpu")].examples) >= 1


def test_check_plugins_runs_every_example(lapack):
    from xlaplug.plugin.check import check_plugins
    plugin = next(p for p in lapack.plugins if p.name == "jax_lapack")
    ops = sorted({op for op, _ in plugin.kernels})
    results = check_plugins(Session(lapack), ops, trials=1)
    assert len(results) == len(ops)
    assert all(r.ok for r in results), [(r.op, r.detail) for r in results if not r.ok]


def test_shape_rule_rejects_a_mistyped_call(lapack):
    with jax.enable_x64(False):
        text = jax.jit(jnp.linalg.cholesky).lower(np.eye(3, dtype=F32)).as_text(dialect="hlo")
    module = parse_module(text.replace("lapack_spotrf_ffi", "lapack_dpotrf_ffi"))
    with pytest.raises(HloError, match=r"lapack_dpotrf_ffi: operand must be a f64"):
        compile_module(module, Session(lapack))
