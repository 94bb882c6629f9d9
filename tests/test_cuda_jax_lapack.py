"""The jax_lapack plugin's CUDA kernels: the same custom calls on cpu and cuda.

Each test writes HLO modules holding LAPACK custom calls as jax emits them, runs them
through the real pipeline (parse_module -> compile_module -> runner.execute) with the
bundled plugins active, once with device="cpu" (the numpy kernels) and once with
device="cuda" (numba.cuda kernels; numba's simulator without a GPU), and compares:

* integers (pivots, info) exactly;
* floats within rtol = atol/scale = 2e-5 (f32/c64) or 1e-12 (f64/c128), scale =
  max(1, max |cpu|): the algorithms are the CPU kernels' (same pivots, reflectors, taus,
  untouched triangles), so only rounding differs (and f32 geqrf, which the CPU kernel runs
  in double);
* NaNs where the CPU kernel puts them (failed potrf);
* syevd/heevd: eigenvalues only (Jacobi's eigenvectors may differ from LAPACK's by a sign
  or phase per column), plus V diag(w) V^H = A and V^H V = I.

Then jax's own programs (tests/jax_corpus.py) that lower to these calls run on cuda and are
compared with jax's outputs, as tests/test_cuda_corpus.py does.  Matrices are <= 6x6 with
batches <= 3: the simulator is slow.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from xlaplug.driver import compile_module
from xlaplug.hlo import parse_module
from xlaplug.plugin import Session
from xlaplug.runner import execute

ETYPE = {np.float32: "f32", np.float64: "f64", np.complex64: "c64", np.complex128: "c128"}
PREFIX = {np.float32: "s", np.float64: "d", np.complex64: "c", np.complex128: "z"}
DTYPES = list(ETYPE)
IDS = [ETYPE[d] for d in DTYPES]
TOL = {"f32": 2e-5, "c64": 2e-5, "f64": 1e-12, "c128": 1e-12}
CUDA_ROUTINES = ("potrf", "getrf", "trsm", "geqrf", "orgqr", "ungqr", "syevd", "heevd")


# ---- helpers ---------------------------------------------------------------------------------

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


def _run(registry, text: str, args, device: str):
    """Compile and run `text` on `device` with the plugins of `registry`."""
    session = Session(registry, device=device)
    module = parse_module(text)
    compile_module(module, session)
    return [np.asarray(x) for x in execute(module, list(args), session).outputs]


def _both(registry, text, args):
    return _run(registry, text, args, "cpu"), _run(registry, text, args, "cuda")


def _close(got, want, what=""):
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.dtype, want.dtype)
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    tol = TOL[ETYPE[np.dtype(want.dtype).type]] if want.dtype.kind == "c" else \
        TOL[{4: "f32", 8: "f64"}[want.dtype.itemsize]]
    finite = want[np.isfinite(want)]
    scale = max(1.0, float(np.max(np.abs(finite)))) if finite.size else 1.0
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale, equal_nan=True,
                               err_msg=what)


def _same(registry, text, args):
    cpu, gpu = _both(registry, text, args)
    assert len(cpu) == len(gpu)
    for k, (g, c) in enumerate(zip(gpu, cpu)):
        _close(g, c, f"output {k}")
    return cpu, gpu


def _rand(rng, dtype, *shape):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def _spd(rng, dtype, batch, n):
    x = _rand(rng, dtype, *batch, n, n)
    return (x @ np.swapaxes(x, -1, -2).conj() + n * np.eye(n)).astype(dtype)


def _hermitian(rng, dtype, batch, n):
    x = _rand(rng, dtype, *batch, n, n)
    return ((x + np.swapaxes(x, -1, -2).conj()) / 2).astype(dtype)


# ---- potrf -----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_potrf_matches_cpu(lapack, dtype):
    """Both triangles, batched and not; the unread triangle comes back as it went in."""
    rng = np.random.default_rng(1)
    e, t = ETYPE[dtype], f"lapack_{PREFIX[dtype]}potrf_ffi"
    a3, a1 = _spd(rng, dtype, (3,), 5), _spd(rng, dtype, (), 4)
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


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_potrf_info_not_positive_definite(lapack, dtype):
    rng = np.random.default_rng(2)
    e, t = ETYPE[dtype], f"lapack_{PREFIX[dtype]}potrf_ffi"
    a = _spd(rng, dtype, (3,), 4)
    a[1, 2, 2] = -40                      # third leading minor negative
    a[2] = np.array([[1, 2, 0, 0], [2, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]])
    calls = [(f"({_shape(e, (3, 4, 4))}, s32[3])", t, ["a"], f"uplo = {u} : ui8")
             for u in (76, 85)]
    cpu, gpu = _same(lapack, _module([("a", _shape(e, (3, 4, 4)))], calls), [a])
    for info in (gpu[1], gpu[3]):
        assert info.tolist() == [0, 3, 2]
    assert np.isnan(gpu[0][1]).any() and not np.isnan(gpu[0][0]).any()


# ---- getrf -----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_getrf_matches_cpu(lapack, dtype):
    """Square batched, wide, tall: the same LU, 1-based pivots and info."""
    rng = np.random.default_rng(3)
    e, t = ETYPE[dtype], f"lapack_{PREFIX[dtype]}getrf_ffi"
    shapes = [(3, 4, 4), (2, 3, 5), (5, 3)]
    params, calls, args = [], [], []
    for k, s in enumerate(shapes):
        params.append((f"a{k}", _shape(e, s)))
        batch, kk = s[:-2], min(s[-2:])
        calls.append((f"({_shape(e, s)}, {_shape('s32', batch + (kk,))}, "
                      f"{_shape('s32', batch)})", t, [f"a{k}"], ""))
        args.append(_rand(rng, dtype, *s))
    cpu, gpu = _same(lapack, _module(params, calls), args)
    assert gpu[1].min() >= 1 and gpu[1].max() <= 4 and not gpu[2].any()


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_getrf_singular_info(lapack, dtype):
    e, t = ETYPE[dtype], f"lapack_{PREFIX[dtype]}getrf_ffi"
    a = np.array([[[1, 2, 3], [2, 4, 6], [1, 0, 1]],
                  [[2, 1, 0], [1, 3, 1], [0, 1, 4]],
                  [[0, 0, 1], [0, 0, 2], [0, 0, 3]]], dtype)
    text = _module([("a", _shape(e, (3, 3, 3)))],
                   [(f"({_shape(e, (3, 3, 3))}, s32[3,3], s32[3])", t, ["a"], "")])
    cpu, gpu = _same(lapack, text, [a])
    assert gpu[2].tolist() == [3, 0, 1]
    assert gpu[1][0].tolist() == [2, 3, 3]


# ---- trsm ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_trsm_every_flag(lapack, dtype):
    """side x uplo x trans_x (N/T/C) x diag in one module, batched; only the referenced
    triangle is read (the other holds junk); plus the optional alpha operand."""
    rng = np.random.default_rng(4)
    e, t = ETYPE[dtype], f"lapack_{PREFIX[dtype]}trsm_ffi"
    a = (_rand(rng, dtype, 2, 4, 4) + 4 * np.eye(4)).astype(dtype)
    bl, br = _rand(rng, dtype, 2, 4, 3), _rand(rng, dtype, 2, 3, 4)
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

@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_geqrf_and_householder_product_match_cpu(lapack, dtype):
    """Tall batched, wide, square: LAPACK's reflectors and taus; then orgqr/ungqr on them
    (m x n with k = n taus, and the complete-Q form jax uses: a padded square input)."""
    rng = np.random.default_rng(5)
    e, p = ETYPE[dtype], PREFIX[dtype]
    g, o = f"lapack_{p}geqrf_ffi", f"lapack_{p}{'org' if p in 'sd' else 'ung'}qr_ffi"
    a, w, s = _rand(rng, dtype, 3, 5, 3), _rand(rng, dtype, 3, 5), _rand(rng, dtype, 4, 4)
    s[:, 0] = 0                            # a zero column: larfg's tau = 0 branch
    nan = _rand(rng, dtype, 2, 3)
    nan[:, 0], nan[0, 2] = 0, np.nan       # H(1) = I must not spread the NaN (xLARF skips it)
    text = _module([("a", _shape(e, (3, 5, 3))), ("w", _shape(e, (3, 5))),
                    ("s", _shape(e, (4, 4))), ("n", _shape(e, (2, 3)))],
                   [(f"({_shape(e, (3, 5, 3))}, {_shape(e, (3, 3))})", g, ["a"], ""),
                    (f"({_shape(e, (3, 5))}, {_shape(e, (3,))})", g, ["w"], ""),
                    (f"({_shape(e, (4, 4))}, {_shape(e, (4,))})", g, ["s"], ""),
                    (f"({_shape(e, (2, 3))}, {_shape(e, (2,))})", g, ["n"], "")])
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

@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_eigh_values_and_vectors(lapack, dtype):
    """Eigenvalues match the CPU kernel (LAPACK); eigenvectors are orthonormal and
    reconstruct the Hermitian matrix the `uplo` triangle defines (they may differ from
    LAPACK's by a sign or phase per column); mode 'N' gives the values."""
    rng = np.random.default_rng(6)
    e, p = ETYPE[dtype], PREFIX[dtype]
    t = f"lapack_{p}{'syevd' if p in 'sd' else 'heevd'}_ffi"
    r = {"f32": "f32", "f64": "f64", "c64": "f32", "c128": "f64"}[e]
    a = _hermitian(rng, dtype, (3,), 5)
    a[:, 0, 4] = 9.0                       # junk the 'L' calls must not read
    res = f"({_shape(e, (3, 5, 5))}, {_shape(r, (3, 5))}, s32[3])"
    calls = [(res, t, ["a"], f"uplo = {u} : ui8, mode = {m} : ui8")
             for u, m in ((76, 86), (85, 86), (76, 78))]
    cpu, gpu = _both(lapack, _module([("a", _shape(e, (3, 5, 5)))], calls), [a])
    for k, lower in ((0, True), (1, False)):
        v, w, info = gpu[3 * k: 3 * k + 3]
        _close(w, cpu[3 * k + 1], "eigenvalues")
        assert not info.any() and (np.diff(w, axis=-1) >= 0).all()
        tri = np.tril(a) if lower else np.triu(a)
        h = tri + np.swapaxes(np.tril(tri, -1) if lower else np.triu(tri, 1), -1, -2).conj()
        tol = 5e-5 if r == "f32" else 1e-12
        vh = np.swapaxes(v, -1, -2).conj()
        np.testing.assert_allclose(v @ (w[..., None] * vh), h, atol=tol * 10)
        np.testing.assert_allclose(vh @ v, np.broadcast_to(np.eye(5), v.shape), atol=tol)
    _close(gpu[7], cpu[7], "eigenvalues, mode N")
    np.testing.assert_array_equal(gpu[6], a)   # jobz = 'N': A as it came (jax ignores it)


# ---- device arrays in, nothing back to the host ---------------------------------------------

def test_kernels_get_device_arrays_and_copy_nothing_back(lapack, monkeypatch):
    """Every jax_lapack CUDA kernel receives device arrays, and a run copies back only its
    outputs (one copy_to_host per output leaf, at the end)."""
    from numba import cuda

    from xlaplug.backends.cuda.launch import is_device_array
    rng = np.random.default_rng(7)
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
    outs = _run(lapack, text, [_spd(rng, np.float64, (2,), 4), _rand(rng, np.float64, 2, 4, 2),
                       _rand(rng, np.complex64, 3, 5, 3)], "cuda")
    assert sorted(op for op, _ in seen) == sorted(
        ["lapack_dpotrf_ffi", "lapack_dgetrf_ffi", "lapack_dtrsm_ffi", "lapack_cgeqrf_ffi",
         "lapack_dsyevd_ffi"]) and all(ok for _, ok in seen), seen
    assert len(copies) == len(outs) == 11


# ---- jax's programs on cuda ------------------------------------------------------------------

CORPUS = ("cholesky", "triangular_solve", "qr", "lu", "inv_solve_det", "linalg_f64_batched",
          "eigh_complex")


@pytest.mark.parametrize("variant", ["lowered", "compiled"])
@pytest.mark.parametrize("name", CORPUS)
def test_jax_program_on_cuda_matches_jax(lapack, name, variant):
    """tests/jax_corpus.py programs that lower to these LAPACK calls, run on cuda (both the
    lowered and XLA's compiled HLO), against jax's own outputs with test_conformance_jax's
    checks.  (`eigh` and `svd` are not here: the cuda syevd's eigenvectors differ from
    LAPACK's by a sign per column, and gesdd has no cuda kernel.)"""
    corpus = pytest.importorskip("jax_corpus")
    from test_conformance_jax import _check_outputs
    entry = corpus.load_entry(name)
    text = getattr(entry, f"{variant}_hlo")
    assert "lapack_" in text
    outs = _run(lapack, text, entry.inputs, "cuda")
    problems = _check_outputs(name, outs, list(entry.outputs))
    assert not problems, problems


# ---- the plugin: list-plugins, check-plugins, real-GPU compilation -----------------------------

def test_list_plugins_shows_cuda_kernels(lapack):
    from xlaplug.plugin.report import plugins_json
    rows = {r["plugin"]: r for r in plugins_json(lapack)["plugins"]}
    cuda_ops = set(rows["jax_lapack"]["kernels"]["cuda"])
    want = {f"lapack_{p}{r}_ffi" for r in ("potrf", "getrf", "trsm", "geqrf") for p in "sdcz"}
    want |= {f"lapack_{p}orgqr_ffi" for p in "sd"} | {f"lapack_{p}ungqr_ffi" for p in "cz"}
    want |= {f"lapack_{p}syevd_ffi" for p in "sd"} | {f"lapack_{p}heevd_ffi" for p in "cz"}
    assert cuda_ops == want
    assert rows["jax_lapack"]["status"] == "ok"
    assert len(rows["jax_lapack"]["kernels"]["cpu"]) == 56


def test_check_plugins_device_cuda(lapack):
    from xlaplug.plugin.check import check_plugins
    ops = sorted(op for op, dev in lapack.kernels if dev == "cuda" and op.startswith("lapack_"))
    results = check_plugins(Session(lapack, device="cuda"), ops, trials=1)
    assert len(results) == len(ops) == 24
    assert all(r.ok for r in results), [(r.op, r.detail) for r in results if not r.ok]


def test_kernels_compile_for_a_real_gpu():
    """The simulator type-checks nothing: compile every kernel to PTX for each dtype with
    numba's compile_ptx (needs NVVM, not a GPU); skipped where NVVM is unavailable."""
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0"}
    proc = subprocess.run([sys.executable, "-c", _PTX_SCRIPT], capture_output=True, text=True,
                          env=env, cwd=str(Path(__file__).resolve().parents[1]), timeout=300)
    if proc.returncode == 3:
        pytest.skip(proc.stdout.strip() or "NVVM unavailable")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]


_PTX_SCRIPT = r'''
import sys
import numpy as np
from numba import cuda, types as T
from numba.np.numpy_support import from_dtype
try:
    cuda.compile_ptx(lambda a: None, (T.float32[::1],), cc=(8, 0))
except Exception as e:
    print("NVVM unavailable:", str(e).splitlines()[0]); sys.exit(3)
import numba.cuda.dispatcher as disp
class _Dev:                    # device functions compile for "the current device"
    compute_capability = (8, 0)
disp.get_current_device = lambda: _Dev()
from xlaplug.bundled_plugins.jax_lapack import _cuda_eigh as E, _cuda_factor as F, _cuda_qr as Q
def arr(dt, nd):
    return T.Array(from_dtype(np.dtype(dt)), nd, "C")
bad = 0
i32, b = arr(np.int32, 1), T.boolean
for dt in (np.float32, np.float64, np.complex64, np.complex128):
    s, r = from_dtype(np.dtype(dt)), from_dtype(np.finfo(dt).dtype)
    m3, m2, rv = arr(dt, 3), arr(dt, 2), arr(np.finfo(dt).dtype, 2)
    for k, sig in [(F.potrf_kernel, (m3, m3, i32, b, s, s)),
                   (F.getrf_kernel, (m3, m3, arr(np.int32, 2), i32, s, r)),
                   (F.trsm_kernel, (m3, m3, arr(dt, 1), m3) + (b,) * 5),
                   (F.zero_kernel, (arr(dt, 1), s)), (F.zero_kernel, (i32, T.int32)),
                   (Q.geqrf_kernel, (m3, m3, m2, s, s)), (Q.orgqr_kernel, (m3, m2, m3, s, s)),
                   (E.jacobi_kernel, (m3, m3, m3, rv, i32, b, b, s, s, r))]:
        try:
            cuda.compile_ptx(k.py_func, sig, cc=(8, 0))
        except Exception as e:
            bad += 1
            print("FAIL", k.py_func.__name__, dt.__name__, " | ".join(str(e).splitlines()[:6]))
sys.exit(1 if bad else 0)
'''


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
