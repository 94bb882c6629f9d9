"""docs/plugins.md, walked with jax: the tutorial's code blocks and commands do what it says.

The plugin and the JAX program are taken from the document's code blocks (their first line
names the file), written into tmp_path, and the commands the document shows are run there.
"""
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "plugins.md"

jax = pytest.importorskip("jax")


def code_blocks() -> dict[str, str]:
    """The ```python blocks whose first line is `# FILENAME`, by file name."""
    text = DOC.read_text()
    blocks = re.finditer(r"```python\n# (\S+)\n(.*?)```", text, re.S)
    return {m.group(1): m.group(2) for m in blocks}


def xlaplug(command: str, cwd: Path):
    """A `$ xlaplug ...` line of the document, run as the user would."""
    assert f"$ {command}\n" in DOC.read_text(), f"the document does not show `{command}`"
    argv = shlex.split(command)
    assert argv[0] == "xlaplug"
    env = {k: v for k, v in os.environ.items() if k != "XLAPLUG_PLUGIN_PATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["COLUMNS"] = "200"
    return subprocess.run([sys.executable, "-m", "xlaplug.cli", *argv[1:]], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_tutorial_end_to_end(tmp_path, monkeypatch, capsys):
    blocks = code_blocks()
    assert {"swish_jax.py", "plugins/acme_swish.py", "compare.py", "embed.py"} <= set(blocks)
    text = DOC.read_text()

    # 1. The JAX program: lowers to HLO text with the custom call and its typed attribute.
    monkeypatch.chdir(tmp_path)
    ns: dict = {"__name__": "swish_jax"}
    exec(compile(blocks["swish_jax.py"], "swish_jax.py", "exec"), ns)
    printed = capsys.readouterr().out
    hlo = (tmp_path / "swish.hlo").read_text()
    assert printed.strip() == hlo.strip()
    for fragment in ('custom_call_target="acme.swish"', "custom-call(x.1)",
                     "backend_config={beta = 1.500000e+00 : f32}"):
        assert fragment in hlo and fragment in text, fragment
    # ... which jax itself cannot run on CPU: no FFI target is registered for it.
    with pytest.raises(Exception, match="acme.swish"):
        jax.block_until_ready(jax.jit(ns["swish"])(ns["x"]))

    # Without the plugin, xlaplug names the missing target.
    r = xlaplug("xlaplug run swish.hlo --no-plugins", tmp_path)
    assert r.returncode == 2
    assert ("error: custom-call 'ffi_call.1': no plugin provides target 'acme.swish' on cpu "
            "(no kernel for cpu, no decomposition); no plugins are loaded") in r.stderr

    # 2. The plugin, from the document.
    plugins = tmp_path / "plugins"
    plugins.mkdir(mode=0o755)
    (plugins / "acme_swish.py").write_text(blocks["plugins/acme_swish.py"])

    # 3. check-plugins: the kernel matches the decomposition.
    r = xlaplug("xlaplug check-plugins --plugins-dir plugins acme.swish", tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("kernel matches decomposition") == 1 and "FAIL" not in r.stdout
    assert r.stdout.splitlines()[-1] == "1 op checked (6 checks): all ok"
    assert "1 op checked (6 checks): all ok" in DOC.read_text()

    # 4. run, and compare with jax computing swish directly.
    r = xlaplug("xlaplug run swish.hlo --plugins-dir plugins --inputs inputs.npz --out "
                "outputs.npz", tmp_path)
    assert r.returncode == 0, r.stderr
    x = np.load(tmp_path / "inputs.npz")["in0"]
    got = np.load(tmp_path / "outputs.npz")["out0"]
    want = np.asarray(x * jax.nn.sigmoid(np.float32(1.5) * x))
    assert got.dtype == np.float32 and got.shape == (4, 6)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    exec(compile(blocks["compare.py"], "compare.py", "exec"), {"__name__": "compare"})
    # ... and on XLA, the kernel served as an FFI handler (section 6).
    r = xlaplug("xlaplug run swish.hlo --plugins-dir plugins --inputs inputs.npz --engine xla "
                "--expect outputs.npz", tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "the output matches outputs.npz" in r.stdout
    # ... and from Python, with an explicit session (the document's last code block).
    monkeypatch.delenv("XLAPLUG_PLUGIN_PATH", raising=False)
    embed: dict = {"__name__": "embed"}
    exec(compile(blocks["embed.py"], "embed.py", "exec"), embed)
    np.testing.assert_array_equal(embed["out"], got)

    # list-plugins shows the entry the document shows.
    r = xlaplug("xlaplug list-plugins --plugins-dir plugins --json", tmp_path)
    assert r.returncode == 0, r.stderr
    (shown,) = [json.loads(m) for m in re.findall(r"```json\n(.*?)```", text, re.S)]
    (entry,) = [p for p in json.loads(r.stdout)["plugins"] if p["plugin"] == "acme"]
    assert entry == shown

    # 5. --decompose-all: a module with no custom call left, which runs with no plugins.
    r = xlaplug("xlaplug compile swish.hlo --plugins-dir plugins --decompose-all -o "
                "swish.portable.hlo", tmp_path)
    assert r.returncode == 0, r.stderr
    portable = (tmp_path / "swish.portable.hlo").read_text()
    assert "custom-call" not in portable and "logistic(" in portable
    r = xlaplug("xlaplug run swish.portable.hlo --no-plugins --inputs inputs.npz --expect "
                "outputs.npz", tmp_path)
    assert r.returncode == 0, r.stderr
    assert "the output matches outputs.npz" in r.stdout


def test_ring_allreduce_section(tmp_path):
    """The worked example of a core-opcode override on many devices: check-plugins --devices
    holds the ring against the core kernel, and the same plugin runs under mpiexec."""
    blocks = code_blocks()
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "ring_allreduce.py").write_text(blocks["plugins/ring_allreduce.py"])
    p = xlaplug("xlaplug check-plugins all-reduce --devices 4 --plugins-dir plugins --json",
                tmp_path)
    assert p.returncode == 0, p.stderr
    obj = json.loads(p.stdout)
    assert obj["ok"] and obj["devices"] == 4
    assert [r["detail"] for r in obj["results"]] == ["kernel matches core kernel on 4 devices"] * 3
    ns: dict = {}
    exec(compile(blocks["plugins/ring_allreduce.py"], "ring_allreduce.py", "exec"), ns)
    (tmp_path / "ring.hlo").write_text(ns["EXAMPLE"])
    env = {k: v for k, v in os.environ.items() if k != "XLAPLUG_PLUGIN_PATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    core = subprocess.run([sys.executable, "-m", "xlaplug.cli", "run", "ring.hlo", "--out",
                           "core.npz"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert core.returncode == 0, core.stderr
    mpiexec = Path(sys.executable).with_name("mpiexec")
    if not mpiexec.exists():
        pytest.skip("no mpiexec next to python: pip install 'xlaplug[mpi]'")
    ring = subprocess.run([str(mpiexec), "-n", "4", sys.executable, "-m", "xlaplug.cli", "run",
                           "ring.hlo", "--plugins-dir", "plugins", "--expect", "core.npz"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert ring.returncode == 0, ring.stderr
    assert "the output of 4 devices matches core.npz" in ring.stdout


@pytest.mark.slow
def test_jax_op_section(tmp_path, monkeypatch, capsys):
    """Section 6: the plugin op as a jax function (jit, grad, vmap, export), the Horovod
    all-reduce in shard_map, and `check-plugins --jax`."""
    blocks = code_blocks()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("XLAPLUG_PLUGIN_PATH", raising=False)
    (tmp_path / "plugins").mkdir(mode=0o755)
    (tmp_path / "plugins" / "acme_swish.py").write_text(blocks["plugins/acme_swish.py"])
    capsys.readouterr()
    ns: dict = {"__name__": "swish_op"}
    exec(compile(blocks["swish_op.py"], "swish_op.py", "exec"), ns)
    assert "(2, 4, 6)" in capsys.readouterr().out
    x = ns["x"]
    want = jax.grad(lambda v: jax.numpy.sum(v * jax.nn.sigmoid(1.5 * v)))(x)
    np.testing.assert_allclose(ns["grad"], want, rtol=1e-6, atol=1e-6)
    exec(compile(blocks["horovod_shard_map.py"], "horovod_shard_map.py", "exec"),
         {"__name__": "horovod_shard_map"})
    assert "(4, 3)" in capsys.readouterr().out

    r = xlaplug("xlaplug check-plugins --plugins-dir plugins acme.swish --jax --verbose",
                tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    text = DOC.read_text()
    assert r.stdout.count("kernel matches decomposition in jax (jit)") == 6
    assert r.stdout.count("gradients: check_grads (fwd, rev) passes on the decomposition") == 2
    assert "`kernel matches decomposition in jax (jit)`" in text
    assert "`gradients: check_grads (fwd, rev) passes on the decomposition`" in text


def test_xla_section(tmp_path, monkeypatch, capsys):
    """Section 7: xlaplug.jax from ffi_call to the kernel, check against XLA, `run
    --reference xla`, `check-plugins --reference xla`, and the StableHLO artifact."""
    blocks = code_blocks()
    text = DOC.read_text()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("XLAPLUG_PLUGIN_PATH", raising=False)
    exec(compile(blocks["swish_jax.py"], "swish_jax.py", "exec"), {"__name__": "swish_jax"})
    (tmp_path / "plugins").mkdir(mode=0o755)
    (tmp_path / "plugins" / "acme_swish.py").write_text(blocks["plugins/acme_swish.py"])
    capsys.readouterr()

    # xlaplug.jax: the kernel serves the ffi_call; check agrees with XLA running the
    # decomposition.
    ns: dict = {"__name__": "swish_layer"}
    exec(compile(blocks["swish_layer.py"], "swish_layer.py", "exec"), ns)
    printed = capsys.readouterr().out
    assert "max ULP" in printed and "ok" in printed and ns["report"].ok
    x, w = ns["x"], ns["w"]
    hw = x @ w
    want = np.asarray(hw * jax.nn.sigmoid(np.float32(1.5) * hw))
    np.testing.assert_allclose(ns["h"], want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ns["total"], want.sum(axis=1), rtol=1e-5, atol=1e-5)

    # run --reference xla: the table the document shows (figures and all).
    r = xlaplug("xlaplug run swish.hlo --plugins-dir plugins --inputs inputs.npz --reference "
                "xla", tmp_path)
    assert r.returncode == 0, r.stderr
    shown = re.search(r"--reference xla\n(.*?)```", text, re.S).group(1)
    assert [ln.rstrip() for ln in r.stdout.strip().splitlines()] == \
        [ln.rstrip() for ln in shown.strip().splitlines()]

    r = xlaplug("xlaplug check-plugins --plugins-dir plugins acme.swish --reference xla --json",
                tmp_path)
    assert r.returncode == 0, r.stderr
    details = [x["detail"] for x in json.loads(r.stdout)["results"]]
    assert details == ["kernel matches decomposition on XLA:CPU"] * 6
    assert "`kernel matches decomposition on XLA:CPU`" in text

    # the StableHLO artifact runs with no plugin, to the kernel's outputs.
    r = xlaplug("xlaplug run swish.hlo --plugins-dir plugins --inputs inputs.npz --out "
                "outputs.npz", tmp_path)
    assert r.returncode == 0, r.stderr
    r = xlaplug("xlaplug compile swish.hlo --plugins-dir plugins --emit stablehlo -o swish.mlir",
                tmp_path)
    assert r.returncode == 0, r.stderr
    mlir = (tmp_path / "swish.mlir").read_text()
    assert "stablehlo.logistic" in mlir and "acme.swish" not in mlir
    r = xlaplug("xlaplug run swish.mlir --no-plugins --inputs inputs.npz --expect outputs.npz",
                tmp_path)
    assert r.returncode == 0, r.stderr
    assert "the output matches outputs.npz" in r.stdout


def test_serving_inside_xla_section(tmp_path):
    """Section 6: xlaplug.jax.register serves acme.swish (Python handler) and an @njit
    acme.softclip (compiled handler) inside XLA; plain jax.jit runs both.  In a subprocess:
    an FFI registration lasts as long as its process (test_tutorial_end_to_end needs jax
    *not* to know acme.swish)."""
    blocks = code_blocks()
    text = DOC.read_text()
    (tmp_path / "plugins").mkdir(mode=0o755)
    (tmp_path / "plugins" / "acme_swish.py").write_text(blocks["plugins/acme_swish.py"])
    (tmp_path / "serve_in_xla.py").write_text(blocks["serve_in_xla.py"] +
                                              "\nnp.save('y.npy', np.asarray(y))\n")
    env = {k: v for k, v in os.environ.items() if k != "XLAPLUG_PLUGIN_PATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    r = subprocess.run([sys.executable, "serve_in_xla.py"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    shown = re.search(r"It prints:\n\n```console\n(.*?)```", text, re.S).group(1)
    assert r.stdout.strip() == shown.strip()
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6)
    h = x * jax.nn.sigmoid(np.float32(1.5) * x)
    want = np.asarray(2 * jax.numpy.tanh(h * 3 / 2))
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-6, atol=1e-6)


def test_check_plugins_engine_xla_in_section_6(tmp_path):
    """Section 6: `check-plugins --engine xla` prints what the document shows."""
    (tmp_path / "plugins").mkdir(mode=0o755)
    (tmp_path / "plugins" / "acme_swish.py").write_text(code_blocks()["plugins/acme_swish.py"])
    command = "xlaplug check-plugins --plugins-dir plugins acme.swish --engine xla"
    r = xlaplug(command, tmp_path)
    assert r.returncode == 0, r.stderr
    shown = re.search(rf"\$ {re.escape(command)}\n(.*?)```", DOC.read_text(), re.S).group(1)
    assert [ln.rstrip() for ln in r.stdout.strip().splitlines()] == shown.strip().splitlines()
