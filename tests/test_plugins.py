"""Plugins end to end: discovery, loading errors, attributes, custom-call lowering, kernels,
overrides, passes, list-plugins / check-plugins, and the bundled plugins.

Plugin files are written into tmp_path by each test (modes set explicitly: the loader refuses
world-writable places).  Expected values of op semantics come from jax.
"""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cli_in_process import xlaplug_in_process
from xlaplug.cli.main import main
from xlaplug.plugin import BUNDLED_DIR, Session, load_plugins

ROOT = Path(__file__).resolve().parents[1]


# ---- helpers ---------------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _isolated(monkeypatch):
    """No plugin path from the environment.  (Sessions are explicit and loading plugins
    changes no process-wide table, so there is nothing else to restore.)"""
    monkeypatch.delenv("XLAPLUG_PLUGIN_PATH", raising=False)


def _jnp():
    jax = pytest.importorskip("jax")
    return jax, jax.numpy


def cli(*args, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def proc(*args, env=None):
    full = {k: v for k, v in os.environ.items() if k != "XLAPLUG_PLUGIN_PATH"}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "xlaplug.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, env=full, timeout=120)


def plugin_dir(path: Path, files: dict[str, str]) -> Path:
    """A plugins directory holding `files` (name -> source; 'pkg/x.py' makes folders)."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)
    for name, src in files.items():
        f = path / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.parent.chmod(0o755)
        f.write_text(textwrap.dedent(src))
        f.chmod(0o644)
    return path


def hlo_file(tmp_path: Path, name: str, text: str) -> Path:
    f = tmp_path / name
    f.write_text(textwrap.dedent(text).lstrip())
    return f


def run_out(tmp_path, hlo, *args, inputs=None, expect_ok=True):
    """`xlaplug run` in-process; returns (result, list of output arrays)."""
    argv = ["run", hlo, "--out", tmp_path / "out.npz", *args]
    if inputs is not None:
        np.savez(tmp_path / "in.npz", **{f"in{k}": v for k, v in enumerate(inputs)})
        argv += ["--inputs", tmp_path / "in.npz"]
    r = cli(*argv)
    if expect_ok:
        assert r.exit_code == 0, r.output
    if r.exit_code != 0:
        return r, None
    with np.load(tmp_path / "out.npz") as z:
        return r, [z[f"out{k}"] for k in range(len(z.files))]


def listing(*args):
    r = cli("list-plugins", "--json", *args)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def by_name(obj) -> dict:
    return {p["plugin"]: p for p in obj["plugins"] if p["plugin"] != "-"}


def errors_of(obj) -> dict:
    return {p["source"]: p["status"] for p in obj["plugins"] if p["status"] != "ok"}


def jax_swish(x, beta):
    jax, jnp = _jnp()
    return np.asarray(x * jax.nn.sigmoid(jnp.float32(beta) * x))


X23 = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)

# The worked plugin of the tests: swish with a `beta` attribute.
ACME = '''
    import numpy as np
    from xlaplug.plugin import Plugin

    plugin = Plugin("acme", version="2.0", description="acme ops for the tests")
    CALLS = []   # (op, kwargs) for every kernel call

    EX = [(("f32[4,8]",), {"beta": np.float32(1.5)}), (("f64[3]",), {"beta": np.float64(0.5)})]

    @plugin.shape("acme.swish", examples=EX)
    def swish_shape(x, *, beta=1.0):
        return x

    @plugin.decomposition("acme.swish")
    def swish_decomposition(b, x, *, beta=1.0):
        return b.multiply(x, b.logistic(b.multiply(x, b.constant(beta, x.dtype))))

    @plugin.kernel("acme.swish", device="cpu", examples=EX)
    def swish_cpu(x, out, *, beta=1.0):
        CALLS.append(("acme.swish", {"beta": beta}))
        out[...] = x / (1 + np.exp(-x.dtype.type(beta) * x))

    @plugin.kernel("acme.swish", device="cuda")
    def swish_cuda(x, out, *, beta=1.0):
        raise NotImplementedError

    # only a decomposition
    @plugin.decomposition("acme.swish_d")
    def swish_d(b, x, *, beta=1.0):
        return swish_decomposition(b, x, beta=beta)

    # only a CUDA kernel
    @plugin.kernel("acme.gpu_only", device="cuda")
    def gpu_only(x, out):
        pass
'''

SWISH_HLO = '''
    HloModule swish
    ENTRY e {
      x = f32[2,3] parameter(0)
      ROOT y = f32[2,3] custom-call(x), custom_call_target="acme.swish", backend_config={beta = 1.500000e+00 : f32}
    }
'''


def _custom(target: str, config: str = "", shape: str = "f32[2,3]", operand: str = "f32[2,3]"):
    return (f"HloModule m\nENTRY e {{\n  x = {operand} parameter(0)\n"
            f"  ROOT y = {shape} custom-call(x), custom_call_target=\"{target}\"{config}\n}}\n")


@pytest.fixture
def acme(tmp_path):
    return plugin_dir(tmp_path / "acme_plugins", {"acme.py": ACME})


# ---- discovery -------------------------------------------------------------------------------

def test_bundled_plugins_discovered():
    obj = listing()
    plugins = by_name(obj)
    assert {"example_rms_norm", "horovod", "stablehlo_check"} <= set(plugins)
    for name in ("example_rms_norm", "horovod", "stablehlo_check"):
        p = plugins[name]
        assert p["status"] == "ok"
        assert Path(p["source"]) == BUNDLED_DIR / f"{name}.py"
    rms = plugins["example_rms_norm"]
    assert rms["version"] == "1.0" and rms["ops"] == ["example.rms_norm"]
    assert rms["decompositions"] == ["example.rms_norm"]
    assert rms["kernels"] == {"cpu": ["example.rms_norm"], "cuda": ["example.rms_norm"]}
    horovod_ops = ["HorovodAllgather", "HorovodAllreduce", "HorovodAlltoall",
                   "HorovodBroadcast", "HorovodReducescatter"]
    assert plugins["horovod"]["decompositions"] == horovod_ops
    assert plugins["horovod"]["kernels"] == {"cpu": horovod_ops}
    assert plugins["stablehlo_check"]["kernels"]["cpu"] == [
        "check.expect_almost_eq", "check.expect_close", "check.expect_eq"]


def _named(name: str, op: str) -> str:
    return f'''
        from xlaplug.plugin import Plugin
        plugin = Plugin("{name}", version="0.{len(name)}")

        @plugin.shape("{op}")
        def shape(x):
            return x

        @plugin.kernel("{op}", device="cpu")
        def kernel(x, out):
            out[...] = -x
    '''


def test_plugins_dir_is_repeatable(tmp_path):
    a = plugin_dir(tmp_path / "a", {"pa.py": _named("plug_a", "acme.a")})
    b = plugin_dir(tmp_path / "b", {"pb.py": _named("plug_b", "acme.b")})
    plugins = by_name(listing("--plugins-dir", a, "--plugins-dir", b))
    assert plugins["plug_a"]["source"] == str(a / "pa.py")
    assert plugins["plug_b"]["source"] == str(b / "pb.py")
    assert plugins["plug_a"]["kernels"] == {"cpu": ["acme.a"]}
    # Both are usable in one run.
    jax, jnp = _jnp()
    f = hlo_file(tmp_path, "ab.hlo", '''
        HloModule m
        ENTRY e {
          x = f32[2,3] parameter(0)
          a = f32[2,3] custom-call(x), custom_call_target="acme.a"
          ROOT b = f32[2,3] custom-call(a), custom_call_target="acme.b"
        }
    ''')
    _, (out,) = run_out(tmp_path, f, "--plugins-dir", a, "--plugins-dir", b, inputs=[X23])
    np.testing.assert_array_equal(out, np.asarray(-(-jnp.asarray(X23))))
    # Only one of the two directories: the other op is missing.
    r = cli("run", f, "--plugins-dir", a)
    assert r.exit_code == 2 and "no plugin provides target 'acme.b'" in r.output


def test_plugin_path_environment_variable(tmp_path):
    c = plugin_dir(tmp_path / "c", {"pc.py": _named("plug_c", "acme.c")})
    d = plugin_dir(tmp_path / "d", {"pd.py": _named("plug_d", "acme.d")})
    env = {"XLAPLUG_PLUGIN_PATH": os.pathsep.join([str(c), str(d)])}
    r = cli("list-plugins", "--json", env=env)
    assert r.exit_code == 0, r.output
    plugins = by_name(json.loads(r.stdout))
    assert plugins["plug_c"]["source"] == str(c / "pc.py")
    assert plugins["plug_d"]["source"] == str(d / "pd.py")
    assert "example_rms_norm" in plugins  # the bundled ones still load
    # The variable also serves `run`; without it the op is missing.
    f = hlo_file(tmp_path, "c.hlo", _custom("acme.c"))
    r = cli("run", f, env=env)
    assert r.exit_code == 0, r.output
    r = cli("run", f)
    assert r.exit_code == 2 and "no plugin provides target 'acme.c'" in r.output


def test_no_plugins_loads_none(tmp_path, acme):
    obj = listing("--no-plugins")
    assert obj["plugins"] == [] and obj["overrides"] == {}
    obj = listing("--no-plugins", "--plugins-dir", acme)
    assert obj["plugins"] == []
    rms = hlo_file(tmp_path, "rms.hlo", _custom("example.rms_norm", shape="f32[2,3]")
                   .replace("custom-call(x)", "custom-call(x, s)")
                   .replace("parameter(0)\n", "parameter(0)\n  s = f32[3] parameter(1)\n"))
    assert cli("run", rms).exit_code == 0
    r = cli("run", rms, "--no-plugins")
    assert r.exit_code == 2
    assert "no plugin provides target 'example.rms_norm' on cpu" in r.output
    assert "no plugins are loaded" in r.output


EP_MODULE = '''
    from xlaplug.plugin import Plugin
    plugin = Plugin("acme_ep", version="3.1")

    @plugin.shape("acme.ep_neg")
    def shape(x):
        return x

    @plugin.kernel("acme.ep_neg", device="cpu")
    def kernel(x, out):
        out[...] = -x
'''

EP_TWO = '''
    from xlaplug.plugin import Plugin
    first = Plugin("acme_ep_first")
    second = Plugin("acme_ep_second")

    @first.decomposition("acme.ep_first")
    def d1(b, x):
        return b.negate(x)

    @second.decomposition("acme.ep_second")
    def d2(b, x):
        return b.abs(x)
'''


def test_entry_point_plugins(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    (site / "xlaplug_ep_acme.py").write_text(textwrap.dedent(EP_MODULE))
    (site / "xlaplug_ep_two.py").write_text(textwrap.dedent(EP_TWO))
    dist = site / "acme_xlaplug-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-xlaplug\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[xlaplug.plugins]\nacme = xlaplug_ep_acme:plugin\ntwo = xlaplug_ep_two\n"
        "missing = xlaplug_ep_not_there:plugin\n")
    monkeypatch.syspath_prepend(str(site))
    for m in ("xlaplug_ep_acme", "xlaplug_ep_two"):
        monkeypatch.delitem(sys.modules, m, raising=False)

    for attempt in range(2):  # a second load in the same process finds the same plugins
        reg = load_plugins()
        recs = {r.source: r for r in reg.records}
        acme = recs["entry point acme (xlaplug_ep_acme:plugin)"]
        assert [p.name for p in acme.plugins] == ["acme_ep"] and acme.error is None, attempt
        assert acme.plugins[0].source == "entry point acme"
        two = recs["entry point two (xlaplug_ep_two)"]
        assert [p.name for p in two.plugins] == ["acme_ep_first", "acme_ep_second"], attempt
        missing = recs["entry point missing (xlaplug_ep_not_there:plugin)"]
        assert missing.plugins == []
        assert "ModuleNotFoundError" in missing.error and "xlaplug_ep_not_there" in missing.error
        assert reg.kernel_for("acme.ep_neg", "cpu") is not None
        assert {"acme.ep_first", "acme.ep_second"} <= set(reg.decompositions)
    assert not any(r.source.startswith("entry point")
                   for r in load_plugins(entry_points=False).records)

    # The command line sees them too, and runs the op.
    plugins = by_name(listing())
    assert plugins["acme_ep"]["version"] == "3.1"
    assert plugins["acme_ep"]["source"] == "entry point acme"
    jax, jnp = _jnp()
    _, (out,) = run_out(tmp_path, hlo_file(tmp_path, "ep.hlo", _custom("acme.ep_neg")),
                        inputs=[X23])
    np.testing.assert_array_equal(out, np.asarray(jnp.negative(X23)))


def test_module_with_two_plugins(tmp_path):
    d = plugin_dir(tmp_path / "two", {"twin.py": '''
        from xlaplug.plugin import Plugin
        left = Plugin("twin_left", version="1")
        right = Plugin("twin_right", version="2")

        @left.kernel("acme.left", device="cpu")
        def l(x, out):
            out[...] = x + 1

        @right.decomposition("acme.right")
        def r(b, x):
            return b.multiply(x, b.constant(3, x.dtype))
    '''})
    obj = listing("--plugins-dir", d)
    plugins = by_name(obj)
    assert plugins["twin_left"]["source"] == plugins["twin_right"]["source"] == str(d / "twin.py")
    assert plugins["twin_left"]["kernels"] == {"cpu": ["acme.left"]}
    assert plugins["twin_right"]["decompositions"] == ["acme.right"]
    assert plugins["twin_right"]["version"] == "2"
    jax, jnp = _jnp()
    f = hlo_file(tmp_path, "t.hlo", '''
        HloModule m
        ENTRY e {
          x = f32[2,3] parameter(0)
          l = f32[2,3] custom-call(x), custom_call_target="acme.left"
          ROOT r = f32[2,3] custom-call(l), custom_call_target="acme.right"
        }
    ''')
    _, (out,) = run_out(tmp_path, f, "--plugins-dir", d, inputs=[X23])
    np.testing.assert_allclose(out, np.asarray((jnp.asarray(X23) + 1) * 3), rtol=1e-6)


def test_package_folder_plugin(tmp_path):
    d = plugin_dir(tmp_path / "pk", {
        "acme_pkg/__init__.py": "from .ops import plugin\n",
        "acme_pkg/ops.py": '''
            from xlaplug.plugin import Plugin
            from ._helpers import FACTOR
            plugin = Plugin("acme_pkg", version="0.9")

            @plugin.kernel("acme.scale", device="cpu")
            def scale(x, out):
                out[...] = x * FACTOR
        ''',
        "acme_pkg/_helpers.py": "FACTOR = 4\n",
        "not_a_package/helper.py": "raise RuntimeError('never imported')\n",
        "_private.py": "raise RuntimeError('never imported')\n",
    })
    obj = listing("--plugins-dir", d)
    assert by_name(obj)["acme_pkg"]["source"] == str(d / "acme_pkg")
    assert not errors_of(obj)  # folders without __init__.py and _private files are skipped
    jax, jnp = _jnp()
    _, (out,) = run_out(tmp_path, hlo_file(tmp_path, "s.hlo", _custom("acme.scale")),
                        "--plugins-dir", d, inputs=[X23])
    np.testing.assert_allclose(out, np.asarray(jnp.asarray(X23) * 4))


def test_plugin_that_fails_to_import(tmp_path):
    d = plugin_dir(tmp_path / "br", {
        "a_raises.py": 'from xlaplug.plugin import Plugin\nplugin = Plugin("half")\n'
                       'raise RuntimeError("acme init failed")\n',
        "b_syntax.py": 'from xlaplug.plugin import Plugin\nplugin = Plugin("syn"\ndef f(:\n',
        "c_import.py": "import xlaplug_no_such_module_xyz\n",
        "d_good.py": _named("good", "acme.good"),
    })
    obj = listing("--plugins-dir", d)
    errs = errors_of(obj)
    assert errs[str(d / "a_raises.py")] == f"{d / 'a_raises.py'}:3: RuntimeError: acme init failed"
    assert errs[str(d / "b_syntax.py")].startswith(f"{d / 'b_syntax.py'}:3: SyntaxError")
    assert errs[str(d / "c_import.py")] == (f"{d / 'c_import.py'}:1: ModuleNotFoundError: "
                                            "No module named 'xlaplug_no_such_module_xyz'")
    plugins = by_name(obj)
    assert plugins["good"]["status"] == "ok" and "half" not in plugins
    # `run` warns and goes on with the others ...
    f = hlo_file(tmp_path, "g.hlo", _custom("acme.good"))
    r = cli("run", f, "--plugins-dir", d)
    assert r.exit_code == 0, r.output
    assert f"warning: plugin {d / 'a_raises.py'} not loaded: " in r.output
    assert "acme init failed" in r.output
    # ... and --strict makes the first failure fatal: exit 2, one message, no traceback.
    for verb in (["run", f], ["list-plugins"], ["check-plugins"]):
        r = cli(*verb, "--plugins-dir", d, "--strict")
        assert r.exit_code == 2, (verb, r.output)
        assert (f"error: plugin {d / 'a_raises.py'} failed to load: "
                f"{d / 'a_raises.py'}:3: RuntimeError: acme init failed") in r.output
        assert "Traceback" not in r.output


def test_plugin_that_fails_to_register(tmp_path):
    d = plugin_dir(tmp_path / "cf", {
        "a_first.py": '''
            from xlaplug.plugin import Plugin
            plugin = Plugin("dup_a")

            @plugin.decomposition("acme.dup")
            def d(b, x):
                return b.negate(x)
        ''',
        "b_second.py": '''
            from xlaplug.plugin import Plugin
            plugin = Plugin("dup_b")

            @plugin.decomposition("acme.only_b")
            def only(b, x):
                return x

            @plugin.decomposition("acme.dup")
            def d(b, x):
                return b.abs(x)
        ''',
    })
    reg = load_plugins([d], entry_points=False)
    rec = {r.source: r for r in reg.records}[str(d / "b_second.py")]
    assert rec.error == "op 'acme.dup' is provided by both plugin 'dup_a' and plugin 'dup_b'"
    assert rec.plugins == []
    # Nothing of the refused plugin stays registered; the first keeps its op.
    assert "acme.only_b" not in reg.decompositions
    assert reg.decompositions["acme.dup"].plugin.name == "dup_a"
    r = cli("list-plugins", "--plugins-dir", d, "--strict")
    assert r.exit_code == 2
    assert "provided by both plugin 'dup_a' and plugin 'dup_b'" in r.output


@pytest.mark.parametrize("mode", [0o777, 0o1777], ids=["world-writable", "sticky"])
def test_world_writable_directory_refused(tmp_path, mode):
    d = plugin_dir(tmp_path / "ww", {"p.py": _named("ww", "acme.ww")})
    d.chmod(mode)
    f = hlo_file(tmp_path, "w.hlo", _custom("acme.ww"))
    want = (f"error: refusing to load plugins from '{d}': it is writable by everyone "
            f"(chmod o-w '{d}')")
    for argv, env in ((["list-plugins", "--plugins-dir", d], None),
                      (["run", f, "--plugins-dir", d], None),
                      (["run", f], {"XLAPLUG_PLUGIN_PATH": str(d)})):
        r = cli(*argv, env=env)
        assert r.exit_code == 2, r.output
        assert r.output.strip() == want


def test_world_writable_plugin_file_refused(tmp_path):
    d = plugin_dir(tmp_path / "wf", {"bad.py": _named("wf_bad", "acme.bad"),
                                     "good.py": _named("wf_good", "acme.good")})
    (d / "bad.py").chmod(0o666)
    obj = listing("--plugins-dir", d)
    assert errors_of(obj) == {str(d / "bad.py"): f"refusing to load plugins from '{d / 'bad.py'}'"
                                                 f": it is writable by everyone (chmod o-w "
                                                 f"'{d / 'bad.py'}')"}
    assert "wf_good" in by_name(obj) and "wf_bad" not in by_name(obj)


def test_missing_plugins_dir(tmp_path):
    r = cli("list-plugins", "--plugins-dir", tmp_path / "nope")
    assert r.exit_code == 2
    assert f"plugins directory '{tmp_path / 'nope'}' does not exist" in r.output


# ---- attributes ------------------------------------------------------------------------------

ECHO = '''
    from xlaplug.plugin import Plugin
    plugin = Plugin("echo")
    SEEN = []

    @plugin.kernel("acme.echo", device="cpu")
    def echo(x, out, **attrs):
        SEEN.append(attrs)
        out[...] = x

    @plugin.kernel("acme.needs_alpha", device="cpu")
    def needs_alpha(x, out, *, alpha):
        out[...] = x * alpha
'''


def _session(dirs, **kw):
    return Session(load_plugins(dirs, entry_points=False), **kw)


def _compile_and_run(path, args, session, passes=None):
    from xlaplug.runtime.driver import compile_module, load_module
    from xlaplug.runtime.runner import execute
    module = load_module(str(path))
    compile_module(module, session, passes)
    return module, execute(module, args, session).outputs


def test_attributes_become_typed_kwargs(tmp_path):
    d = plugin_dir(tmp_path / "e", {"echo.py": ECHO})
    f = hlo_file(tmp_path, "attrs.hlo", r'''
        HloModule m
        ENTRY e {
          x = f32[3] parameter(0)
          a = f32[3] custom-call(x), custom_call_target="acme.echo", backend_config={alpha = 2.500000e+00 : f32, mode = 3 : i32, flag = true, name = "hi", dims = array<i64: 1, 2>}
          b = f32[3] custom-call(a), custom_call_target="acme.echo", backend_config="{alpha = 2.500000e+00 : f32, mode = 3 : i32, flag = false, name = \"hi\", dims = array<i64: 4>}"
          c = f32[3] custom-call(b), custom_call_target="acme.echo", backend_config="{\"alpha\": 2.5, \"mode\": 3, \"flag\": true, \"name\": \"hi\", \"dims\": [1, 2]}"
          g = f32[3] custom-call(c), custom_call_target="acme.echo", backend_config="opaque-bytes;v=1"
          ROOT h = f32[3] custom-call(g), custom_call_target="acme.echo", frontend_attributes={kind="fast",level="2"}
        }
    ''')
    session = _session([d])
    x = np.arange(3, dtype=np.float32)
    _, (out,) = _compile_and_run(f, [x], session)
    np.testing.assert_array_equal(out, x)
    seen = session.registry.kernel_for("acme.echo", "cpu").fn.__globals__["SEEN"]
    assert len(seen) == 5
    typed = [{k: (v, type(v)) for k, v in s.items()} for s in seen]
    # MLIR dictionary, unquoted and quoted: the declared element types.
    for s, flag, dims in ((typed[0], True, (1, 2)), (typed[1], False, (4,))):
        assert s["alpha"] == (2.5, np.float32) and s["mode"] == (3, np.int32)
        assert s["flag"] == (flag, bool) and s["name"] == ("hi", str)
        assert s["dims"][1] is tuple and s["dims"][0] == dims
        assert all(type(v) is np.int64 for v in s["dims"][0])
    # JSON: Python ints, float64, lists as tuples.
    assert typed[2] == {"alpha": (2.5, np.float64), "mode": (3, int), "flag": (True, bool),
                        "name": ("hi", str), "dims": ((1, 2), tuple)}
    # Anything else is passed through as backend_config=.
    assert seen[3] == {"backend_config": "opaque-bytes;v=1"}
    # frontend_attributes: string keywords.
    assert seen[4] == {"kind": "fast", "level": "2"}


def test_attributes_from_jax_ffi_call(tmp_path):
    jax, jnp = _jnp()

    def f(x):
        call = jax.ffi.ffi_call("acme.echo", jax.ShapeDtypeStruct(x.shape, x.dtype))
        return call(x, beta=np.float32(0.25), n=3, m=np.int32(-2), flag=True, mode="fast",
                    dims=np.array([[1, 2], [3, 4]], np.int32), big=np.float32(np.inf))

    path = tmp_path / "ffi.hlo"
    path.write_text(jax.jit(f).lower(jnp.ones(3, jnp.float32)).as_text(dialect="hlo"))
    session = _session([plugin_dir(tmp_path / "e", {"echo.py": ECHO})])
    _compile_and_run(path, [np.ones(3, np.float32)], session)
    (kw,) = session.registry.kernel_for("acme.echo", "cpu").fn.__globals__["SEEN"]
    assert set(kw) == {"beta", "n", "m", "flag", "mode", "dims", "big"}
    assert type(kw["beta"]) is np.float32 and kw["beta"] == 0.25
    assert type(kw["n"]) is np.int64 and kw["n"] == 3
    assert type(kw["m"]) is np.int32 and kw["m"] == -2
    assert kw["flag"] is True and kw["mode"] == "fast"
    assert kw["dims"].dtype == np.int32
    np.testing.assert_array_equal(kw["dims"], np.array([[1, 2], [3, 4]]))
    assert type(kw["big"]) is np.float32 and np.isinf(kw["big"])


def test_unreadable_attributes_are_a_clear_error(tmp_path):
    d = plugin_dir(tmp_path / "e", {"echo.py": ECHO})
    f = hlo_file(tmp_path, "a.hlo", _custom("acme.echo", ", backend_config={a = 2 : q7}"))
    r = cli("run", f, "--plugins-dir", d)
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert (f"{f}:4:8: error: instruction 'y': cannot read its attributes: attribute 'a': "
            "unknown attribute type 'q7'") in r.output


def test_kernel_signature_that_does_not_fit_is_refused(tmp_path):
    d = plugin_dir(tmp_path / "e", {"echo.py": ECHO})
    f = hlo_file(tmp_path, "a.hlo", _custom("acme.needs_alpha",
                                            ", backend_config={beta = 1.0 : f32}"))
    r = cli("run", f, "--plugins-dir", d)
    assert r.exit_code == 2
    assert (f"{f}:4:8: error: instruction 'y': plugin 'echo' kernel for 'acme.needs_alpha' does "
            "not accept this call: missing a required argument: 'alpha' (call passes 2 positional "
            "arguments and attributes ['beta'])") in r.output
    f2 = hlo_file(tmp_path, "b.hlo", _custom(
        "acme.needs_alpha", ", backend_config={alpha = 2.0 : f32, gamma = 1 : i32}"))
    r = cli("run", f2, "--plugins-dir", d)
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "kernel for 'acme.needs_alpha'" in r.output
    assert "unexpected keyword argument 'gamma'" in r.output


# ---- custom-call lowering --------------------------------------------------------------------

def test_kernel_present_runs_as_plugin_thunk(tmp_path, acme):
    from xlaplug.runtime.executor import ExecContext
    from xlaplug.runtime.thunks import build_thunks
    from xlaplug.runtime.driver import compile_module, load_module
    f = hlo_file(tmp_path, "sw.hlo", SWISH_HLO)
    r = cli("compile", f, "--plugins-dir", acme)
    assert r.exit_code == 0 and 'custom_call_target="acme.swish"' in r.output
    session = _session([acme])
    module = load_module(str(f))
    compile_module(module, session)
    seq = build_thunks(module, resolve=ExecContext("cpu", overrides=session.resolve).resolve)
    kinds = {t.ins.name: t.kind for t in seq.thunks}
    assert kinds["y"] == "plugin"
    _, (out,) = run_out(tmp_path, f, "--plugins-dir", acme, inputs=[X23])
    np.testing.assert_allclose(out, jax_swish(X23, 1.5), rtol=1e-6, atol=1e-7)


def test_emit_thunks_shows_plugin_kind(tmp_path, acme):
    r = cli("compile", hlo_file(tmp_path, "sw.hlo", SWISH_HLO), "--plugins-dir", acme,
            "--emit", "thunks", "-o", tmp_path / "thunks.txt")
    assert r.exit_code == 0, r.output
    row = [ln for ln in (tmp_path / "thunks.txt").read_text().splitlines() if "(y)" in ln]
    assert row and row[0].split()[1] == "plugin"


def test_prefer_decomposition(tmp_path, acme):
    f = hlo_file(tmp_path, "sw.hlo", SWISH_HLO)
    r = cli("compile", f, "--plugins-dir", acme, "--prefer", "decomposition")
    assert r.exit_code == 0
    assert "custom-call" not in r.output and "logistic(" in r.output
    session = _session([acme], prefer="decomposition")
    _, (out,) = _compile_and_run(f, [X23], session)
    assert session.registry.kernel_for("acme.swish", "cpu").fn.__globals__["CALLS"] == []
    np.testing.assert_allclose(out, jax_swish(X23, 1.5), rtol=1e-6, atol=1e-7)
    _, (out2,) = run_out(tmp_path, f, "--plugins-dir", acme, "--prefer", "decomposition",
                         inputs=[X23])
    np.testing.assert_allclose(out2, out, rtol=1e-6)


def test_no_kernel_inlines_decomposition(tmp_path, acme):
    f = hlo_file(tmp_path, "d.hlo", _custom("acme.swish_d", ", backend_config={beta = 0.5 : f32}"))
    r = cli("compile", f, "--plugins-dir", acme)
    assert r.exit_code == 0
    assert "custom-call" not in r.output and "logistic(" in r.output
    _, (out,) = run_out(tmp_path, f, "--plugins-dir", acme, inputs=[X23])
    np.testing.assert_allclose(out, jax_swish(X23, 0.5), rtol=1e-6, atol=1e-7)


def test_neither_kernel_nor_decomposition_is_an_error(tmp_path, acme):
    r = cli("compile", hlo_file(tmp_path, "n.hlo", _custom("acme.nothing")), "--plugins-dir", acme)
    assert r.exit_code == 2
    assert ("error: custom-call 'y': no plugin provides target 'acme.nothing' on cpu (no kernel "
            "for cpu, no decomposition); no loaded plugin provides it (") in r.output
    assert " ops loaded: xlaplug list-plugins lists them)" in r.output
    r = cli("run", hlo_file(tmp_path, "g.hlo", _custom("acme.gpu_only")), "--plugins-dir", acme)
    assert r.exit_code == 2
    assert ("no plugin provides target 'acme.gpu_only' on cpu (no kernel for cpu, no "
            "decomposition); loaded plugins provide kernels for cuda") in r.output


def test_decompose_all_writes_portable_module(tmp_path, acme):
    jax, jnp = _jnp()
    f = hlo_file(tmp_path, "m.hlo", '''
        HloModule mixed
        ENTRY e {
          x = f32[2,3] parameter(0)
          s = f32[3] parameter(1)
          n = f32[2,3] custom-call(x, s), custom_call_target="example.rms_norm", backend_config={epsilon = 1.000000e-05 : f32}
          ROOT y = f32[2,3] custom-call(n), custom_call_target="acme.swish", backend_config="{\\"beta\\": 1.5}"
        }
    ''')
    out_file = tmp_path / "portable.hlo"
    r = cli("compile", f, "--plugins-dir", acme, "--decompose-all", "-o", out_file)
    assert r.exit_code == 0, r.output
    text = out_file.read_text()
    assert "custom-call" not in text and "rsqrt(" in text and "logistic(" in text
    from xlaplug.runtime.driver import load_module
    load_module(str(out_file))  # parses and verifies
    scale = np.linspace(0.5, 2, 3, dtype=np.float32)
    # The kernel path (both ops are plugin thunks) and the portable module, with no plugins.
    _, kern = run_out(tmp_path, f, "--plugins-dir", acme, inputs=[X23, scale])
    _, port = run_out(tmp_path, out_file, "--no-plugins", inputs=[X23, scale])
    xj = jnp.asarray(X23)
    normed = xj * jax.lax.rsqrt(jnp.mean(xj * xj, axis=-1, keepdims=True) + 1e-5) * scale
    want = np.asarray(normed * jax.nn.sigmoid(1.5 * normed))
    np.testing.assert_allclose(kern[0], want, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(port[0], kern[0], rtol=2e-5, atol=1e-6)
    # An op with a kernel only cannot be made portable.
    r = cli("compile", hlo_file(tmp_path, "k.hlo", _custom("acme.gpu_only")), "--plugins-dir",
            acme, "--decompose-all", "--device", "cpu")
    assert r.exit_code == 2 and "no plugin provides target 'acme.gpu_only'" in r.output


COMPOSITE_KERNEL = '''
    import numpy as np
    from xlaplug.plugin import Plugin
    plugin = Plugin("acme_composite")
    CALLS = []

    @plugin.kernel("acme.swish", device="cpu")
    def swish(x, out, *, beta):
        CALLS.append(beta)
        out[...] = x / (1 + np.exp(-beta * x))

    @plugin.kernel("acme.fragile", device="cpu")
    def fragile(x, y, out):
        raise FloatingPointError("fragile kernel")
'''


def test_composites(tmp_path):
    jax, jnp = _jnp()

    def f(x, y):
        sw = jax.lax.composite(lambda x, beta: x * jax.nn.sigmoid(beta * x),
                               name="acme.swish")(x, beta=np.float32(0.75))
        fr = jax.lax.composite(lambda a, b: a * b + 1, name="acme.fragile", version=2)(sw, y)
        return fr - y

    x = np.random.default_rng(2).standard_normal((3, 5)).astype(np.float32)
    y = np.random.default_rng(3).standard_normal((3, 5)).astype(np.float32)
    want = np.asarray(jax.jit(f)(x, y))
    hlo = jax.jit(f).lower(x, y).as_text(dialect="hlo")
    assert "is_composite=true" in hlo and 'composite.name="acme.swish"' in hlo
    path = tmp_path / "composite.hlo"
    path.write_text(hlo)
    d = plugin_dir(tmp_path / "cp", {"cp.py": COMPOSITE_KERNEL})

    # Without a plugin: the composites' bodies run.
    _, (body,) = run_out(tmp_path, path, "--no-plugins", inputs=[x, y])
    np.testing.assert_allclose(body, want, rtol=1e-5, atol=1e-6)
    # With a kernel for the name: it replaces the call (typed composite.attributes), and the
    # kernel that raises falls back to its composite's body with a warning.
    session = _session([d])
    with pytest.warns(UserWarning, match=r"plugin 'acme_composite' kernel for 'acme.fragile' "
                      r"raised FloatingPointError: fragile kernel \(instruction '[^']+'\); "
                      r"falling back to the composite's body"):
        module, (out,) = _compile_and_run(path, [x, y], session)
    calls = session.registry.kernel_for("acme.swish", "cpu").fn.__globals__["CALLS"]
    assert calls == [0.75] and type(calls[0]) is np.float32
    assert sum(i.opcode == "call" for c in module.computations for i in c.instructions) == 2
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    # --decompose-all: no composite call is left.
    r = cli("compile", path, "--no-plugins", "--decompose-all")
    assert r.exit_code == 0 and "is_composite" not in r.output and "call(" not in r.output


def test_shape_rule_disagreeing_with_declared_shape(tmp_path, acme):
    f = hlo_file(tmp_path, "s.hlo", _custom("acme.swish", ", backend_config={beta = 1.0 : f32}",
                                            shape="f32[3,2]"))
    r = cli("compile", f, "--plugins-dir", acme)
    assert r.exit_code == 2
    assert (f"{f}:4:8: error: plugin 'acme' shape rule for 'acme.swish' gives f32[2,3] but "
            "instruction 'y' declares f32[3,2]") in r.output


BAD_KERNELS = '''
    import numpy as np
    from xlaplug.plugin import Plugin
    plugin = Plugin("acme_bad")

    @plugin.kernel("acme.short", device="cpu")
    def short(x, out):
        return x[:1]

    @plugin.kernel("acme.widen", device="cpu")
    def widen(x, out):
        return x.astype(np.float64)

    @plugin.shape("acme.boom")
    def boom_shape(x, *, beta):
        return x

    @plugin.decomposition("acme.boom")
    def boom_decomposition(b, x, *, beta):
        return b.multiply(x, b.logistic(b.multiply(x, b.constant(beta, x.dtype))))

    @plugin.kernel("acme.boom", device="cpu")
    def boom(x, out, *, beta):
        raise RuntimeError("kaboom")
'''


def test_kernel_with_wrong_output_shape(tmp_path):
    d = plugin_dir(tmp_path / "b", {"bad.py": BAD_KERNELS})
    for target, got in (("acme.short", "float32[1, 3]"), ("acme.widen", "float64[2, 3]")):
        f = hlo_file(tmp_path, "w.hlo", _custom(target))
        r = cli("run", f, "--plugins-dir", d)
        assert r.exit_code == 2, r.output
        assert (f"{f}:4:8: error: plugin 'acme_bad' kernel for '{target}' (instruction 'y') "
                f"produced output 0 as {got}, but the declared shape is f32[2,3]") in r.output


def test_kernel_that_raises_falls_back_unless_strict(tmp_path):
    d = plugin_dir(tmp_path / "b", {"bad.py": BAD_KERNELS})
    f = hlo_file(tmp_path, "boom.hlo", _custom("acme.boom", ", backend_config={beta = 2.0 : f32}"))
    msg = ("plugin 'acme_bad' kernel for 'acme.boom' raised RuntimeError: kaboom "
           "(instruction 'y')")
    r, (out,) = run_out(tmp_path, f, "--plugins-dir", d, inputs=[X23])
    # The CLI reports the fallback as one plain warning line.
    assert f"warning: {msg}; falling back to its decomposition" in r.output
    np.testing.assert_allclose(out, jax_swish(X23, 2.0), rtol=1e-6, atol=1e-7)
    r = cli("run", f, "--plugins-dir", d, "--strict")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert f"{f}: error: {msg}" in r.output


# ---- core-opcode overrides -------------------------------------------------------------------

def _negate_override(name: str, priority: int | None, body: str, chain: bool = False) -> str:
    prio = "" if priority is None else f", priority={priority}"
    rep = ", *, replaced" if chain else ""
    return (f"from xlaplug.plugin import Plugin\nplugin = Plugin({name!r})\n\n"
            f"@plugin.kernel('negate', device='cpu'{prio})\n"
            f"def negate(x, out{rep}):\n    out[...] = {body}\n")


NEG_HLO = "HloModule m\nENTRY e {\n  x = f32[2,3] parameter(0)\n  ROOT n = f32[2,3] negate(x)\n}\n"


def test_two_overrides_of_one_opcode(tmp_path):
    jax, jnp = _jnp()
    a = plugin_dir(tmp_path / "a", {"neg_a.py": _negate_override("neg_a", None, "-x")})
    b = plugin_dir(tmp_path / "b", {"neg_b.py": _negate_override("neg_b", None, "-x")})
    obj = listing("--plugins-dir", a, "--plugins-dir", b)
    assert errors_of(obj) == {str(b / "neg_b.py"): (
        "kernel for 'negate' on cpu is provided by both plugin 'neg_a' and plugin 'neg_b'; "
        "give one a higher priority=")}
    f = hlo_file(tmp_path, "n.hlo", NEG_HLO)
    r = cli("run", f, "--plugins-dir", a, "--plugins-dir", b, "--strict")
    assert r.exit_code == 2
    assert "provided by both plugin 'neg_a' and plugin 'neg_b'" in r.output
    # A higher priority settles it, whichever loads first.
    hi = plugin_dir(tmp_path / "hi", {"neg_hi.py": _negate_override("neg_hi", 5, "x * 0 + 7")})
    for dirs in ((a, hi), (hi, a)):
        argv = [x for dd in dirs for x in ("--plugins-dir", dd)]
        obj = listing(*argv)
        assert not errors_of(obj) and obj["overrides"] == {"negate:cpu": "neg_hi"}
        assert by_name(obj)["neg_hi"]["overrides"] == ["negate (cpu)"]
        _, (out,) = run_out(tmp_path, f, *argv, "--strict", inputs=[X23])
        np.testing.assert_array_equal(out, np.asarray(jnp.full((2, 3), 7, jnp.float32)))


def test_override_chains_to_the_kernels_it_replaced(tmp_path):
    jax, jnp = _jnp()
    d = plugin_dir(tmp_path / "ch", {
        # loaded in name order: the highest priority first
        "a_top.py": _negate_override("top", 2, "replaced(x) * 10", chain=True),
        "b_mid.py": _negate_override("mid", 1, "replaced(x) + 3", chain=True),
        "c_low.py": _negate_override("low", 0, "replaced(x) * 2", chain=True),
    })
    f = hlo_file(tmp_path, "n.hlo", NEG_HLO)
    _, (out,) = run_out(tmp_path, f, "--plugins-dir", d, "--strict", inputs=[X23])
    want = (jnp.negative(jnp.asarray(X23)) * 2 + 3) * 10   # low(core) -> mid -> top
    np.testing.assert_allclose(out, np.asarray(want), rtol=1e-6)
    # Just one override: `replaced` is the core kernel.
    one = plugin_dir(tmp_path / "one", {"a_top.py": _negate_override("top", 0, "replaced(x) * 10",
                                                                     chain=True)})
    _, (out,) = run_out(tmp_path, f, "--plugins-dir", one, inputs=[X23])
    np.testing.assert_allclose(out, np.asarray(jnp.negative(jnp.asarray(X23)) * 10), rtol=1e-6)


# ---- list-plugins, check-plugins -------------------------------------------------------------

def test_list_plugins_json(tmp_path, acme):
    more = plugin_dir(tmp_path / "more", {
        "broken.py": "import numpy\nraise ValueError('broken on purpose')\n",
        "ov.py": _negate_override("neg_over", 1, "-x"),
        "pass_plugin.py": '''
            from xlaplug.plugin import Plugin
            plugin = Plugin("acme_passes", version="0.3", description="a pass")

            @plugin.hlo_pass("acme-noop", after="dce")
            def noop(module):
                return False
        '''})
    obj = listing("--plugins-dir", acme, "--plugins-dir", more)
    plugins = by_name(obj)
    assert plugins["acme"] == {
        "plugin": "acme", "version": "2.0", "source": str(acme / "acme.py"),
        "description": "acme ops for the tests",
        "ops": ["acme.gpu_only", "acme.swish", "acme.swish_d"],
        "decompositions": ["acme.swish", "acme.swish_d"],
        "kernels": {"cpu": ["acme.swish"], "cuda": ["acme.gpu_only", "acme.swish"]},
        "overrides": [], "passes": [], "status": "ok"}
    assert plugins["neg_over"]["overrides"] == ["negate (cpu)"]
    assert plugins["neg_over"]["ops"] == []
    assert plugins["neg_over"]["kernels"] == {"cpu": ["negate"]}
    assert plugins["acme_passes"]["passes"] == ["acme-noop"]
    assert plugins["acme_passes"]["version"] == "0.3"
    assert obj["overrides"] == {"negate:cpu": "neg_over"}
    broken = [p for p in obj["plugins"] if p["source"] == str(more / "broken.py")]
    assert broken == [{"plugin": "-", "version": "-", "source": str(more / "broken.py"), "ops": [],
                       "decompositions": [], "kernels": {}, "overrides": [], "passes": [],
                       "status": f"{more / 'broken.py'}:2: ValueError: broken on purpose"}]
    # The summary: one row per plugin, at 80 columns; the load error in full below it.
    r = cli("list-plugins", "--plugins-dir", acme, "--plugins-dir", more, env={"COLUMNS": "80"})
    assert r.exit_code == 0
    lines = r.output.splitlines()
    assert max(map(len, lines[:-1])) <= 80  # the error line is the terminal's to wrap
    rows = {line.split()[0]: line.split()[1:] for line in lines[3:] if line.strip()}
    # plugin: version, ops, decomposed, kernels on cpu and cuda, passes, status
    assert rows["acme"] == ["2.0", "3", "2", "1", "2", "0", "ok"]
    assert rows["neg_over"][1:] == ["0", "-", "1", "0", "0", "ok"]
    assert rows["acme_passes"] == ["0.3", "0", "-", "0", "0", "1", "ok"]
    assert rows["broken.py"][-2:] == ["not", "loaded"]
    assert lines[-1] == (f"not loaded {more / 'broken.py'}: {more / 'broken.py'}:2: "
                         "ValueError: broken on purpose")
    # --verbose (or NAME): every op with its pieces, overrides and passes.
    r = cli("list-plugins", "--plugins-dir", acme, "--plugins-dir", more, "--verbose",
            env={"COLUMNS": "80"})
    assert r.exit_code == 0
    assert "acme.swish" in r.output and "overrides: negate (cpu)" in r.output
    assert "passes: acme-noop" in r.output
    one = cli("list-plugins", "acme", "--plugins-dir", acme, env={"COLUMNS": "80"})
    assert one.exit_code == 0 and one.output.startswith("acme 2.0 -- acme ops for the tests\n")
    ops = [line.split() for line in one.output.splitlines() if line.startswith(" acme.")]
    assert ops == [["acme.gpu_only", "-", "-", "-", "yes"],  # a CUDA kernel alone
                   ["acme.swish", "yes", "yes", "yes", "yes"],
                   ["acme.swish_d", "-", "yes", "-", "-"]]  # a decomposition alone
    assert "neg_over" not in one.output
    bad = cli("list-plugins", "nope", "--plugins-dir", acme)
    assert bad.exit_code == 2 and bad.output.startswith("error: no loaded plugin is named 'nope'")


def test_check_plugins_passes_on_bundled_plugins():
    r = cli("check-plugins", "--json")
    assert r.exit_code == 0, r.output
    obj = json.loads(r.stdout)
    assert obj["ok"] and obj["device"] == "cpu"
    rms = [x for x in obj["results"] if x["op"] == "example.rms_norm"]
    assert len(rms) == 9  # 3 examples x 3 trials
    assert all(x["ok"] and x["detail"] == "kernel matches decomposition" for x in rms)
    # each example as a user writes it: shapes, then attributes (no numpy reprs)
    assert sorted({x["example"] for x in rms}) == [
        "f32[3,5,16], f32[16]; epsilon=0.001", "f32[8,64], f32[64]; epsilon=1e-06",
        "f64[4,32], f64[32]; epsilon=1e-05"]
    horovod = [x for x in obj["results"] if x["op"].startswith("Horovod")]
    assert len(horovod) == 30  # 10 examples x 3 trials, on one device
    assert all(x["ok"] and x["detail"] == "kernel matches decomposition" for x in horovod)


def test_check_plugins_on_a_test_plugin(tmp_path, acme):
    r = cli("check-plugins", "--plugins-dir", acme, "--json", "acme.swish")
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)["results"]
    assert len(res) == 6 and all(x["ok"] for x in res)
    wrong = plugin_dir(tmp_path / "wrong", {"wrong.py": ACME.replace(
        "out[...] = x / (1 + np.exp(-x.dtype.type(beta) * x))",
        "out[...] = x / (1 + np.exp(-x))")})  # ignores beta
    r = cli("check-plugins", "--plugins-dir", wrong, "--json")
    assert r.exit_code == 1
    obj = json.loads(r.stdout)
    assert not obj["ok"]
    bad = [x for x in obj["results"] if not x["ok"]]
    assert {x["op"] for x in bad} == {"acme.swish"} and len(bad) == 6
    assert all(x["detail"].startswith("output 0: kernel vs decomposition: ") for x in bad)
    r = cli("check-plugins", "--plugins-dir", wrong, "acme.swish")
    assert r.exit_code == 1 and "FAIL" in r.output


@pytest.mark.cuda
def test_check_plugins_cuda_under_simulator():
    args = ("check-plugins", "--device", "cuda", "--trials", "1", "--json", "example.rms_norm")
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":  # this process runs the simulator
        r = xlaplug_in_process(*args, cwd=ROOT, env={"XLAPLUG_PLUGIN_PATH": None})
    else:  # a GPU's run: numba picks the simulator at import, so a process that turns it on
        r = proc(*args, env={"NUMBA_ENABLE_CUDASIM": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    obj = json.loads(r.stdout)
    assert obj["device"] == "cuda" and obj["ok"]
    assert len(obj["results"]) == 3
    assert all(x["detail"] == "kernel matches decomposition" for x in obj["results"])


# ---- passes and the bundled plugins ----------------------------------------------------------

def test_plugin_pass_runs_in_default_pipeline(tmp_path):
    d = plugin_dir(tmp_path / "ps", {"pp.py": '''
        from xlaplug.plugin import Plugin
        plugin = Plugin("acme_pass")

        @plugin.hlo_pass("acme-rename", after="dce")
        def rename(module):
            module.name = module.name + "_seen"
            return True
    '''})
    f = hlo_file(tmp_path, "n.hlo", NEG_HLO)
    r = cli("compile", f, "--plugins-dir", d, "--emit", "json")
    assert r.exit_code == 0, r.output
    obj = json.loads(r.stdout)
    names = [p["name"] for p in obj["passes"]]
    assert names[names.index("dce") + 1] == "acme-rename"
    assert {"name": "acme-rename", "changed": True} in obj["passes"]
    assert obj["module"] == "m_seen"
    r = cli("compile", f, "--plugins-dir", d)
    assert r.output.startswith("HloModule m_seen")


def test_horovod_allreduce(tmp_path):
    jax, jnp = _jnp()
    f = hlo_file(tmp_path, "h.hlo", _custom("HorovodAllreduce", ', backend_config={reduce_op = '
                                            '"sum"}', shape="f32[4]", operand="f32[4]"))
    r = cli("compile", f)  # it has a CPU kernel: the custom call stays
    assert r.exit_code == 0 and 'custom_call_target="HorovodAllreduce"' in r.output, r.output
    r = cli("compile", f, "--prefer", "decomposition")
    assert r.exit_code == 0, r.output
    assert "custom-call" not in r.output
    assert ("all-reduce(x), to_apply=horovod_add, channel_id=1, use_global_device_ids=true, "
            "replica_groups={{0}}") in r.output
    assert "ROOT horovod_add.r = f32[] add(" in r.output
    x = np.array([1.5, -2, 3, 0.25], np.float32)
    _, (out,) = run_out(tmp_path, f, inputs=[x])
    # One replica: jax's psum over an axis of size one.
    want = jax.vmap(lambda v: jax.lax.psum(v, "i"), axis_name="i")(jnp.asarray(x)[None])[0]
    np.testing.assert_array_equal(out, np.asarray(want))
    bad = hlo_file(tmp_path, "b.hlo", f.read_text().replace('"sum"', '"avg"'))
    r = cli("compile", bad)
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.output.strip().endswith(
        "error: plugin 'horovod' shape rule for 'HorovodAllreduce' raised ValueError: reduce_op "
        "must be one of average, max, min, prod, product, sum, got 'avg' (instruction 'y')")


def test_stablehlo_check_on_conformance_file(tmp_path):
    from suite_location import conformance_dir
    case = conformance_dir() / "add_any_float32_2_float32_2.hlo"
    text = case.read_text()
    r = cli("run", case)
    assert r.exit_code == 0, r.output
    r = cli("run", case, "--prefer", "decomposition")  # kernel-only ops still use the kernel
    assert r.exit_code == 0, r.output
    assert "constant({-0.972936749, 2.94368386})" in text
    bad = tmp_path / case.name
    bad.write_text(text.replace("constant({-0.972936749, 2.94368386})",
                                "constant({-0.972936749, 2.5})"))
    r = cli("run", bad)
    assert r.exit_code == 1
    assert ("check.expect_close failed: 1 of 2 elements differ; first at [1]: got "
            "2.9436838626861572, expected 2.5 (max 1860945 ULP, allowed 1)") in r.output
    assert "Traceback" not in r.output
