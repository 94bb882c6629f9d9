"""`check-plugins --jax`: kernels against their decompositions run as jax ops under jax.jit,
and the decompositions' gradients checked with jax.test_util.check_grads."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")

from xlaplug import load_session  # noqa: E402
from xlaplug.plugin import Plugin  # noqa: E402
from xlaplug.runtime.check import check_plugins  # noqa: E402

pytestmark = pytest.mark.jax
ROOT = Path(__file__).resolve().parents[1]

PLUGIN = '''
import numpy as np
from xlaplug.plugin import Plugin
plugin = Plugin("acme_cj", version="1")
EX = [(("f32[4,6]",), {"beta": np.float32(1.5)}), (("f64[5]",), {"beta": np.float64(0.5)})]

@plugin.shape("acme.swish", examples=EX)
def shape(x, *, beta=1.0):
    return x

@plugin.decomposition("acme.swish")
def decomposition(b, x, *, beta=1.0):
    return b.multiply(x, b.logistic(b.multiply(x, b.constant(beta, x.dtype))))

@plugin.kernel("acme.swish", device="cpu")
def kernel(x, out, *, beta=1.0):
    out[...] = x / (1 + np.exp(-x.dtype.type(beta) * x)) + OFFSET
'''


def cli(tmp_path, *args, offset=0.0):
    d = tmp_path / "plugins"
    d.mkdir(exist_ok=True)
    (d / "acme_cj.py").write_text(PLUGIN.replace("OFFSET", repr(offset)))
    env = {k: v for k, v in os.environ.items() if k != "XLAPLUG_PLUGIN_PATH"}
    env["PYTHONPATH"] = str(ROOT)
    env["COLUMNS"] = "250"
    return subprocess.run([sys.executable, "-m", "xlaplug.cli", "check-plugins",
                           "--plugins-dir", str(d), *args], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.mark.slow
def test_cli_values_and_gradients(tmp_path):
    r = cli(tmp_path, "--jax", "acme.swish", "--verbose")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("kernel matches decomposition in jax (jit)") == 6
    assert r.stdout.count("check_grads (fwd, rev) passes on the decomposition") == 2
    r = cli(tmp_path, "--jax", "acme.swish", offset=0.25)
    assert r.returncode == 1 and "FAIL" in r.stdout
    assert "kernel vs decomposition in jax (jit)" in r.stdout
    r = cli(tmp_path, "--jax", "--reference", "xla", "acme.swish")
    assert r.returncode == 2 and "--jax and --reference xla name two references" in r.stderr


@pytest.mark.slow
def test_bundled_ops_pass_in_jax_with_gradients():
    session = load_session()
    ops = ["example.rms_norm", "HorovodAllreduce", "HorovodReducescatter"]
    results = check_plugins(session, ops, trials=1, reference="jax")
    assert results and all(r.ok for r in results), [r for r in results if not r.ok]
    grads = [r for r in results if r.detail.startswith("gradients:")]
    assert {r.op for r in grads} == set(ops)
    assert any("not checked (integer" in r.detail for r in grads)  # HorovodAllreduce s32[8]


def test_a_decomposition_jax_cannot_differentiate_fails_its_gradient_row():
    """A reducer that is no monoid runs as a generic lax.reduce: jax has no derivative."""
    from xlaplug.hlo.attr_types import Word
    from xlaplug.hlo.ir import Computation, Shape
    from xlaplug.hlo.builder import Builder
    p = Plugin("maxish", version="0")
    ex = [(("f32[3,4]",), {})]

    @p.shape("maxish.rowmax", examples=ex)
    def shape(x):
        return Shape.array(x.element_type, x.dims[:1])

    @p.decomposition("maxish.rowmax")
    def decomposition(b, x):
        rb = Builder("r")
        p0, p1 = (rb.parameter(k, Shape.array("f32", ())) for k in (0, 1))
        comp = Computation("r", rb.instructions, rb.select(rb.compare(p0, p1, direction=Word("GT")),
                                                           p0, p1))
        return b.reduce(x, b.constant(-np.inf), [1], comp)

    @p.kernel("maxish.rowmax", device="cpu")
    def kernel(x, out):
        out[...] = x.max(axis=1)
    results = check_plugins(load_session([p]), ["maxish.rowmax"], trials=1, reference="jax")
    values = [r for r in results if "kernel matches decomposition in jax" in r.detail]
    assert values and all(r.ok for r in values)
    (bad,) = [r for r in results if not r.ok]
    assert bad.detail.startswith("jax: ") and "reduce" in bad.detail
