"""The bridge to real XLA (xlaplug/xla): jaxlib's private names, `run --reference xla`,
`check-plugins --reference xla`, `.mlir` / `.mlirbc` input, `compile --emit stablehlo`, and
the errors of each (one line, exit 2).  Expected values come from XLA itself (through jax)."""
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from xlaplug.xla import jaxlib_names, xla_executables  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

SWISH_PLUGIN = '''
import numpy as np
from xlaplug.plugin import Plugin

plugin = Plugin("acme", version="1.0")
EX = [(("f32[4,6]",), {"beta": np.float32(1.5)})]


@plugin.shape("acme.swish", examples=EX)
def shape(x, *, beta=1.0):
    return x


@plugin.decomposition("acme.swish")
def decomposition(b, x, *, beta=1.0):
    return b.multiply(x, b.logistic(b.multiply(x, b.constant(beta, x.dtype))))


@plugin.kernel("acme.swish", device="cpu", examples=EX)
def kernel(x, out, *, beta=1.0):
    out[...] = x / (1 + np.exp(-x.dtype.type(beta) * x)) + OFFSET
'''

SWISH_HLO = """HloModule swish
ENTRY e {
  x = f32[4,6] parameter(0)
  ROOT y = f32[4,6] custom-call(x), custom_call_target="acme.swish", api_version=API_VERSION_TYPED_FFI, backend_config={beta = 1.500000e+00 : f32}
}
"""


def plugin_dir(tmp_path: Path, offset: float = 0.0, extra: str = "") -> Path:
    d = tmp_path / f"plugins_{str(offset).replace('.', '_')}"
    d.mkdir(mode=0o755, exist_ok=True)
    (d / "acme.py").write_text(f"OFFSET = {offset}\n" + SWISH_PLUGIN + extra)
    return d


class Result:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def xlaplug(*args, cwd=None, input=None):
    """The CLI in this process (jax already started: fast), from `cwd`."""
    import os

    from click.testing import CliRunner

    from xlaplug.cli.main import main
    old = os.getcwd()
    os.chdir(cwd or ROOT)
    try:
        r = CliRunner(env={"COLUMNS": "120"}).invoke(main, [str(a) for a in args], input=input)
    finally:
        os.chdir(old)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return Result(r.exit_code, r.stdout, r.stderr)


def xlaplug_proc(*args, pre: str = ""):
    """The console entry point in a fresh process; `pre`: Python run before it (to simulate
    an environment)."""
    import os
    code = f"{pre}\nimport sys\nfrom xlaplug.cli import main\nsys.argv = ['xlaplug'] + " \
           f"{[str(a) for a in args]!r}\nmain()"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "COLUMNS": "120"}, timeout=300)


def one_error_line(r, *fragments):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    for f in fragments:
        assert f in lines[0], lines[0]
    return lines[0]


# ---- the private names ------------------------------------------------------------------------

def test_every_private_name_is_where_the_bridge_looks():
    assert jaxlib_names.missing_names() == [], (
        f"jax {jax.__version__} moved these private names the bridge uses "
        f"(xlaplug/xla/jaxlib_names.py): {jaxlib_names.missing_names()}")


def test_a_moved_name_is_named(monkeypatch):
    monkeypatch.setattr(jaxlib_names, "PRIVATE_NAMES",
                        jaxlib_names.PRIVATE_NAMES + (("jaxlib._hlo", "no_such_parser"),))
    assert jaxlib_names.missing_names() == ["jaxlib._hlo.no_such_parser"]
    with pytest.raises(jaxlib_names.NeedsJax, match=r"jaxlib\._hlo\.no_such_parser.*"
                                                    r"pip install 'xlaplug\[xla\]'"):
        jaxlib_names._name("jaxlib._hlo", "no_such_parser", "--reference xla")


def test_only_the_bridge_touches_private_names():
    """jaxlib's private modules appear in xlaplug/ only in xla/jaxlib_names.py."""
    hits = []
    for p in (ROOT / "xlaplug").rglob("*.py"):
        if p.name == "jaxlib_names.py":
            continue
        text = p.read_text()
        if re.search(r"\bjax\._src\b|\bjaxlib\._", text):
            hits.append(str(p.relative_to(ROOT)))
    assert hits == []


NO_JAX = "sys_ = __import__('sys'); sys_.modules['jax'] = None; sys_.modules['jaxlib'] = None"


def test_without_jax_each_bridge_verb_is_one_line_naming_the_extra(tmp_path):
    mlir = tmp_path / "f.mlir"
    mlir.write_text("module {\n}\n")
    r = xlaplug_proc("run", mlir, pre=NO_JAX)
    one_error_line(r, "error: reading MLIR", "needs jax: pip install 'xlaplug[xla]'")
    r = xlaplug_proc("run", EXAMPLES / "mlp.hlo", "--reference", "xla", pre=NO_JAX)
    assert one_error_line(r) == "error: --reference xla needs jax: pip install 'xlaplug[xla]'"
    r = xlaplug_proc("compile", EXAMPLES / "mlp.hlo", "--emit", "stablehlo", pre=NO_JAX)
    one_error_line(r, "--emit stablehlo needs jax")
    r = xlaplug_proc("check-plugins", "--reference", "xla", pre=NO_JAX)
    one_error_line(r, "check-plugins --reference xla needs jax")
    # ... and HLO runs as before without jax.
    r = xlaplug_proc("run", EXAMPLES / "mlp.hlo", "--json", pre=NO_JAX)
    assert r.returncode == 0, r.stderr


# ---- run --reference xla ----------------------------------------------------------------------

def test_reference_table_and_json_on_a_plugin_op(tmp_path):
    (tmp_path / "s.hlo").write_text(SWISH_HLO)
    plugins = plugin_dir(tmp_path)
    r = xlaplug("run", "s.hlo", "--plugins-dir", plugins, "--reference", "xla", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "xlaplug (cpu) against XLA:CPU" in r.stdout and "max ULP" in r.stdout
    assert "the output matches XLA:CPU" in r.stdout
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    np.savez(tmp_path / "in.npz", in0=x)
    r = xlaplug("run", "s.hlo", "--plugins-dir", plugins, "--reference", "xla", "--json",
                "--inputs", "in.npz", "--out", "o.npz", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    ref = json.loads(r.stdout)["reference"]
    assert ref["ok"] and ref["platform"] == "xla:cpu"
    (o,) = ref["outputs"]
    assert o["name"] == "out0" and o["shape"] == [4, 6] and o["max_ulp"] <= 4
    assert set(o) >= {"max_abs", "max_rel", "max_ulp", "ok"}
    # --out holds the kernel's outputs (x * sigmoid(1.5 x), as jax computes it)
    want = np.asarray(x * jax.nn.sigmoid(np.float32(1.5) * x))
    np.testing.assert_allclose(np.load(tmp_path / "o.npz")["out0"], want, rtol=1e-6, atol=1e-6)


def test_reference_mismatch_exits_1_naming_the_output(tmp_path):
    (tmp_path / "s.hlo").write_text(SWISH_HLO)
    r = xlaplug("run", "s.hlo", "--plugins-dir", plugin_dir(tmp_path, 0.01), "--reference",
                "xla", cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    assert "MISMATCH out0:" in r.stderr and "MISMATCH" in r.stdout


def test_reference_agrees_on_jax_programs_bit_for_bit_where_xla_is_exact(tmp_path):
    def f(x, i):
        return jnp.cumsum(x * 2, axis=1), (i * 3) % 5, x.T @ x > 0

    x = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    i = np.arange(6, dtype=np.int32)
    (tmp_path / "f.hlo").write_text(jax.jit(f).lower(x, i).as_text(dialect="hlo"))
    np.savez(tmp_path / "in.npz", in0=x, in1=i)
    r = xlaplug("run", "f.hlo", "--inputs", "in.npz", "--reference", "xla", "--json",
                cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    outs = json.loads(r.stdout)["reference"]["outputs"]
    assert [o["name"] for o in outs] == ["out0", "out1", "out2"]
    assert [o["dtype"] for o in outs] == ["f32", "s32", "pred"]
    assert outs[1]["max_ulp"] == outs[2]["max_ulp"] == 0


def test_reference_on_four_devices(tmp_path):
    r = xlaplug("run", EXAMPLES / "horovod_allreduce4.hlo", "--reference", "xla", "--json")
    assert r.returncode == 0, r.stderr
    obj = json.loads(r.stdout)
    assert obj["replicas"] * obj["partitions"] == 4
    assert [o["name"] for o in obj["reference"]["outputs"]] == \
        [f"out0 device {d}" for d in range(4)]


def test_xla_refusing_the_decomposed_module_is_its_message(tmp_path):
    """A decomposition XLA cannot compile (a custom call with no XLA:CPU handler)."""
    extra = '''

@plugin.decomposition("acme.opaque")
def opaque(b, x):
    return b.op("custom-call", x, shape=x.shape, custom_call_target="acme.nowhere")


@plugin.kernel("acme.opaque", device="cpu")
def opaque_cpu(x, out):
    out[...] = x
'''
    (tmp_path / "o.hlo").write_text(SWISH_HLO.replace("acme.swish", "acme.opaque")
                                    .replace(", api_version=API_VERSION_TYPED_FFI, "
                                             "backend_config={beta = 1.500000e+00 : f32}", ""))
    r = xlaplug("run", "o.hlo", "--plugins-dir", plugin_dir(tmp_path, extra=extra),
                "--reference", "xla", cwd=tmp_path)
    line = one_error_line(r, "error: XLA:CPU cannot compile the module:")
    assert "acme.nowhere" in line


def test_reference_options_and_inputs_that_do_not_fit(tmp_path):
    r = xlaplug("run", EXAMPLES / "mlp.hlo", "--reference", "xla", "--expect", "x.npz")
    one_error_line(r, "--reference xla and --expect")
    np.savez(tmp_path / "bad_shape.npz", in0=np.zeros((3, 3), np.float32))
    # --seed draws the parameters the file lacks: only in0 is checked
    r = xlaplug("run", EXAMPLES / "mlp.hlo", "--reference", "xla", "--inputs",
                tmp_path / "bad_shape.npz", "--seed", 0)
    one_error_line(r, "input in0 for parameter", "is f32[3,3]; the parameter is f32[")
    np.savez(tmp_path / "bad_dtype.npz", in0=np.array([["a"] * 16] * 4))
    r = xlaplug("run", EXAMPLES / "mlp.hlo", "--reference", "xla", "--inputs",
                tmp_path / "bad_dtype.npz", "--seed", 0, "--cast")
    one_error_line(r, "is <U1[4,16]; the parameter is f32[", "(no cast converts it: not a "
                   "numeric type)")


# ---- check-plugins --reference xla ------------------------------------------------------------

def test_check_plugins_reference_xla(tmp_path):
    r = xlaplug("check-plugins", "acme.swish", "--plugins-dir", plugin_dir(tmp_path),
                "--reference", "xla", "--json")
    assert r.returncode == 0, r.stderr
    details = [x["detail"] for x in json.loads(r.stdout)["results"]]
    assert details == ["kernel matches decomposition on XLA:CPU"] * 3
    r = xlaplug("check-plugins", "acme.swish", "--plugins-dir", plugin_dir(tmp_path, 0.01),
                "--reference", "xla", "--json")
    assert r.returncode == 1
    assert "kernel vs decomposition on XLA:CPU" in json.loads(r.stdout)["results"][0]["detail"]


# ---- StableHLO in and out ---------------------------------------------------------------------

def _f(x, y):
    return jnp.tanh(x) @ y, jnp.max(x, axis=0)


def _xy():
    g = np.random.default_rng(3)
    return (g.standard_normal((2, 3)).astype(np.float32),
            g.standard_normal((3, 4)).astype(np.float32))


def test_mlir_text_and_bytecode_run_like_jax(tmp_path):
    x, y = _xy()
    (tmp_path / "f.mlir").write_text(jax.jit(_f).lower(x, y).as_text())
    exported = jax.export.export(jax.jit(_f))(x, y)
    (tmp_path / "f.mlirbc").write_bytes(exported.mlir_module_serialized)
    (tmp_path / "f.bin").write_bytes(exported.mlir_module_serialized)  # found by its magic
    np.savez(tmp_path / "in.npz", in0=x, in1=y)
    want = [np.asarray(v) for v in jax.jit(_f)(x, y)]
    np.savez(tmp_path / "want.npz", out0=want[0], out1=want[1])
    for name in ("f.mlir", "f.mlirbc", "f.bin"):
        r = xlaplug("run", name, "--inputs", "in.npz", "--expect", "want.npz", cwd=tmp_path)
        assert r.returncode == 0, (name, r.stderr)
        assert "all 2 outputs match want.npz" in r.stdout
    r = xlaplug("compile", "f.mlirbc", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("HloModule ")


def test_mlir_error_is_located_in_the_mlir_file(tmp_path):
    (tmp_path / "bad.mlir").write_text(
        "module {\n  func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n"
        "    %0 = stablehlo.bogus %a : tensor<2xf32>\n    return %0 : tensor<2xf32>\n  }\n}\n")
    r = xlaplug("run", "bad.mlir", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    head, src, caret = r.stderr.splitlines()
    assert head == "bad.mlir:3:10: error: custom op 'stablehlo.bogus' is unknown"
    assert src == "    %0 = stablehlo.bogus %a : tensor<2xf32>" and caret == " " * 9 + "^"
    (tmp_path / "bad.mlirbc").write_bytes(b"ML\xefR\x00garbage")
    r = xlaplug("run", "bad.mlirbc", cwd=tmp_path)
    one_error_line(r, "error:")


def test_neither_hlo_nor_mlir(tmp_path):
    (tmp_path / "notes.txt").write_text("hello world\n")
    r = xlaplug("run", "notes.txt", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith(
        "notes.txt:1:7: error: neither HLO text nor MLIR (StableHLO or MHLO text, or "
        "bytecode): ")
    (tmp_path / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    r = xlaplug("compile", "image.png", cwd=tmp_path)
    assert r.returncode == 2 and "neither HLO text nor MLIR" in r.stderr.splitlines()[0]


def test_emit_stablehlo_decomposes_plugin_ops_and_round_trips(tmp_path):
    (tmp_path / "s.hlo").write_text(SWISH_HLO)
    plugins = plugin_dir(tmp_path)
    r = xlaplug("compile", "s.hlo", "--plugins-dir", plugins, "--emit", "stablehlo", "-o",
                "s.mlir", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "s.mlir").read_text()
    assert "stablehlo.logistic" in text and "custom_call" not in text
    # Any StableHLO consumer runs it: xlaplug with no plugins, and XLA:CPU.
    x = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    np.savez(tmp_path / "in.npz", in0=x)
    r = xlaplug("run", "s.hlo", "--plugins-dir", plugins, "--inputs", "in.npz", "--out",
                "kernel.npz", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = xlaplug("run", "s.mlir", "--no-plugins", "--inputs", "in.npz", "--expect", "kernel.npz",
                cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    (xla,) = xla_executables.run_stablehlo_on_xla_cpu(text, [x])
    np.testing.assert_allclose(xla, np.load(tmp_path / "kernel.npz")["out0"], rtol=1e-6,
                               atol=1e-6)


def test_tuple_parameter_is_refused_up_front(tmp_path):
    (tmp_path / "t.hlo").write_text(
        "HloModule t\nENTRY e {\n  p = (f32[2], f32[2]) parameter(0)\n"
        "  ROOT a = f32[2] get-tuple-element(p), index=0\n}\n")
    r = xlaplug("run", "t.hlo", "--reference", "xla", cwd=tmp_path)
    assert one_error_line(r) == ("error: --reference xla: parameter 'p' is (f32[2], f32[2]); "
                                 "XLA's runtime takes array parameters only")


def test_max_ulp_and_differences():
    """Our own arithmetic: ULP distances by hand."""
    import ml_dtypes

    from xlaplug.runtime.stats import diff, max_ulp
    one_up = np.nextafter(np.float32(1), np.float32(2))
    assert max_ulp(np.float32([1, 2]), np.array([one_up, 2], np.float32)) == 1
    # across zero: the smallest subnormals either side are 2 apart
    tiny = np.float32(1e-45)
    assert max_ulp(np.float32([-tiny]), np.float32([tiny])) == 2
    assert max_ulp(np.float64([np.nan, -0.0]), np.float64([np.nan, 0.0])) == 0
    assert max_ulp(np.float64([np.inf]), np.float64([-np.inf])) == 1 << 62
    bf = ml_dtypes.bfloat16
    assert max_ulp(np.array([2], bf), np.array([2.015625], bf)) == 1
    assert max_ulp(np.complex64([1 + 1j]), np.complex64([1 + 1j * one_up])) == 1
    d = diff("out0", np.int32([5, -3]), np.int32([5, 4]))
    assert (d.max_abs, d.max_ulp, d.ok) == (7.0, 7, False)
    d = diff("out0", np.float32([1.0, 4.0]), np.float32([1.0, 5.0]))
    assert (d.max_abs, d.max_rel, d.ok) == (1.0, 0.2, False)


def test_reference_reads_standard_input_once():
    r = xlaplug("run", "-", "--reference", "xla", input=(EXAMPLES / "mlp.hlo").read_text())
    assert r.returncode == 0, r.stderr
    assert "the output matches XLA:CPU" in r.stdout
