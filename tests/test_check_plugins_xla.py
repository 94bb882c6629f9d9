"""`check-plugins --engine xla`: each CPU kernel run inside XLA as a typed-FFI handler (the
compiled handler of an @njit kernel, else the Python handler) against its decomposition run
by XLA:CPU; what the engine cannot check is reported as not checked, never as a pass."""
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("jax")

from xlaplug.cli import main  # noqa: E402
from xlaplug.runtime.check import check_plugins  # noqa: E402
from xlaplug.runtime.executable import load_session  # noqa: E402

pytestmark = pytest.mark.jax

PLUGIN = '''
import numpy as np
from numba import njit
from xlaplug.plugin import Plugin
plugin = Plugin("acme_cx", version="1")
EX = [(("f32[4,6]",), {"beta": np.float32(1.5)}), (("f64[5]",), {"beta": np.float64(0.5)})]

def swish(b, x, *, beta=1.0):
    return b.multiply(x, b.logistic(b.multiply(x, b.constant(beta, x.dtype))))

def same(x, *, beta=1.0):
    return x

for op in ("acme.swish", "acme.nj", "acme.boom", "acme.only_decomposed"):
    plugin.shape(op, examples=EX)(same)
    plugin.decomposition(op)(swish)
plugin.shape("acme.no_decomposition", examples=EX)(same)

@plugin.kernel("acme.swish", device="cpu")
def kernel(x, out, *, beta=1.0):
    out[...] = x / (1 + np.exp(-x.dtype.type(beta) * x)) + OFFSET

@plugin.kernel("acme.nj", device="cpu", examples=EX)
@njit
def nj(x, out, beta=1.0):
    for i in range(x.size):
        v = x.flat[i]
        out.flat[i] = v / (1 + np.exp(-beta * v)) + OFFSET

@plugin.kernel("acme.boom", device="cpu")
def boom(x, out, *, beta=1.0):
    raise ValueError("the boom kernel gives up")

@plugin.kernel("acme.no_decomposition", device="cpu")
def no_decomposition(x, out, *, beta=1.0):
    out[...] = x
'''


def plugins(tmp_path: Path, offset=0.0) -> str:
    d = tmp_path / f"plugins{offset}"
    d.mkdir(exist_ok=True)
    (d / "acme_cx.py").write_text(PLUGIN.replace("OFFSET", repr(offset)))
    return str(d)


def cli(*args):
    return CliRunner().invoke(main, ["check-plugins", "--engine", "xla", *map(str, args)])


def rows(r) -> dict:
    out: dict = {}
    for x in json.loads(r.stdout)["results"]:
        out.setdefault(x["op"], []).append(x)
    return out


def test_kernels_in_xla_match_and_what_cannot_be_checked_is_said(tmp_path):
    d = plugins(tmp_path)
    r = cli("--plugins-dir", d, "--json", "--trials", "2", "acme.swish", "acme.nj",
            "acme.only_decomposed", "acme.no_decomposition")
    assert r.exit_code == 0, r.output
    obj = json.loads(r.stdout)
    assert obj["ok"] and obj["engine"] == "xla"
    got = rows(r)
    assert [x["detail"] for x in got["acme.swish"]] == \
        ["kernel in XLA (Python handler) matches decomposition on XLA:CPU"] * 4
    assert [x["detail"] for x in got["acme.nj"]] == \
        ["kernel in XLA (compiled handler) matches decomposition on XLA:CPU"] * 4
    assert [(x["ok"], x["detail"]) for x in got["acme.only_decomposed"]] == [
        (None, "not checked under --engine xla: the op has no CPU kernel (--engine xla "
               "decomposes it)")]
    assert [(x["ok"], x["detail"]) for x in got["acme.no_decomposition"]] == [
        (None, "not checked under --engine xla: the op has no decomposition to compare its "
               "kernel with")]
    r = cli("--plugins-dir", d, "--trials", "1", "acme_cx")  # the table: boom fails
    assert r.exit_code == 1
    last = r.output.strip().splitlines()[-1]
    assert last == ("1 of 3 ops failed (2 of 6 checks): acme.boom; 2 ops not checked: "
                    "acme.no_decomposition, acme.only_decomposed"), r.output


def test_a_wrong_kernel_is_a_mismatch_and_a_raising_one_names_plugin_and_op(tmp_path):
    d = plugins(tmp_path, offset=0.25)
    r = cli("--plugins-dir", d, "--json", "--trials", "1", "acme.swish", "acme.nj", "acme.boom")
    assert r.exit_code == 1, r.output
    obj = json.loads(r.stdout)
    assert obj["ok"] is False
    got = rows(r)
    for op, how in (("acme.swish", "Python handler"), ("acme.nj", "compiled handler")):
        assert all(x["ok"] is False and x["detail"].startswith(
            f"output 0: kernel in XLA ({how}) vs decomposition on XLA:CPU: ")
            for x in got[op]), got[op]
    boom = got["acme.boom"]
    assert len(boom) == 2 and all(x["ok"] is False for x in boom)
    assert all("plugin 'acme_cx' kernel for 'acme.boom' raised ValueError: the boom kernel "
               "gives up" in x["detail"] for x in boom), boom
    r = cli("--plugins-dir", d, "acme.boom", "--verbose")  # the table, not a traceback
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert "FAIL" in r.output and "acme.boom" in r.output


@pytest.mark.parametrize("extra, said", [
    (["--device", "cuda"], "checks CPU kernels; --device cuda is not served by it"),
    (["--devices", "2"], "checks on one XLA device: drop --devices"),
    (["--jax"], "runs each decomposition on XLA:CPU; --jax names another reference: give one"),
])
def test_options_the_engine_cannot_honour_are_one_line_errors(extra, said):
    r = cli(*extra)
    assert r.exit_code == 2, r.output
    assert r.output == f"error: check-plugins --engine xla {said}\n"


@pytest.mark.slow
def test_every_bundled_op_with_a_cpu_kernel_and_a_decomposition_passes():
    session = load_session()
    reg = session.registry
    results = check_plugins(session, trials=1, engine="xla")
    assert [r for r in results if r.ok is False] == []
    checked = {r.op for r in results if r.ok}
    wanted = {op for op, dev in reg.kernels if dev == "cpu" and op in reg.decompositions
              and not reg.kernels[(op, dev)].communicator}
    assert checked == wanted and "example.rms_norm" in wanted and len(wanted) > 50
    unchecked = {r.op: r.detail for r in results if r.ok is None}
    assert set(unchecked) == {op for op, _ in reg.kernels} - wanted
    assert "needs a communicator" in unchecked["HorovodAllreduce"]
    assert "no decomposition" in unchecked["check.expect_eq"]
