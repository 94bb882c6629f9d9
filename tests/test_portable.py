"""The portable artifact (`compile --decompose-all`, issue 26): HLO as XLA takes it before
its own passes -- plugin ops decomposed, nothing of xlaplug's optimization (no fusion) --
and XLA:CPU runs it to xlaplug's outputs; refusals under --decompose-all say what is
missing."""
import numpy as np
import pytest

import xlaplug
from xlaplug.hlo.errors import HloError
from xlaplug.passes import resolve_pipeline
from xlaplug.plugin import Plugin


def swish_plugin(calls: list, decomposition: bool = True) -> Plugin:
    p = Plugin("acme_portable", version="0")

    @p.shape("acme.swish")
    def shape(x, *, beta=1.0):
        return x

    if decomposition:
        @p.decomposition("acme.swish")
        def decomposed(b, x, *, beta=1.0):
            return b.multiply(x, b.logistic(b.multiply(x, b.constant(beta, x.dtype))))

    @p.kernel("acme.swish", device="cpu")
    def kernel(x, out, *, beta=1.0):
        calls.append(x.shape)
        out[...] = x / (1 + np.exp(-x.dtype.type(beta) * x))
    return p


def test_portable_is_a_named_pipeline_without_optimizations():
    names = [p.name for p in resolve_pipeline("portable")]
    assert names == ["custom-call-lowering", "inline-calls", "dce"]
    assert resolve_pipeline("portable")[0].decompose_all is True


@pytest.mark.jax
def test_decompose_all_artifact_has_no_fusion_and_xla_cpu_runs_it_to_the_kernels_outputs():
    jax = pytest.importorskip("jax")
    from xlaplug.xla.xla_executables import run_on_xla_cpu

    def f(x, w):  # the dot's result is 65536 elements: the default pipeline fuses the swish
        y = x @ w
        call = jax.ffi.ffi_call("acme.swish", jax.ShapeDtypeStruct(y.shape, y.dtype))
        return call(y, beta=np.float32(1.5)) + 1.0

    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 16)).astype(np.float32)
    w = rng.standard_normal((16, 256)).astype(np.float32) * 0.25
    text = jax.jit(f).lower(x, w).as_text(dialect="hlo")
    calls: list = []
    fused = xlaplug.compile(text, plugins=[swish_plugin(calls)], bundled_plugins=False,
                            prefer="decomposition")
    assert "fusion" in fused.hlo  # the default pipeline does fuse the decomposed swish
    ours = xlaplug.compile(text, plugins=[swish_plugin(calls)], bundled_plugins=False)(x, w)[0]
    assert calls == [(256, 256)]
    art = xlaplug.compile(text, plugins=[swish_plugin(calls)], bundled_plugins=False,
                          decompose_all=True)
    assert [p.name for p in art.pass_manager.pipeline] == ["custom-call-lowering",
                                                            "inline-calls", "dce"]
    hlo = art.hlo
    assert "fusion" not in hlo and "custom-call" not in hlo and "logistic(" in hlo
    assert "{0,1}" not in hlo  # no layouts beyond the input's (jax's are all row-major)
    (theirs,) = run_on_xla_cpu(hlo, [[x, w]], what="test")[0]
    np.testing.assert_allclose(theirs, ours, rtol=1e-5, atol=1e-5)
    y = x.astype(np.float64) @ w
    np.testing.assert_allclose(theirs, y / (1 + np.exp(-1.5 * y)) + 1, rtol=1e-4, atol=1e-4)


DOUBLE_CALL = """HloModule m
ENTRY e {
  p = f32[4] parameter(0)
  ROOT s = f32[4] custom-call(p), custom_call_target="acme.swish"
}
"""


def test_decompose_all_refusal_names_the_kernel_that_is_there(tmp_path):
    calls: list = []
    with pytest.raises(HloError) as e:
        xlaplug.compile(DOUBLE_CALL, plugins=[swish_plugin(calls, decomposition=False)],
                        bundled_plugins=False, decompose_all=True)
    msg = e.value.message
    assert "op acme.swish (plugin acme_portable) has a kernel for cpu but no decomposition" \
        in msg and "no kernel" not in msg
    # Without --decompose-all the kernel serves it.
    exe = xlaplug.compile(DOUBLE_CALL, plugins=[swish_plugin(calls, decomposition=False)],
                          bundled_plugins=False)
    assert exe(np.zeros(4, np.float32))[0].tolist() == [0.0] * 4


def test_decompose_all_refusal_in_the_cli(tmp_path):
    from click.testing import CliRunner

    from xlaplug.cli import main
    plug = tmp_path / "plugins"
    plug.mkdir()
    (plug / "k.py").write_text(
        "import numpy as np\nfrom xlaplug.plugin import Plugin\nplugin = Plugin('konly')\n"
        "@plugin.shape('acme.swish')\ndef s(x):\n    return x\n"
        "@plugin.kernel('acme.swish', device='cpu')\ndef k(x, out):\n    out[...] = x\n")
    f = tmp_path / "m.hlo"
    f.write_text(DOUBLE_CALL)
    r = CliRunner().invoke(main, ["compile", str(f), "--plugins-dir", str(plug),
                                  "--decompose-all", "-o", str(tmp_path / "out.hlo")])
    assert r.exit_code == 2
    assert "op acme.swish (plugin konly) has a kernel for cpu but no decomposition" in r.output
    assert "Traceback" not in r.output


def _portable(*args):
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, str(root / "benchmarks" / "portable.py"), *args],
                          capture_output=True, text=True, timeout=600, env=env,
                          stdin=subprocess.DEVNULL)


@pytest.mark.jax
@pytest.mark.slow
def test_portable_benchmark_runs_every_artifact_on_xla_cpu(tmp_path):
    r = _portable("--platform", "cpu", "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "cpu: f32 0.0001, f64 1e-10" in r.stdout  # the tolerances it used
    rows = [ln.split() for ln in r.stdout.splitlines() if ln.startswith(("example_", "linalg_",
                                                                        "ffi_"))]
    names = {row[0] for row in rows}
    assert {"example_rms_norm", "example_horovod", "example_mlp", "ffi_swish_dot",
            "linalg_cholesky", "linalg_solve", "linalg_inv", "linalg_slogdet", "linalg_qr",
            "linalg_eigh", "linalg_svd", "linalg_triangular_solve"} <= names
    assert all(row[1] == "cpu" and row[2] == "ok" for row in rows), r.stdout
    for name in names:  # every artifact written, none with a fusion or a plugin op left
        hlo = (tmp_path / f"{name}.hlo").read_text()
        assert "fusion" not in hlo and "lapack_" not in hlo


@pytest.mark.jax
def test_portable_benchmark_refuses_an_absent_platform():
    r = _portable("--platform", "cpu,nosuch", "--only", "linalg_inv")
    assert r.returncode == 2 and "jax has no platform nosuch here" in r.stderr


def _cli(*args):
    from click.testing import CliRunner

    from xlaplug.cli import main
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.mark.jax
def test_reference_names_a_platform(tmp_path):
    """`run --reference xla:cpu` runs the artifact (jax_lapack's ops decomposed) on that
    backend; an absent platform, or a bad spelling, is one line and exit 2."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    a = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]], np.float32)
    f = tmp_path / "chol.hlo"
    f.write_text(jax.jit(lambda x: jnp.linalg.cholesky(x) @ x).lower(a).as_text(dialect="hlo"))
    np.savez(tmp_path / "in.npz", in0=a)
    r = _cli("run", f, "--inputs", tmp_path / "in.npz", "--reference", "xla:cpu", "--json")
    assert r.exit_code == 0, r.output
    import json
    ref = json.loads(r.output)["reference"]
    assert ref["ok"] and ref["platform"] == "xla:cpu"
    present = {d.platform for d in jax.devices()}
    if "tpu" not in present:
        r = _cli("run", f, "--reference", "xla:tpu")
        assert r.exit_code == 2 and r.output.strip().splitlines() == [
            "error: --reference xla:tpu: jax has no tpu platform here (present: cpu)"]
    r = _cli("run", f, "--reference", "lapack")
    assert r.exit_code == 2 and "expected xla or xla:PLATFORM" in r.output
