"""`xlaplug run --engine xla` (one device): XLA:CPU runs the module, plugin ops with a CPU
kernel are typed-FFI custom calls served by their kernels, ops with only a decomposition are
decomposed; the interpreter's outputs are the oracle, and XLA itself runs it."""
import json

import numpy as np
import pytest
from click.testing import CliRunner

jax = pytest.importorskip("jax")

from xlaplug.runtime.executable import load_session  # noqa: E402
from xlaplug.cli import main  # noqa: E402
from xlaplug.hlo.errors import HloError  # noqa: E402
from xlaplug.plugin import Plugin  # noqa: E402
from xlaplug.runtime.on_xla import run_on_xla  # noqa: E402
from xlaplug.xla.engine import engine_text  # noqa: E402

pytestmark = pytest.mark.jax

RMS = """HloModule rms
ENTRY e {
  x = f32[8,64] parameter(0)
  s = f32[64] parameter(1)
  y = f32[8,64] custom-call(x, s), custom_call_target="example.rms_norm", backend_config={epsilon = 1.000000e-06 : f32}
  ROOT z = f32[8,64] add(y, x)
}
"""


def cli(*args, cwd):
    (cwd / "rms.hlo").write_text(RMS)
    return CliRunner().invoke(main, [a.replace("@", str(cwd) + "/") for a in args])


def test_cli_engine_xla_matches_the_interpreter(tmp_path):
    r = cli("run", "@rms.hlo", "--out", "@interp.npz", cwd=tmp_path)
    assert r.exit_code == 0, r.output
    r = cli("run", "@rms.hlo", "--engine", "xla", "--expect", "@interp.npz", "--repeat", "3",
            cwd=tmp_path)
    assert r.exit_code == 0, r.output
    assert "the output matches" in r.output
    r = cli("run", "@rms.hlo", "--engine", "xla", "--json", cwd=tmp_path)
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["engine"] == "xla"


def test_engine_options_it_does_not_take_are_one_line_errors(tmp_path):
    # (--replicas 2 runs on XLA's host devices: tests/test_engine_devices.py)
    for extra in (["--reference", "xla"], ["--interpret"],
                  ["--device", "cuda"]):  # (issue 22: no CUDA handler until a GPU tests one)
        r = cli("run", "@rms.hlo", "--engine", "xla", *extra, cwd=tmp_path)
        assert r.exit_code == 2, (extra, r.output)
        assert r.output.startswith("error: --engine xla") and r.output.count("\n") == 1
        assert "cuda" not in extra or "--device cuda is not served" in r.output, r.output


def test_plugin_op_stays_a_typed_ffi_call_and_a_decomposition_only_op_is_decomposed():
    p = Plugin("engine_test")

    @p.shape("engine_test.double")
    def shape(x):
        return x

    @p.decomposition("engine_test.double")
    def decomposition(b, x):
        return b.add(x, x)
    session = load_session([p])
    text = RMS.replace("ROOT z = f32[8,64] add(y, x)",
                       'ROOT z = f32[8,64] custom-call(y), custom_call_target="engine_test.double"')
    hlo, served = engine_text(text, session.registry)
    assert 'custom_call_target="example.rms_norm"' in hlo
    assert "api_version=API_VERSION_TYPED_FFI" in hlo and "engine_test.double" not in hlo
    assert [s.op for s in served] == ["example.rms_norm"]
    rng = np.random.default_rng(0)
    x, s = rng.standard_normal((8, 64), np.float32), rng.standard_normal(64, np.float32)
    (got,) = run_on_xla(text, session, [x, s]).outputs
    y = x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6) * s
    np.testing.assert_allclose(got, 2 * y, rtol=1e-5, atol=1e-5)


def test_a_jax_lowered_ffi_call_runs_on_the_engine_like_the_interpreter():
    p = Plugin("engine_jax")

    @p.kernel("engine_jax.cube")
    def cube(x, out, *, shift=0.0):
        out[...] = x ** 3 + shift

    def f(x):
        y = jax.ffi.ffi_call("engine_jax.cube", jax.ShapeDtypeStruct(x.shape, x.dtype))(
            x * 2, shift=np.float32(0.5))
        return y.sum(axis=0), y
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    text = jax.jit(f).lower(x).as_text(dialect="hlo")
    session = load_session([p])
    got = run_on_xla(text, session, [x], repeat=2).outputs
    want = [np.asarray(v) for v in jax.jit(lambda x: ((8 * x ** 3 + 0.5).sum(0),
                                                      8 * x ** 3 + 0.5))(x)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_a_backend_config_xla_cannot_hand_a_handler_is_refused_at_its_line():
    p = Plugin("engine_opaque")

    @p.kernel("engine_opaque.copy")
    def copy(x, out, **attrs):
        out[...] = x
    text = RMS.replace('custom_call_target="example.rms_norm", backend_config={epsilon = '
                       '1.000000e-06 : f32}', 'custom_call_target="engine_opaque.copy", '
                       'backend_config="opaque bytes"')
    with pytest.raises(HloError, match=r"custom-call 'y': backend_config is not an MLIR "
                                       r"dictionary") as e:
        engine_text(text, load_session([p]).registry)
    assert e.value.line == 5


def test_communicator_ops_are_decomposed_on_the_engine(tmp_path):
    """examples/horovod.hlo: the Horovod kernels need devices to meet; XLA runs their
    decompositions, to the interpreter's values."""
    from pathlib import Path
    hlo = str(Path(__file__).resolve().parents[1] / "examples" / "horovod.hlo")
    r = CliRunner().invoke(main, ["run", hlo, "--out", str(tmp_path / "h.npz")])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["run", hlo, "--engine", "xla", "--expect",
                                  str(tmp_path / "h.npz")])
    assert r.exit_code == 0, r.output
    assert "the output matches" in r.output


def test_targets_xla_holds_itself_stay_xlas():
    """jax_lapack's kernels share their names with jaxlib's own LAPACK targets: on the
    engine those calls stay XLA's, and the module runs to jax's values."""
    import jax.numpy as jnp
    a = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]], np.float32)
    text = jax.jit(jnp.linalg.cholesky).lower(a).as_text(dialect="hlo")
    assert "lapack_spotrf_ffi" in text
    session = load_session()
    hlo, served = engine_text(text, session.registry)
    assert "lapack_spotrf_ffi" in hlo and served == []
    (got,) = run_on_xla(text, session, [a]).outputs
    np.testing.assert_allclose(got, np.asarray(jax.jit(jnp.linalg.cholesky)(a)), rtol=1e-6)


def test_xlaplug_jax_jit_with_the_xla_engine_matches_the_interpreter():
    import xlaplug.jax as xj
    p = Plugin("engine_jit")

    @p.kernel("engine_jit.square")
    def square(x, out):
        out[...] = x * x

    def f(x):
        y = jax.ffi.ffi_call("engine_jit.square", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
        return {"y": y, "s": y.sum()}
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    on_xla = xj.jit(f, plugins=[p], engine="xla")(x)
    interp = xj.jit(f, plugins=[p])(x)
    for k in ("y", "s"):
        np.testing.assert_array_equal(on_xla[k], interp[k])
    with pytest.raises(HloError, match="engine must be 'interpreter' or 'xla'"):
        xj.jit(f, engine="gpu")
