"""The Python API (xlaplug.compile -> Executable): sources, plugins, many devices, errors, and
that the CLI prints what the API computes.  Op semantics are checked against XLA (jax)."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import xlaplug
from cli_in_process import xlaplug_in_process
from xlaplug.plugin import Plugin

ROOT = Path(__file__).resolve().parents[1]
RMS = ROOT / "examples" / "rms_norm.hlo"
HOROVOD4 = ROOT / "examples" / "horovod_allreduce4.hlo"

DOUBLE = """HloModule m
ENTRY e {
  p = f32[5]{0} parameter(0)
  ROOT d = f32[5]{0} custom-call(p), custom_call_target="t.double"
}
"""


def double_plugin(calls: list) -> Plugin:
    p = Plugin("t", version="0.1")

    @p.shape("t.double")
    def _shape(x):
        return x

    @p.decomposition("t.double")
    def _decomposed(b, x):
        return b.add(x, x)

    @p.kernel("t.double", device="cpu")
    def _kernel(x, out):
        calls.append(x.shape)
        np.add(x, x, out=out)
    return p


def test_path_text_and_pathlike_compile_the_same(tmp_path):
    text = RMS.read_text()
    a, b, c = xlaplug.compile(str(RMS)), xlaplug.compile(text), xlaplug.compile(RMS)
    assert a.hlo == b.hlo == c.hlo
    x = np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)
    s = np.ones(64, np.float32)
    assert all(np.array_equal(a(x, s)[0], e(x, s)[0]) for e in (b, c))


@pytest.mark.jax
def test_results_are_xlas():
    import jax
    import jax.numpy as jnp

    def f(x, y):
        return jnp.sin(x) * y, jnp.maximum(x, y) - jnp.float32(1)
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    y = np.linspace(1, 2, 12, dtype=np.float32).reshape(3, 4)
    text = jax.jit(f).lower(x, y).as_text(dialect="hlo")
    got = xlaplug.compile(text)(x, y)
    want = jax.jit(f)(x, y)
    assert len(got) == 2
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, np.asarray(w))


def test_plugin_objects_kernel_and_decomposition_report_what_served():
    calls = []
    p = double_plugin(calls)
    x = np.arange(5, dtype=np.float32)
    exe = xlaplug.compile(DOUBLE, plugins=[p], bundled_plugins=False)
    assert exe.plugins == [xlaplug.ServedOp("t.double", "t", "kernel", "cpu", 1)]
    assert np.array_equal(exe(x)[0], x + x) and calls == [(5,)]
    portable = xlaplug.compile(DOUBLE, plugins=[p], decompose_all=True)
    assert portable.plugins == [xlaplug.ServedOp("t.double", "t", "decomposition", "cpu", 1)]
    assert "custom-call" not in portable.hlo and "add(" in portable.hlo
    assert np.array_equal(portable(x)[0], x + x) and calls == [(5,)]  # kernel not called


def test_served_ops_count_overrides_and_plugin_ops_with_or_without_passes():
    """Exe.plugins counts each plugin op and each core opcode a plugin kernel overrides on
    the device (a kernel for another device does not count) -- the same whether passes ran
    or not (`passes="none"` reuses the count taken before them)."""
    p = double_plugin([])

    @p.kernel("negate", device="cpu")
    def _negate(x, out):
        np.negative(x, out=out)

    @p.kernel("abs", device="cuda")
    def _abs(x, out):
        np.abs(x, out=out)

    text = DOUBLE.replace("ROOT d = f32[5]{0} custom-call(p)",
                          "n = f32[5]{0} negate(p)\n  m = f32[5]{0} negate(n)\n"
                          "  a = f32[5]{0} abs(m)\n  ROOT d = f32[5]{0} custom-call(a)")
    want = [xlaplug.ServedOp("t.double", "t", "kernel", "cpu", 1),
            xlaplug.ServedOp("negate", "t", "kernel", "cpu", 2)]
    for passes in (None, "none"):
        exe = xlaplug.compile(text, plugins=[p], bundled_plugins=False, passes=passes)
        assert sorted(exe.plugins, key=lambda s: s.op) == sorted(want, key=lambda s: s.op)
        x = np.arange(5, dtype=np.float32)
        assert np.array_equal(exe(x)[0], 2 * np.abs(x))


def test_plugins_dir_and_bundled_switch(tmp_path):
    (tmp_path / "dbl.py").write_text(
        "import numpy as np\nfrom xlaplug.plugin import Plugin\nplugin = Plugin('dirplug')\n"
        "@plugin.shape('t.double')\ndef s(x):\n    return x\n"
        "@plugin.kernel('t.double', device='cpu')\ndef k(x, out):\n    np.multiply(x, 2, out=out)\n")
    tmp_path.chmod(0o755)
    (tmp_path / "dbl.py").chmod(0o644)
    exe = xlaplug.compile(DOUBLE, plugins=[tmp_path])
    assert exe.plugins[0].plugin == "dirplug"
    assert {p.name for p in exe.session.registry.plugins} >= {"dirplug", "horovod"}
    alone = xlaplug.compile(DOUBLE, plugins=[str(tmp_path)], bundled_plugins=False)
    assert [p.name for p in alone.session.registry.plugins] == ["dirplug"]


def test_many_devices_stacked_like_the_cli(tmp_path):
    exe = xlaplug.compile(HOROVOD4)
    assert exe.num_devices == 4 and (exe.grid.replicas, exe.grid.partitions) == (4, 1)
    rng = np.random.default_rng(1)
    w = rng.standard_normal(1024).astype(np.float32)
    grads = rng.standard_normal((4, 1024)).astype(np.float32)
    (new_w,) = exe(w, grads)
    assert new_w.shape == (4, 1024)
    # every device ends with the same weights (an all-reduce of the gradients)
    assert all(np.array_equal(new_w[0], new_w[d]) for d in range(4))
    np.savez(tmp_path / "in.npz", in0=w, in1=grads)
    r = xlaplug_in_process("run", HOROVOD4, "--inputs", tmp_path / "in.npz", "--out",
                           tmp_path / "out.npz")
    assert r.returncode == 0, r.stderr
    assert np.array_equal(np.load(tmp_path / "out.npz")["out0"], new_w)


def test_run_options_match_the_cli_inputs():
    exe = xlaplug.compile(RMS)
    seeded = exe.run(seed=3).outputs
    again = exe.run(inputs={}, seed=3, repeat=2)
    assert np.array_equal(seeded[0], again.outputs[0]) and len(again.run_times) == 2
    x = np.ones((8, 64), np.float32)
    half = exe.run(inputs={"in0": x}, seed=3)  # in1 drawn from the seed
    assert half.outputs[0].shape == (8, 64)


def test_thunks_and_hlo_round_trip():
    exe = xlaplug.compile(RMS)
    assert exe.thunks_text().splitlines()[-1].startswith(f"{len(exe.thunks.thunks)} thunks in ")
    assert xlaplug.compile(exe.hlo).hlo == exe.hlo


def test_errors_are_the_clis_messages(tmp_path):
    bad = tmp_path / "bad.hlo"
    bad.write_text("HloModule m\nENTRY e {\n  ROOT p = f32[2] parmeter(0)\n}\n")
    with pytest.raises(xlaplug.HloError) as e:
        xlaplug.compile(bad)
    r = xlaplug_in_process("compile", bad)
    assert r.returncode == 2 and r.stderr == str(e.value) + "\n"
    assert str(e.value).startswith(f"{bad}:3:19: error: unknown opcode 'parmeter'")


@pytest.mark.parametrize("call, message", [
    (lambda: xlaplug.compile(RMS)(np.ones((8, 64), np.float32)),
     "module 'm' takes 2 arguments, got 1"),
    (lambda: xlaplug.compile(RMS)(np.ones((8, 63), np.float32), np.ones(64, np.float32)),
     "input in0 for parameter 'x' is f32[8,63]; the parameter is f32[8,64]"),
    (lambda: xlaplug.compile(RMS, device="tpu"), "device must be 'cpu' or 'cuda', got 'tpu'"),
    (lambda: xlaplug.compile(RMS, plugins=[3]),
     "plugins: expected plugin directories or Plugin objects, got int"),
    (lambda: xlaplug.compile(3), "compile: expected a path or HLO text, got int"),
    (lambda: xlaplug.compile(str(ROOT / "nope.hlo")), "cannot read"),
    (lambda: xlaplug.compile(RMS, passes="no-such-pass"), "no-such-pass"),
])
def test_bad_calls_raise_hlo_errors(call, message):
    with pytest.raises(xlaplug.HloError) as e:
        call()
    assert message in str(e.value)
    assert "\n" not in str(e.value).split("\n")[0]


def test_import_xlaplug_is_cheap():
    code = ("import sys, xlaplug; heavy = {'numba', 'jax', 'rich', 'lark', 'xlaplug.backends'}; "
            "print(sorted(heavy & set(sys.modules)))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"
