"""jax_lapack's decompositions at their edges (issue 26): hand-written `lapack_*_ffi` calls
whose factorizations fail (info codes), geqp3's fixed columns, empty and 1x1 matrices, each
against XLA:CPU's own LAPACK call or the kernel, the decomposition in xlaplug and its
artifact on XLA:CPU; and check-plugins jax_lapack, every kernel against its
decomposition (on xlaplug, and --reference xla)."""
import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import xlaplug  # noqa: E402
from test_lapack_decompositions import close, general  # noqa: E402
from xlaplug.xla.xla_executables import run_on_xla_cpu  # noqa: E402

pytestmark = pytest.mark.jax


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
