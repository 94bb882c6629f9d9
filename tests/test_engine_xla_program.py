"""`--engine xla` on a module with no plugin ops: XLA gets the program jax.jit compiles and
runs it as jax.jit does -- one executable, compiled by the first run and kept (an
Executable's, and each of xlaplug.jax's compiled entries'), its outputs bit for bit
jax.jit's (issue 22: within 1.1x of jax.jit's own time; benchmarks/engine_xla.py)."""
import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import xlaplug  # noqa: E402
import xlaplug.jax as xj  # noqa: E402

pytestmark = pytest.mark.jax


def mlp(x, w1, b1, w2):
    return jax.numpy.maximum(x @ w1 + b1, 0.0) @ w2


def loop(x):
    return jax.lax.fori_loop(0, 50, lambda i, v: jax.numpy.sin(v) * 0.9 + 0.1, x)


def args_of(f):
    rng = np.random.default_rng(0)
    if f is loop:
        return [rng.standard_normal(16, np.float32)]
    return [rng.standard_normal(s, np.float32) for s in ((8, 32), (32, 64), (64,), (64, 16))]


def instructions(text: str) -> list[tuple[str, str]]:
    """(shape, opcode) of every instruction, in order: the program without its names."""
    return re.findall(r"^\s*(?:ROOT )?%\S+ = (\S+(?: \S+)*?) ([a-z][a-z0-9-]*)\(", text, re.M)


@pytest.mark.parametrize("f", [mlp, loop])
def test_the_engine_compiles_the_program_jax_jit_compiles(f):
    args = args_of(f)
    lowered = jax.jit(f).lower(*args)
    compiled = lowered.compile()
    exe = xlaplug.compile(lowered.as_text(dialect="hlo"), keep_source=True)
    res = exe.run(*args, engine="xla")
    want = [np.asarray(y) for y in jax.tree.leaves(compiled(*args))]
    assert [a.tobytes() for a in res.outputs] == [w.tobytes() for w in want]
    (ours,) = exe.contexts.engine_program(exe.source_text).compiled[0].hlo_modules()
    theirs = instructions(compiled.as_text())
    assert theirs and instructions(ours.to_string()) == theirs


def test_an_executable_compiles_its_engine_program_once():
    args = args_of(mlp)
    exe = xlaplug.compile(jax.jit(mlp).lower(*args).as_text(dialect="hlo"), keep_source=True)
    first = exe.run(*args, engine="xla")
    program = exe.contexts.engine_program(exe.source_text)
    again = exe.run(*args, engine="xla", repeat=3)
    assert exe.contexts.engine_program(exe.source_text) is program
    assert first.timings["compile_s"] > 0 and again.timings["compile_s"] == 0
    assert len(again.run_times) == 3 and program.runs == 2
    assert [a.tobytes() for a in again.outputs] == [a.tobytes() for a in first.outputs]


def test_compile_with_the_xla_engine_runs_every_call_on_xla():
    args = args_of(mlp)
    text = jax.jit(mlp).lower(*args).as_text(dialect="hlo")
    exe = xlaplug.compile(text, engine="xla")  # (the module as read kept for XLA)
    (y,) = exe(*args)
    res = exe.run(*args, repeat=2)
    program = exe.contexts.engine_program(exe.source_text)
    assert res.engine == "xla" and program.runs == 2  # the call and the run: one program
    np.testing.assert_array_equal(y, np.asarray(jax.jit(mlp)(*args)))
    assert [a.tobytes() for a in res.outputs] == [y.tobytes()]
    ours = exe.run(*args, engine="interpreter")  # a run's own engine= wins
    assert ours.engine == "interpreter" and program.runs == 2
    with pytest.raises(xlaplug.HloError, match="error: engine: must be 'interpreter' or 'xla', "
                                               "got 'tpu'$"):
        xlaplug.compile(text, engine="tpu")
    with pytest.raises(xlaplug.HloError, match="error: engine xla runs on cpu; device cuda "
                                               "is not served by it$"):  # (docs/design.md#cuda)
        xlaplug.compile(text, engine="xla", device="cuda")


def test_xlaplug_jax_keeps_its_engine_program_per_signature():
    f = xj.jit(mlp, engine="xla")
    args = args_of(mlp)
    y1 = f(*args)
    (entry,) = f._cache.values()
    program = entry.xla
    y2 = f(*args)
    assert program is not None and entry.xla is program and program.runs == 2
    np.testing.assert_array_equal(np.asarray(y1), np.asarray(y2))
    np.testing.assert_array_equal(np.asarray(y1), np.asarray(jax.jit(mlp)(*args)))
