"""`--engine xla` with a plugin's override of a core opcode (issue 22 item 3): each instruction
of the opcode that XLA runs as code (entry, while, conditional, call) becomes an
`xlaplug.override` typed-FFI call served by the override kernel, called as many times and
with the same arguments as in the interpreter; reducers and other scalar computations keep
XLA's own op (as the interpreter's).  jax is the oracle for the values."""
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

jax = pytest.importorskip("jax")

import xlaplug  # noqa: E402
from xlaplug.cli import main  # noqa: E402
from xlaplug.hlo.errors import HloError  # noqa: E402
from xlaplug.runtime.check import check_plugins  # noqa: E402
from xlaplug.runtime.executable import load_session  # noqa: E402
from xlaplug.runtime.on_xla import EngineProgram  # noqa: E402

pytestmark = pytest.mark.jax

NEG_MODULE = '''HloModule neg
ENTRY e {
  x = f32[3,5] parameter(0)
  ROOT n = f32[3,5] negate(x)
}
'''

# Each kernel computes its op another way than xlaplug's core kernel, and says it ran.
PLUGIN = '''
import numpy as np
from xlaplug.plugin import Plugin
plugin = Plugin("ovr", version="1")
CALLS = []

@plugin.kernel("negate", device="cpu", examples=[NEG_MODULE, REPLICATED])
def negate(x, out, **attrs):
    CALLS.append(("negate", x.dtype.str, x.shape, sorted(attrs)))
    if x.size and x.flat[0] == 1234.5:
        raise ValueError("negate refuses 1234.5")
    np.subtract(x.dtype.type(0), x, out=out)

@plugin.kernel("transpose", device="cpu")
def transpose(x, out, *, dimensions, **attrs):
    CALLS.append(("transpose", x.dtype.str, x.shape, tuple(dimensions)))
    for index in np.ndindex(*out.shape):
        out[index] = x[tuple(index[list(dimensions).index(d)] for d in range(x.ndim))]

@plugin.kernel("reduce", device="cpu")
def reduce(*arrays, to_apply, dimensions, replaced, **attrs):
    n = len(arrays) // 3  # operands, init values, results
    CALLS.append(("reduce", to_apply.name, tuple(dimensions), n))
    got = replaced(*arrays[:2 * n])
    for out, value in zip(arrays[2 * n:], got if n > 1 else (got,)):
        out[...] = value
'''


def plugins(tmp_path: Path, text: str = PLUGIN, name: str = "ovr") -> Path:
    d = tmp_path / "plugins"
    d.mkdir(exist_ok=True)
    (d / f"{name}.py").write_text(text.replace("NEG_MODULE", repr(NEG_MODULE)).replace(
        "REPLICATED", repr(NEG_MODULE.replace("HloModule neg", "HloModule neg, replica_count=2"))))
    return d


def calls_of(session) -> list:
    return session.registry.kernel_for("negate", "cpu").fn.__globals__["CALLS"]


def program(x, y, p):
    """negate and transpose in the entry, a while body, a conditional's branch; a two-
    operand reduce (tuple results) and a one-operand reduce."""
    def body(c):
        i, v = c
        return i + 1, -jax.numpy.transpose(v).T * 0.5
    _, v = jax.lax.while_loop(lambda c: c[0] < 3, body, (0, -x))
    w = jax.lax.cond(p > 0, lambda a: -a.T, lambda a: a.T * 2.0, y)
    m, k = jax.lax.reduce((v, jax.numpy.abs(v)), (np.float32(-np.inf), np.float32(0)),
                          lambda a, b: (jax.numpy.maximum(a[0], b[0]), a[1] + b[1]), (1,))
    return v, w, m, k, jax.numpy.sum(-w, axis=0)


def args():
    rng = np.random.default_rng(0)
    return [rng.standard_normal((4, 6), np.float32), rng.standard_normal((6, 5), np.float32),
            np.float32(1.0)]


def test_overridden_instructions_run_their_kernel_as_in_the_interpreter(tmp_path):
    a = args()
    text = jax.jit(program).lower(*a).as_text(dialect="hlo")
    exe = xlaplug.compile(text, plugins=[plugins(tmp_path)], keep_source=True)
    calls = calls_of(exe.session)
    interpreted = exe.run(*a).outputs
    in_interpreter = list(calls)
    assert {c[0] for c in in_interpreter} == {"negate", "transpose", "reduce"}
    calls.clear()
    got = exe.run(*a, engine="xla").outputs
    want = [np.asarray(v) for v in jax.jit(program)(*a)]
    for g, i, w in zip(got, interpreted, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(i, w, rtol=1e-6, atol=1e-6)
    # the same kernels, as many times, with the same arguments (XLA's order may differ)
    assert sorted(map(repr, calls)) == sorted(map(repr, in_interpreter))
    engine = exe.contexts.engine_program(exe.source_text)
    assert engine.text.count('custom_call_target="xlaplug.override"') >= 5
    assert "op = \"negate\"" in engine.text and "op = \"reduce\"" in engine.text


REDUCER_NEGATE = '''HloModule reducer_negate
sub {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  nb = f32[] negate(b)
  ROOT s = f32[] add(a, nb)
}
ENTRY e {
  x = f32[4,6] parameter(0)
  z = f32[] constant(0)
  r = f32[4] reduce(x, z), dimensions={1}, to_apply=sub
  ROOT n = f32[4] negate(r)
}
'''


def test_an_override_inside_a_reducer_keeps_xlas_own_op(tmp_path):
    session = load_session([plugins(tmp_path)])
    calls = calls_of(session)
    prog = EngineProgram(REDUCER_NEGATE, session)
    assert "nb = f32[] negate(b)" in prog.text  # the reducer's: XLA's own
    x = np.random.default_rng(1).standard_normal((4, 6), np.float32)
    calls.clear()
    (got,) = prog.run([x]).outputs
    np.testing.assert_allclose(got, x.sum(1), rtol=1e-5, atol=1e-6)
    # the entry's negate ran the kernel (once), the reducer's did not: the reduce ran the
    # plugin's reduce kernel, whose `replaced` (xlaplug's core reduce) runs the reducer
    assert [c[0] for c in calls].count("negate") == 1
    exe = xlaplug.compile(REDUCER_NEGATE, plugins=[plugins(tmp_path)])
    calls = calls_of(exe.session)
    calls.clear()
    np.testing.assert_allclose(exe.run(x).outputs[0], got, rtol=1e-6)  # the interpreter
    assert [c[0] for c in calls].count("negate") == 1


def test_a_failing_override_is_its_own_one_line_error_and_the_next_run_works(tmp_path):
    session = load_session([plugins(tmp_path)])
    prog = EngineProgram(NEG_MODULE, session)
    x = np.full((3, 5), 1234.5, np.float32)
    with pytest.raises(HloError) as e:
        prog.run([x])
    assert "plugin 'ovr' kernel for 'negate' raised ValueError: negate refuses 1234.5" in \
        e.value.message and "\n" not in e.value.message
    np.testing.assert_array_equal(prog.run([x - 1]).outputs[0], 1 - x)


def test_cli_run_engine_xla_uses_the_override(tmp_path):
    hlo = tmp_path / "neg.hlo"
    hlo.write_text(NEG_MODULE)
    d = plugins(tmp_path)
    r = CliRunner().invoke(main, ["run", str(hlo), "--plugins-dir", str(d), "--out",
                                  str(tmp_path / "i.npz")])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["run", str(hlo), "--plugins-dir", str(d), "--engine", "xla",
                                  "--expect", str(tmp_path / "i.npz"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["engine"] == "xla"


WHILE_OVERRIDE = '''
import numpy as np
from xlaplug.plugin import Plugin
plugin = Plugin("ovw", version="1")

@plugin.kernel("while", device="cpu")
def loop(state, out, *, replaced, **attrs):
    out[...] = replaced(state)
'''

LOOP = '''HloModule loop
cond {
  c = s32[] parameter(0)
  k = s32[] constant(3)
  ROOT lt = pred[] compare(c, k), direction=LT
}
body {
  b = s32[] parameter(0)
  one = s32[] constant(1)
  ROOT n = s32[] add(b, one)
}
ENTRY e {
  x = s32[] parameter(0)
  ROOT w = s32[] while(x), condition=cond, body=body
}
'''


def test_an_override_the_engine_cannot_serve_is_a_one_line_error(tmp_path):
    hlo = tmp_path / "loop.hlo"
    hlo.write_text(LOOP)
    d = plugins(tmp_path, WHILE_OVERRIDE, "ovw")
    r = CliRunner().invoke(main, ["run", str(hlo), "--plugins-dir", str(d), "--engine", "xla"])
    assert r.exit_code == 2, r.output
    line = LOOP.splitlines().index("  ROOT w = s32[] while(x), condition=cond, body=body") + 1
    assert r.output.splitlines()[0] == (  # (at its line in the file, the line and caret after)
        f"{hlo}:{line}:8: error: while 'w': plugin 'ovw' overrides core opcode 'while', which "
        "--engine xla cannot serve as a custom call: it is control flow or structure XLA must "
        "run itself"), r.output


def test_check_plugins_engine_xla_checks_an_override_against_xlas_own_op(tmp_path):
    session = load_session([plugins(tmp_path)])
    results = check_plugins(session, ["negate", "transpose"], trials=2, engine="xla")
    got = {(r.op, r.example): (r.ok, r.detail) for r in results if r.trial == 0}
    assert got[("negate", "module 0")] == (
        True, "override kernel in XLA (Python handler) matches XLA's own 'negate'")
    assert got[("negate", "module 1")] == (
        None, "not checked under --engine xla: a module for 2 devices (check-plugins "
              "--devices 2 checks it)")
    assert got[("transpose", "-")] == (
        None, "not checked under --engine xla: an override is checked in the HLO modules of "
              "its examples=[...], and it gives none")
    assert sum(r.ok is True for r in results) == 2  # module 0, two trials


def test_check_plugins_engine_xla_finds_a_wrong_override(tmp_path):
    wrong = PLUGIN.replace("np.subtract(x.dtype.type(0), x, out=out)",
                           "np.subtract(x.dtype.type(0.5), x, out=out)")
    d = plugins(tmp_path, wrong)
    r = CliRunner().invoke(main, ["check-plugins", "--engine", "xla", "--plugins-dir", str(d),
                                  "--trials", "1", "--json", "negate"])
    assert r.exit_code == 1, r.output
    rows = [x for x in json.loads(r.stdout)["results"] if x["ok"] is False]
    assert len(rows) == 1 and rows[0]["detail"].startswith(
        "output 0: override kernel in XLA (Python handler) vs XLA's own 'negate': "), rows



def test_check_plugins_by_plugin_name_checks_its_overrides_on_either_engine(tmp_path):
    session = load_session([plugins(tmp_path)])
    for engine in ("interpreter", "xla"):
        results = check_plugins(session, ["ovr"], trials=1, engine=engine)
        assert {r.op for r in results} == {"negate", "transpose", "reduce"}, engine
        neg = [(r.example, r.ok) for r in results if r.op == "negate"]
        # the interpreter runs the two-device module too (against its core kernel)
        assert neg == ([("module", True), ("module", True)] if engine == "interpreter"
                       else [("module 0", True), ("module 1", None)]), (engine, results)


SHARED = '''HloModule shared
sub {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  nb = f32[] negate(b)
  ROOT s = f32[] add(a, nb)
}
ENTRY e {
  x = f32[4] parameter(0)
  z = f32[] constant(0)
  r = f32[] reduce(x, z), dimensions={0}, to_apply=sub
  ROOT c = f32[] call(r, z), to_apply=sub
}
'''


def test_an_override_in_a_computation_both_called_and_a_reducer_is_a_one_line_error(tmp_path):
    session = load_session([plugins(tmp_path)])
    with pytest.raises(HloError) as e:
        EngineProgram(SHARED, session)
    assert e.value.message == (
        "negate 'nb': plugin 'ovr' overrides core opcode 'negate', and computation 'sub' is "
        "both run as code and a scalar computation (a reducer, comparator or map): --engine "
        "xla cannot serve it in one and not the other")


CONCURRENT = '''
import time
import numpy as np
from xlaplug.plugin import Plugin
plugin = Plugin("conc", version="1")
STATE = {"active": 0, "most": 0, "calls": 0}

@plugin.kernel("negate", device="cpu")
def negate(x, out):
    STATE["active"] += 1
    STATE["most"] = max(STATE["most"], STATE["active"])
    time.sleep(0.002)  # (lets another thread in, were the calls not serialized)
    np.negative(x, out=out)
    STATE["calls"] += 1
    STATE["active"] -= 1
'''

INDEPENDENT = "HloModule independent\nENTRY e {\n  x = f32[64] parameter(0)\n" + "".join(
    f"  n{k} = f32[64] negate(x)\n  c{k} = f32[] constant({k})\n"
    f"  b{k} = f32[64] broadcast(c{k}), dimensions={{}}\n  a{k} = f32[64] add(n{k}, b{k})\n"
    for k in range(6)) + "  ROOT t = (" + ", ".join(["f32[64]"] * 6) + ") tuple(" + \
    ", ".join(f"a{k}" for k in range(6)) + ")\n}\n"


def test_one_program_from_several_threads_calls_the_kernel_one_at_a_time(tmp_path):
    from concurrent.futures import ThreadPoolExecutor
    session = load_session([plugins(tmp_path, CONCURRENT, "conc")])
    state = session.registry.kernel_for("negate", "cpu").fn.__globals__["STATE"]
    prog = EngineProgram(INDEPENDENT, session)
    xs = [np.full(64, k, np.float32) for k in range(4)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda x: prog.run([x]).outputs, xs))
    for x, outs in zip(xs, got):
        for k, o in enumerate(outs):
            np.testing.assert_array_equal(o, k - x)
    assert state["calls"] == 24 and state["most"] == 1
