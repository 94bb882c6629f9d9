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
from xlaplug.xla.jaxlib_names import run_on_xla_cpu  # noqa: E402

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


def custom_call(target, operands, result, attrs=""):
    params = "\n".join(f"  p{k} = {s} parameter({k})" for k, s in enumerate(operands))
    names = ", ".join(f"p{k}" for k in range(len(operands)))
    layouts = ", ".join(operands)
    return (f"HloModule m\nENTRY e {{\n{params}\n  ROOT r = {result} custom-call({names}), "
            f"custom_call_target=\"{target}\", operand_layout_constraints={{{layouts}}}, "
            f"api_version=API_VERSION_TYPED_FFI{attrs}\n}}\n")


def _failing_cases():
    bad_spd = np.diag([1.0, 2.0, -1.0, 3.0]).astype(np.float32)       # 3rd minor < 0
    zero_col = general((4, 4), np.float64, seed=8)
    zero_col[:, 1] = 0                                                 # zero pivot at 2
    dl = np.array([0, 0, 1, 1], np.complex64)                          # d[0] = dl[1] = 0
    d = np.array([0, 1, 2, 3], np.complex64)
    du = np.array([1, 1, 1, 0], np.complex64)
    rhs = np.ones((4, 1), np.complex64)
    return {
        "potrf": (custom_call("lapack_spotrf_ffi", ["f32[4,4]{0,1}"], "(f32[4,4]{0,1}, s32[])",
                              ", backend_config={uplo = 76 : ui8}"), [bad_spd], 3),
        "getrf": (custom_call("lapack_dgetrf_ffi", ["f64[4,4]{0,1}"],
                              "(f64[4,4]{0,1}, s32[4]{0}, s32[])"), [zero_col], 2),
        "gtsv": (custom_call("lapack_cgtsv_ffi", ["c64[4]{0}"] * 3 + ["c64[4,1]{0,1}"],
                             "(c64[4]{0}, c64[4]{0}, c64[4]{0}, c64[4,1]{0,1}, s32[])"),
                 [dl, d, du, rhs], 1),
    }


@pytest.mark.parametrize("name", ["potrf", "getrf", "gtsv"])
def test_failed_factorizations_give_lapacks_info_and_the_kernels_outputs(name):
    text, args, info = _failing_cases()[name]
    kernel = xlaplug.compile(text)(*args)
    decomposed = xlaplug.compile(text, prefer="decomposition")(*args)
    artifact = run_on_xla_cpu(xlaplug.compile(text, decompose_all=True).hlo, [args],
                              what="test")[0]
    # XLA:CPU's own LAPACK call: jaxlib fills in its LAPACK routines on the first jax
    # program that needs them (before that, a lapack_*_ffi call crashes XLA:CPU).
    jnp.linalg.cholesky(jnp.eye(2)).block_until_ready()
    lapack = run_on_xla_cpu(text, [args], what="test")[0]
    assert int(lapack[-1]) == info and int(kernel[-1]) == info
    for outs in (decomposed, artifact):
        assert int(outs[-1]) == info
        for k, o in zip(kernel, outs):
            np.testing.assert_allclose(o, k, rtol=1e-5, atol=1e-6, equal_nan=True)


def test_geqp3_fixed_columns_as_lapack_exchanges_them():
    """Columns whose jpvt is nonzero go first, by dgeqp3's exchange (not a stable sort)."""
    text = custom_call("lapack_dgeqp3_ffi", ["f64[4,4]{0,1}", "s32[4]{0}"],
                       "(f64[4,4]{0,1}, s32[4]{0}, f64[4]{0})")
    args = [general((4, 4), np.float64, seed=10), np.array([0, 1, 0, 1], np.int32)]
    jnp.linalg.cholesky(jnp.eye(2)).block_until_ready()  # jaxlib's LAPACK, filled in
    lapack = run_on_xla_cpu(text, [args], what="test")[0]
    assert lapack[1].tolist() == [2, 4, 3, 1]
    for outs in (xlaplug.compile(text, prefer="decomposition")(*args),
                 run_on_xla_cpu(xlaplug.compile(text, decompose_all=True).hlo, [args],
                                what="test")[0]):
        assert outs[1].tolist() == [2, 4, 3, 1]
        for o, w in zip(outs, lapack):
            close(o, w, np.float64)


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


def _check_plugins_json(*args):
    import json

    from click.testing import CliRunner

    from xlaplug.cli import main
    r = CliRunner().invoke(main, ["check-plugins", "jax_lapack", "--json", *args])
    return r.exit_code, json.loads(r.output)


def test_check_plugins_jax_lapack_compares_every_kernel_with_its_decomposition():
    code, obj = _check_plugins_json("--trials", "1")
    assert code == 0 and obj["ok"]
    assert len({r["op"] for r in obj["results"]}) == 56
    assert all(r["detail"] == "kernel matches decomposition" for r in obj["results"])


@pytest.mark.slow
def test_xla_cpu_runs_every_decomposition_to_the_kernels_values():
    code, obj = _check_plugins_json("--trials", "1", "--reference", "xla")
    assert code == 0, [r for r in obj["results"] if not r["ok"]]
    assert len(obj["results"]) == 56
    assert all(r["detail"] == "kernel matches decomposition on XLA:CPU" for r in obj["results"])


EDGE_CASES = [  # (target, operands, result, attributes): empty and 1x1 matrices
    ("lapack_spotrf_ffi", ["f32[0,0]{0,1}"],
     "(f32[0,0]{0,1}, s32[])", ", backend_config={uplo = 76 : ui8}"),
    ("lapack_sgetrf_ffi", ["f32[3,0]{0,1}"], "(f32[3,0]{0,1}, s32[0]{0}, s32[])", ""),
    ("lapack_sgeqrf_ffi", ["f32[0,3]{0,1}"], "(f32[0,3]{0,1}, f32[0]{0})", ""),
    ("lapack_ssyevd_ffi", ["f32[0,0]{0,1}"],
     "(f32[0,0]{0,1}, f32[0]{0}, s32[])", ", backend_config={mode = 86 : ui8, uplo = 76 : ui8}"),
    ("lapack_sgesdd_ffi", ["f32[0,3]{0,1}"],
     "(f32[0,3]{0,1}, f32[0]{0}, f32[0,0]{0,1}, f32[3,3]{0,1}, s32[])",
     ", backend_config={mode = 65 : ui8}"),
    ("lapack_sgesdd_ffi", ["f32[2,3,1]{1,2,0}"],
     "(f32[2,3,1]{1,2,0}, f32[2,1]{1,0}, f32[2,3,3]{1,2,0}, f32[2,1,1]{1,2,0}, s32[2]{0})",
     ", backend_config={mode = 65 : ui8}"),
    ("lapack_sgeev_ffi", ["f32[0,0]{0,1}"],
     "(f32[0]{0}, f32[0]{0}, c64[0,0]{0,1}, c64[0,0]{0,1}, s32[])",
     ", backend_config={compute_left = 78 : ui8, compute_right = 86 : ui8}"),
    ("lapack_sgeev_ffi", ["f32[1,1]{0,1}"],
     "(f32[1]{0}, f32[1]{0}, c64[1,1]{0,1}, c64[1,1]{0,1}, s32[])",
     ", backend_config={compute_left = 86 : ui8, compute_right = 86 : ui8}"),
    ("lapack_strsm_ffi", ["f32[0,0]{0,1}", "f32[0,2]{0,1}"],
     "f32[0,2]{0,1}",
     ", backend_config={diag = 78 : ui8, side = 76 : ui8, trans_x = 78 : ui8, uplo = 76 : ui8}"),
    ("lapack_sgtsv_ffi", ["f32[0]{0}"]*3 + ["f32[0,1]{0,1}"],
     "(f32[0]{0}, f32[0]{0}, f32[0]{0}, f32[0,1]{0,1}, s32[])", ""),
    ("lapack_sgtsv_ffi", ["f32[1]{0}"]*3 + ["f32[1,1]{0,1}"],
     "(f32[1]{0}, f32[1]{0}, f32[1]{0}, f32[1,1]{0,1}, s32[])", ""),
    ("lapack_ssytrd_ffi", ["f32[1,1]{0,1}"],
     "(f32[1,1]{0,1}, f32[1]{0}, f32[0]{0}, f32[0]{0}, s32[])",
     ", backend_config={uplo = 76 : ui8}"),
    ("lapack_sgehrd_ffi", ["f32[1,1]{0,1}"],
     "(f32[1,1]{0,1}, f32[0]{0}, s32[])", ", backend_config={high = 1 : i32, low = 1 : i32}"),
    ("lapack_sgeqp3_ffi", ["f32[2,0]{0,1}", "s32[0]{0}"],
     "(f32[2,0]{0,1}, s32[0]{0}, f32[0]{0})", ""),
]


@pytest.mark.parametrize("case", EDGE_CASES, ids=[f"{c[0][7:-4]}-{c[1][0].split('{')[0]}"
                                                  for c in EDGE_CASES])
def test_empty_and_one_by_one_matrices_decompose(case):
    """Loops that never run are not built (their bodies would slice an empty matrix); the
    decomposition, its artifact on XLA:CPU and the kernel agree."""
    from xlaplug.hlo.text.shape_parser import parse_shape
    target, ops, result, attrs = case
    text = custom_call(target, ops, result, attrs)
    rng = np.random.default_rng(0)
    args = [(rng.standard_normal(parse_shape(o).dims) + 3).astype(parse_shape(o).dtype)
            for o in ops]
    kernel = xlaplug.compile(text)(*args)
    ours = xlaplug.compile(text, prefer="decomposition")(*args)
    theirs = run_on_xla_cpu(xlaplug.compile(text, decompose_all=True).hlo, [args],
                            what="test")[0]
    for k, o, t in zip(kernel, ours, theirs):
        assert k.shape == o.shape == t.shape
        np.testing.assert_allclose(o, k, atol=1e-5, equal_nan=True)
        np.testing.assert_allclose(t, o, atol=1e-5, equal_nan=True)
