"""The bundled jax_lapack plugin: JAX's CPU LAPACK custom calls, end to end, on every device
(tests/devices.py).

One case table, `FUNCTIONS` x `BATCHED` (jnp.linalg / jax.scipy.linalg / lax.linalg programs,
every dtype, batched and not): each case jits the program, takes both its lowered HLO
(`lower().as_text(dialect="hlo")`) and XLA:CPU's compiled HLO (`compile().as_text()`), runs
each through the real pipeline (parse_module -> compile_module -> execute, with the bundled
plugins active) on the device, and compares every output leaf with what XLA:CPU (real
LAPACK) returned for the same inputs.  On cuda (numba's simulator without a GPU) a program
calling a routine that `ROUTINES` lists without a CUDA kernel must fail to compile with a
clear error naming that target.  `ROUTINES` is also what list-plugins and check-plugins must
show per device.

Tolerances (`_close`, `TOL[device]`): integers (pivots, permutations, ranks) must be equal;
floating leaves use rtol = atol/scale = TOL for f32/c64 and f64/c128 outputs,
scale = max(1, max |expected|), and NaNs must sit exactly where XLA's are.  Inputs are
well conditioned (condition numbers ~10), so these bound rounding only.  cpu: 1e-5 / 1e-12;
the largest errors seen are ~8e-7 (f32/c64) and ~1e-15 (f64/c128) on that scale.  potrf,
syevd/heevd, gesdd and geev go through numpy's wrappers of the very LAPACK routines and
match bit for bit in f32, f64 and c128; getrf, trsm, orgqr, ormqr, gehrd, sytrd, geqp3
and gtsv are numpy re-implementations of the reference algorithms (same pivots and
reflectors, different rounding); geqrf for f32/c64 and geev for c64 run LAPACK in
double and round (numpy has no single-precision loops for them).  cuda: 2e-5 / 1e-12; the
CUDA kernels run the CPU kernels' algorithms (same pivots, reflectors, taus, untouched
triangles) in their own order, except syevd/heevd (cyclic Jacobi, `_match_phase`).

Where LAPACK's answer is not unique and this plugin cannot reproduce XLA's choice, the
test compares up to that freedom instead (and says so): c64 geev's eigenvalue order
(zgeev may deflate in another order than cgeev; `_match_eig`), gesvd's singular vectors
(served by gesdd) up to a phase per singular pair, geev's left eigenvectors of a real
matrix for complex-conjugate pairs up to sign, and the CUDA syevd/heevd's eigenvectors up
to a phase per column.

The routines with CUDA kernels are also driven through calls jax does not emit in these
forms (junk in the unread triangle, the alpha operand, every flag in every dtype, the info
of failed factorizations, empty shapes), written as HLO custom calls and compared with the
CPU kernels -- the kernels XLA's answers check above.  Matrices there are <= 6x6 with
batches <= 3: the simulator is slow.
"""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
import jax.scipy.linalg as jsl  # noqa: E402
from jax import lax  # noqa: E402

from devices import on_each_device  # noqa: E402
from xlaplug.runtime.driver import compile_module  # noqa: E402
from xlaplug.hlo import parse_module  # noqa: E402
from xlaplug.hlo.errors import HloError  # noqa: E402
from xlaplug.plugin import Session  # noqa: E402
from xlaplug.runtime.runner import execute  # noqa: E402

F32, F64, C64, C128 = np.float32, np.float64, np.complex64, np.complex128
# dtype -> (HLO element type, LAPACK type prefix)
TYPES = {F32: ("f32", "s"), F64: ("f64", "d"), C64: ("c64", "c"), C128: ("c128", "z")}
TOL = {"cpu": {"f32": 1e-5, "c64": 1e-5, "f64": 1e-12, "c128": 1e-12},
       "cuda": {"f32": 2e-5, "c64": 2e-5, "f64": 1e-12, "c128": 1e-12}}
VARIANTS = ("lowered", "compiled")

# routine -> (LAPACK type prefixes it comes in, whether the plugin has CUDA kernels for it)
ROUTINES = {
    "potrf": ("sdcz", True), "getrf": ("sdcz", True), "trsm": ("sdcz", True),
    "geqrf": ("sdcz", True), "orgqr": ("sd", True), "ungqr": ("cz", True),
    "syevd": ("sd", True), "heevd": ("cz", True),
    "geqp3": ("sdcz", False), "gesdd": ("sdcz", False), "gesvd": ("sdcz", False),
    "geev": ("sdcz", False), "gehrd": ("sdcz", False), "gtsv": ("sdcz", False),
    "ormqr": ("sd", False), "unmqr": ("cz", False), "sytrd": ("sd", False),
    "hetrd": ("cz", False),
}


def targets(device: str) -> set[str]:
    """The custom-call targets the plugin serves on `device`."""
    return {f"lapack_{p}{r}_ffi" for r, (prefixes, cuda) in ROUTINES.items()
            for p in prefixes if device == "cpu" or cuda}


# ---- helpers -------------------------------------------------------------------------------

def _x64(dtype) -> bool:
    return np.dtype(dtype) in (np.dtype(F64), np.dtype(C128))


_XLA_RUNS: dict = {}


def _xla(f, args, dtype, key=None):
    """XLA's outputs, and the lowered and compiled HLO texts of f on args; with a key, once
    per key in this process (a test's cpu and cuda cases lower the same function)."""
    if key is not None:
        if key not in _XLA_RUNS:
            _XLA_RUNS[key] = _xla(f, args, dtype)
        return _XLA_RUNS[key]
    args = [np.asarray(a) for a in args]
    with jax.enable_x64(_x64(dtype)):
        lowered = jax.jit(f).lower(*args)
        compiled = lowered.compile()
        want = [np.asarray(x) for x in jax.tree_util.tree_leaves(compiled(*args))]
        texts = {"lowered": lowered.as_text(dialect="hlo"), "compiled": compiled.as_text()}
    for variant, text in texts.items():
        assert "lapack_" in text, f"{variant} HLO has no LAPACK custom call"
    return want, texts


def _run(registry, text: str, args, device: str = "cpu"):
    """Compile and run `text` on `device` with the plugins of `registry`."""
    session = Session(registry, device=device)
    module = parse_module(text)
    compile_module(module, session)
    return [np.asarray(x) for x in execute(module, [np.asarray(a) for a in args],
                                           session).outputs]


def _run_both(registry, f, args, dtype, device="cpu", key=None):
    """XLA's outputs, and ours on `device` for the lowered and the compiled HLO text."""
    want, texts = _xla(f, args, dtype, key)
    got = {}
    for variant, text in texts.items():
        got[variant] = _run(registry, text, args, device)
        assert len(got[variant]) == len(want)
    return want, got


def _etype(dt: np.dtype) -> str:
    if dt.kind == "c":
        return TYPES[dt.type][0]
    return {4: "f32", 8: "f64"}[dt.itemsize]


def _close(got, want, what: str, device="cpu"):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, \
        f"{what}: {got.dtype}{got.shape} vs {want.dtype}{want.shape}"
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    tol = TOL[device][_etype(want.dtype)]
    finite = want[np.isfinite(want)]
    scale = max(1.0, float(np.max(np.abs(finite)))) if finite.size else 1.0
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale, equal_nan=True,
                               err_msg=what)


def check(registry, f, args, dtype, device="cpu", eig_leaves=(), phase_leaves=(), key=None):
    """Every output leaf close to XLA's.  `eig_leaves`: (values, vectors or None) index
    pairs of c64 geev results, compared up to eigenvalue order (see _match_eig);
    `phase_leaves`: eigenvector leaves of syevd/heevd, on cuda compared up to a phase per
    column (see _match_phase); `key`: see _xla."""
    want, got = _run_both(registry, f, args, dtype, device, key)
    for variant in VARIANTS:
        outs = list(got[variant])
        if np.dtype(dtype) == np.dtype(C64):
            for wk, vk in eig_leaves:
                _match_eig(outs, want, wk, vk)
        if device == "cuda":
            for vk in phase_leaves:
                outs[vk] = _match_phase(outs[vk], want[vk])
        for k, (g, w) in enumerate(zip(outs, want)):
            _close(g, w, f"{variant} output {k}", device)


def _match_phase(v, ref):
    """v's columns each multiplied by the unit phase (a sign, for real v) that brings it
    closest to ref's: the CUDA syevd (cyclic Jacobi) fixes no sign, LAPACK does."""
    p = np.sum(v.conj() * ref, axis=-2, keepdims=True)
    p = np.where(np.abs(p) > 0, p / np.where(np.abs(p) > 0, np.abs(p), 1), 1)
    return (v * p).astype(v.dtype)


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
    """Seeded, well-conditioned inputs of one dtype with leading batch dims (`batch=`
    overrides them per call)."""

    def __init__(self, dtype, batch=(), seed=0):
        self.dtype, self.batch = np.dtype(dtype), tuple(batch)
        self.rng = np.random.default_rng(seed)

    def rand(self, *shape, batch=None):
        s = (self.batch if batch is None else tuple(batch)) + shape
        x = self.rng.standard_normal(s)
        if self.dtype.kind == "c":
            x = x + 1j * self.rng.standard_normal(s)
        return x.astype(self.dtype)

    def general(self, n):
        return (self.rand(n, n) + n * np.eye(n)).astype(self.dtype)

    def hermitian(self, n, batch=None):
        x = self.rand(n, n, batch=batch)
        return ((x + np.swapaxes(x, -1, -2).conj()) / 2).astype(self.dtype)

    def spd(self, n, batch=None):
        x = self.rand(n, n, batch=batch)
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
BATCHED = [(F32, ()), (F64, (2,)), (C64, (2, 2)), (C128, ())]

# FUNCTIONS that call a routine without a CUDA kernel (ROUTINES): on cuda, the clear error.
NO_CUDA_KERNEL = {"svd": "gesdd", "pinv": "gesdd", "lstsq": "gesdd", "matrix_rank": "gesdd",
                  "eig": "geev"}


@pytest.mark.parametrize("dtype,batch", BATCHED, ids=["f32", "f64-batched", "c64-batched",
                                                      "c128"])
@pytest.mark.parametrize("name", list(FUNCTIONS))
@on_each_device
def test_linalg_function_matches_xla(lapack, device, name, dtype, batch):
    f, inputs, vmap = FUNCTIONS[name]
    g = Inputs(dtype, batch, seed=len(name))
    f, args = (_maybe_vmap(f, batch) if vmap else f), inputs(g)
    key = ("linalg_function", name, np.dtype(dtype).str, batch)
    if device == "cuda" and name in NO_CUDA_KERNEL:
        routine = NO_CUDA_KERNEL[name]
        assert not ROUTINES[routine][1]
        # No CUDA kernel: the routine's decomposition (core HLO) takes its place (issue 26;
        # its values are tests/test_lapack_decompositions.py's, on the CPU: the CUDA
        # simulator runs those loops' every step as a launch, minutes per program).
        _, texts = _xla(f, args, dtype, key)
        for text in texts.values():
            module = parse_module(text)
            compile_module(module, Session(lapack, device=device))
            left = [i.attrs.get("custom_call_target") for c in module.computations
                    for i in c.instructions if i.opcode == "custom-call"]
            assert not any(routine in str(t) for t in left), left
        return
    check(lapack, f, args, dtype, device, eig_leaves=[(0, 1)] if name == "eig" else (),
          phase_leaves=[1] if name == "eigh" else (), key=key)


# ---- the other targets and the attributes' corners ---------------------------------------

@pytest.mark.parametrize("dtype", [F32, C128], ids=["f32", "c128"])
@on_each_device
def test_triangular_solve_every_flag(lapack, device, dtype):
    """side x uplo x trans_x (N/T/C) x diag, one program (complex: conjugate too)."""
    conj = (False, True) if np.dtype(dtype).kind == "c" else (False,)
    flags = [(s, lo, t, c, u) for s in (True, False) for lo in (True, False)
             for t in (False, True) for c in conj for u in (False, True)]

    def f(a, b):
        return tuple(lax.linalg.triangular_solve(
            a, b if s else jnp.swapaxes(b, -1, -2), left_side=s, lower=lo, transpose_a=t,
            conjugate_a=c, unit_diagonal=u) for s, lo, t, c, u in flags)
    g = Inputs(dtype, (2,), seed=1)
    check(lapack, f, (g.general(4), g.rand(4, 3)), dtype, device,
          key=("triangular_solve_every_flag", np.dtype(dtype).str))


@pytest.mark.parametrize("dtype", [F64, C64], ids=["f64", "c64"])
@on_each_device
def test_lu_rectangular_and_eigh_upper(lapack, device, dtype):
    """getrf on wide and tall batches; syevd/heevd reading only the upper triangle."""
    def f(w, t, a):
        return (*lax.linalg.lu(w), *lax.linalg.lu(t),
                *jnp.linalg.eigh(a, UPLO="U", symmetrize_input=False))
    g = Inputs(dtype, (2,), seed=5)
    check(lapack, f, (g.rand(3, 5), g.rand(5, 3), g.rand(4, 4)), dtype, device, phase_leaves=[7],
          key=("lu_rectangular_and_eigh_upper", np.dtype(dtype).str))


# The routines below have no CUDA kernel (ROUTINES): these run on cpu only.

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


# ---- the plugin itself, per device ------------------------------------------------------------

@on_each_device
def test_kernels_per_device_are_the_routine_table(lapack, device):
    """The plugin's kernels on each device are ROUTINES' targets; each has a shape rule and
    examples (check-plugins' inputs); list-plugins reports the same per device."""
    from xlaplug.cli.plugin_report import plugins_json
    plugin = next(p for p in lapack.plugins if p.name == "jax_lapack")
    ops = {op for op, dev in plugin.kernels if dev == device}
    assert ops == targets(device)
    for op in ops:
        assert op in plugin.shapes
        assert len(plugin.kernels[(op, device)].examples) >= 1
    row = {r["plugin"]: r for r in plugins_json(lapack)["plugins"]}["jax_lapack"]
    assert set(row["kernels"][device]) == ops
    assert row["status"] == "ok"


@on_each_device
def test_check_plugins_runs_every_example(lapack, device):
    from xlaplug.runtime.check import check_plugins
    ops = sorted(targets(device))
    results = check_plugins(Session(lapack, device=device), ops, trials=1)
    assert len(results) == len(ops) == {"cpu": 56, "cuda": 24}[device]
    assert all(r.ok for r in results), [(r.op, r.detail) for r in results if not r.ok]


def test_shape_rule_rejects_a_mistyped_call(lapack):
    with jax.enable_x64(False):
        text = jax.jit(jnp.linalg.cholesky).lower(np.eye(3, dtype=F32)).as_text(dialect="hlo")
    module = parse_module(text.replace("lapack_spotrf_ffi", "lapack_dpotrf_ffi"))
    with pytest.raises(HloError, match=r"lapack_dpotrf_ffi: operand must be a f64"):
        compile_module(module, Session(lapack))


# ---- the CUDA kernels on hand-written calls, against the CPU kernels ------------------------

DTYPES = list(TYPES)
IDS = [TYPES[d][0] for d in DTYPES]


def _shape(etype, dims) -> str:
    return f"{etype}[{','.join(str(d) for d in dims)}]"


def _module(params, calls) -> str:
    """params: [(name, shape text)]; calls: [(result shape text, target, operands, config)].
    The root is a tuple of every call's result."""
    lines = [f"  {n} = {s} parameter({k})" for k, (n, s) in enumerate(params)]
    for k, (shape, target, operands, config) in enumerate(calls):
        lines.append(f"  r{k} = {shape} custom-call({', '.join(operands)}), "
                     f"custom_call_target=\"{target}\", api_version=API_VERSION_TYPED_FFI, "
                     f"backend_config={{{config}}}")
    leaves = []
    for k, (shape, _, _, _) in enumerate(calls):
        if shape.startswith("("):
            parts = shape[1:-1].split(", ")
            for i, p in enumerate(parts):
                lines.append(f"  g{k}_{i} = {p} get-tuple-element(r{k}), index={i}")
                leaves.append((f"g{k}_{i}", p))
        else:
            leaves.append((f"r{k}", shape))
    lines.append(f"  ROOT out = ({', '.join(s for _, s in leaves)}) "
                 f"tuple({', '.join(n for n, _ in leaves)})")
    return "HloModule lapack\n\nENTRY main {\n" + "\n".join(lines) + "\n}\n"


def _both(registry, text, args):
    return _run(registry, text, args, "cpu"), _run(registry, text, args, "cuda")


def _same(registry, text, args):
    cpu, gpu = _both(registry, text, args)
    assert len(cpu) == len(gpu)
    for k, (g, c) in enumerate(zip(gpu, cpu)):
        _close(g, c, f"output {k}", "cuda")
    return cpu, gpu


# ---- potrf -----------------------------------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_potrf_matches_cpu(lapack, dtype):
    """Both triangles, batched and not; the unread triangle comes back as it went in."""
    g = Inputs(dtype, seed=1)
    e, t = TYPES[dtype][0], f"lapack_{TYPES[dtype][1]}potrf_ffi"
    a3, a1 = g.spd(5, batch=(3,)), g.spd(4)
    lo, up = a3.copy(), a3.copy()
    lo[..., 0, 4] = 70.0                   # junk in the triangle each call must not read
    up[..., 4, 0] = 70.0
    calls = [(f"({_shape(e, (3, 5, 5))}, s32[3])", t, [x], f"uplo = {u} : ui8")
             for x, u in (("lo", 76), ("up", 85))]
    calls.append((f"({_shape(e, (4, 4))}, s32[])", t, ["b"], "uplo = 85 : ui8"))
    params = [("lo", _shape(e, (3, 5, 5))), ("up", _shape(e, (3, 5, 5))),
              ("b", _shape(e, (4, 4)))]
    cpu, gpu = _same(lapack, _module(params, calls), [lo, up, a1])
    assert (gpu[0][:, 0, 4] == 70).all() and (gpu[2][:, 4, 0] == 70).all()
    assert not gpu[1].any() and not gpu[3].any() and not gpu[5].any()


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_potrf_info_not_positive_definite(lapack, dtype):
    g = Inputs(dtype, seed=2)
    e, t = TYPES[dtype][0], f"lapack_{TYPES[dtype][1]}potrf_ffi"
    a = g.spd(4, batch=(3,))
    a[1, 2, 2] = -40                      # third leading minor negative
    a[2] = np.array([[1, 2, 0, 0], [2, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]])
    calls = [(f"({_shape(e, (3, 4, 4))}, s32[3])", t, ["a"], f"uplo = {u} : ui8")
             for u in (76, 85)]
    cpu, gpu = _same(lapack, _module([("a", _shape(e, (3, 4, 4)))], calls), [a])
    for info in (gpu[1], gpu[3]):
        assert info.tolist() == [0, 3, 2]
    assert np.isnan(gpu[0][1]).any() and not np.isnan(gpu[0][0]).any()


# ---- getrf -----------------------------------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_getrf_matches_cpu(lapack, dtype):
    """Square batched, wide, tall: the same LU, 1-based pivots and info."""
    g = Inputs(dtype, seed=3)
    e, t = TYPES[dtype][0], f"lapack_{TYPES[dtype][1]}getrf_ffi"
    shapes = [(3, 4, 4), (2, 3, 5), (5, 3)]
    params, calls, args = [], [], []
    for k, s in enumerate(shapes):
        params.append((f"a{k}", _shape(e, s)))
        batch, kk = s[:-2], min(s[-2:])
        calls.append((f"({_shape(e, s)}, {_shape('s32', batch + (kk,))}, "
                      f"{_shape('s32', batch)})", t, [f"a{k}"], ""))
        args.append(g.rand(*s))
    cpu, gpu = _same(lapack, _module(params, calls), args)
    assert gpu[1].min() >= 1 and gpu[1].max() <= 4 and not gpu[2].any()


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_getrf_singular_info(lapack, dtype):
    e, t = TYPES[dtype][0], f"lapack_{TYPES[dtype][1]}getrf_ffi"
    a = np.array([[[1, 2, 3], [2, 4, 6], [1, 0, 1]],
                  [[2, 1, 0], [1, 3, 1], [0, 1, 4]],
                  [[0, 0, 1], [0, 0, 2], [0, 0, 3]]], dtype)
    text = _module([("a", _shape(e, (3, 3, 3)))],
                   [(f"({_shape(e, (3, 3, 3))}, s32[3,3], s32[3])", t, ["a"], "")])
    cpu, gpu = _same(lapack, text, [a])
    assert gpu[2].tolist() == [3, 0, 1]
    assert gpu[1][0].tolist() == [2, 3, 3]


# ---- trsm ------------------------------------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_trsm_every_flag(lapack, dtype):
    """side x uplo x trans_x (N/T/C) x diag in one module, batched; only the referenced
    triangle is read (the other holds junk); plus the optional alpha operand."""
    g = Inputs(dtype, seed=4)
    e, t = TYPES[dtype][0], f"lapack_{TYPES[dtype][1]}trsm_ffi"
    a = (g.rand(2, 4, 4) + 4 * np.eye(4)).astype(dtype)
    bl, br = g.rand(2, 4, 3), g.rand(2, 3, 4)
    calls = []
    for side in "LR":
        for uplo in "LU":
            for trans in "NTC":
                for diag in "NU":
                    cfg = (f"side = {ord(side)} : ui8, uplo = {ord(uplo)} : ui8, "
                           f"trans_x = {ord(trans)} : ui8, diag = {ord(diag)} : ui8")
                    b = "bl" if side == "L" else "br"
                    calls.append((_shape(e, (2, 4, 3) if side == "L" else (2, 3, 4)), t,
                                  ["a", b], cfg))
    calls.append((_shape(e, (2, 4, 3)), t, ["a", "bl", "alpha"],
                  "side = 76 : ui8, uplo = 85 : ui8, trans_x = 84 : ui8, diag = 78 : ui8"))
    params = [("a", _shape(e, (2, 4, 4))), ("bl", _shape(e, (2, 4, 3))),
              ("br", _shape(e, (2, 3, 4))), ("alpha", f"{e}[]")]
    alpha = np.asarray(-1.5 + (0.5j if np.dtype(dtype).kind == "c" else 0), dtype)
    cpu, gpu = _same(lapack, _module(params, calls), [a, bl, br, alpha])
    assert len(gpu) == 25


# ---- geqrf / orgqr / ungqr -------------------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_geqrf_and_householder_product_match_cpu(lapack, dtype):
    """Tall batched, wide, square: LAPACK's reflectors and taus; then orgqr/ungqr on them
    (m x n with k = n taus, and the complete-Q form jax uses: a padded square input)."""
    g = Inputs(dtype, seed=5)
    e, p = TYPES[dtype]
    qrf, o = f"lapack_{p}geqrf_ffi", f"lapack_{p}{'org' if p in 'sd' else 'ung'}qr_ffi"
    a, w, s = g.rand(3, 5, 3), g.rand(3, 5), g.rand(4, 4)
    s[:, 0] = 0                            # a zero column: larfg's tau = 0 branch
    nan = g.rand(2, 3)
    nan[:, 0], nan[0, 2] = 0, np.nan       # H(1) = I must not spread the NaN (xLARF skips it)
    text = _module([("a", _shape(e, (3, 5, 3))), ("w", _shape(e, (3, 5))),
                    ("s", _shape(e, (4, 4))), ("n", _shape(e, (2, 3)))],
                   [(f"({_shape(e, (3, 5, 3))}, {_shape(e, (3, 3))})", qrf, ["a"], ""),
                    (f"({_shape(e, (3, 5))}, {_shape(e, (3,))})", qrf, ["w"], ""),
                    (f"({_shape(e, (4, 4))}, {_shape(e, (4,))})", qrf, ["s"], ""),
                    (f"({_shape(e, (2, 3))}, {_shape(e, (2,))})", qrf, ["n"], "")])
    cpu, gpu = _same(lapack, text, [a, w, s, nan])
    assert np.isnan(gpu[6]).sum() == 1
    h, tau = cpu[0], cpu[1]
    hw, tw = cpu[2], cpu[3]
    square = np.zeros((3, 3), dtype)
    square[:, :] = hw[:, :3]
    text = _module([("h", _shape(e, (3, 5, 3))), ("t", _shape(e, (3, 3))),
                    ("q", _shape(e, (3, 3))), ("u", _shape(e, (2,)))],
                   [(_shape(e, (3, 5, 3)), o, ["h", "t"], ""),
                    (_shape(e, (3, 3)), o, ["q", "u"], "")])
    cpu, gpu = _same(lapack, text, [h, tau, square, tw[:2]])
    q = gpu[0]
    np.testing.assert_allclose(np.swapaxes(q, -1, -2).conj() @ q, np.broadcast_to(np.eye(3),
                               (3, 3, 3)), atol=1e-5)


# ---- syevd / heevd ---------------------------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_eigh_values_and_vectors(lapack, dtype):
    """Eigenvalues match the CPU kernel (LAPACK); eigenvectors are orthonormal and
    reconstruct the Hermitian matrix the `uplo` triangle defines (they may differ from
    LAPACK's by a sign or phase per column); mode 'N' gives the values."""
    g = Inputs(dtype, seed=6)
    e, p = TYPES[dtype]
    t = f"lapack_{p}{'syevd' if p in 'sd' else 'heevd'}_ffi"
    r = {"f32": "f32", "f64": "f64", "c64": "f32", "c128": "f64"}[e]
    a = g.hermitian(5, batch=(3,))
    a[:, 0, 4] = 9.0                       # junk the 'L' calls must not read
    res = f"({_shape(e, (3, 5, 5))}, {_shape(r, (3, 5))}, s32[3])"
    calls = [(res, t, ["a"], f"uplo = {u} : ui8, mode = {m} : ui8")
             for u, m in ((76, 86), (85, 86), (76, 78))]
    cpu, gpu = _both(lapack, _module([("a", _shape(e, (3, 5, 5)))], calls), [a])
    for k, lower in ((0, True), (1, False)):
        v, w, info = gpu[3 * k: 3 * k + 3]
        _close(w, cpu[3 * k + 1], "eigenvalues", "cuda")
        assert not info.any() and (np.diff(w, axis=-1) >= 0).all()
        tri = np.tril(a) if lower else np.triu(a)
        h = tri + np.swapaxes(np.tril(tri, -1) if lower else np.triu(tri, 1), -1, -2).conj()
        tol = 5e-5 if r == "f32" else 1e-12
        vh = np.swapaxes(v, -1, -2).conj()
        np.testing.assert_allclose(v @ (w[..., None] * vh), h, atol=tol * 10)
        np.testing.assert_allclose(vh @ v, np.broadcast_to(np.eye(5), v.shape), atol=tol)
    _close(gpu[7], cpu[7], "eigenvalues, mode N", "cuda")
    np.testing.assert_array_equal(gpu[6], a)   # jobz = 'N': A as it came (jax ignores it)


# ---- device arrays in, nothing back to the host ---------------------------------------------

@pytest.mark.cuda
def test_kernels_get_device_arrays_and_copy_nothing_back(lapack, monkeypatch):
    """Every jax_lapack CUDA kernel receives device arrays, and a run copies back only its
    outputs (one copy_to_host per output leaf, at the end)."""
    from numba import cuda

    from xlaplug.backends.cuda.launch import is_device_array
    seen = []
    for key, entry in list(lapack.kernels.items()):
        if key[1] == "cuda" and entry.plugin.name == "jax_lapack":
            def spy(*arrays, _fn=entry.fn, _op=key[0], **kw):
                seen.append((_op, all(is_device_array(x) for x in arrays)))
                return _fn(*arrays, **kw)
            monkeypatch.setattr(entry, "fn", spy)
    copies = []
    cls = type(cuda.to_device(np.zeros(1)))
    orig = cls.copy_to_host
    monkeypatch.setattr(cls, "copy_to_host", lambda self, *a, **k: (copies.append(1),
                                                                      orig(self, *a, **k))[1])
    text = _module([("a", "f64[2,4,4]"), ("b", "f64[2,4,2]"), ("c", "c64[3,5,3]")], [
        ("(f64[2,4,4], s32[2])", "lapack_dpotrf_ffi", ["a"], "uplo = 76 : ui8"),
        ("(f64[2,4,4], s32[2,4], s32[2])", "lapack_dgetrf_ffi", ["a"], ""),
        ("f64[2,4,2]", "lapack_dtrsm_ffi", ["a", "b"], "side = 76 : ui8, uplo = 76 : ui8, "
         "trans_x = 78 : ui8, diag = 78 : ui8"),
        ("(c64[3,5,3], c64[3,3])", "lapack_cgeqrf_ffi", ["c"], ""),
        ("(f64[2,4,4], f64[2,4], s32[2])", "lapack_dsyevd_ffi", ["a"],
         "uplo = 76 : ui8, mode = 86 : ui8")])
    g, gc = Inputs(F64, seed=7), Inputs(C64, seed=7)
    outs = _run(lapack, text, [g.spd(4, batch=(2,)), g.rand(2, 4, 2), gc.rand(3, 5, 3)], "cuda")
    assert sorted(op for op, _ in seen) == sorted(
        ["lapack_dpotrf_ffi", "lapack_dgetrf_ffi", "lapack_dtrsm_ffi", "lapack_cgeqrf_ffi",
         "lapack_dsyevd_ffi"]) and all(ok for _, ok in seen), seen
    assert len(copies) == len(outs) == 11




@pytest.mark.cuda
def test_empty_shapes(lapack):
    """Zero-size matrices and batches: info is 0 for every (empty) matrix."""
    text = _module([("a", "f32[2,0,0]"), ("b", "c64[0,3,3]"), ("c", "f64[0,4]"),
                    ("d", "f64[2,0,3]"), ("e", "f64[2,0,0]")], [
        ("(f32[2,0,0], s32[2])", "lapack_spotrf_ffi", ["a"], "uplo = 76 : ui8"),
        ("(c64[0,3,3], s32[0,3], s32[0])", "lapack_cgetrf_ffi", ["b"], ""),
        ("(f64[0,4], s32[0], s32[])", "lapack_dgetrf_ffi", ["c"], ""),
        ("(f64[0,4], f64[0])", "lapack_dgeqrf_ffi", ["c"], ""),
        ("f64[2,0,3]", "lapack_dtrsm_ffi", ["e", "d"], "side = 76 : ui8"),
        ("(f32[2,0,0], f32[2,0], s32[2])", "lapack_ssyevd_ffi", ["a"], "mode = 86 : ui8")])
    args = [np.zeros((2, 0, 0), np.float32), np.zeros((0, 3, 3), np.complex64),
            np.zeros((0, 4)), np.zeros((2, 0, 3)), np.zeros((2, 0, 0))]
    cpu, gpu = _same(lapack, text, args)
    assert gpu[1].tolist() == [0, 0] and gpu[7].tolist() == 0 and gpu[13].tolist() == [0, 0]
