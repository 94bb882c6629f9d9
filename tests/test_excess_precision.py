"""bf16 and f16 as XLA:CPU computes them (passes/excess_precision.py): by default a bf16 op
whose result the HLO converts to f32 hands on its unrounded f32 value, as XLA:CPU under
its default --xla_allow_excess_precision=true; `excess_precision=False` /
`--no-excess-precision` rounds every bf16 result as the HLO states, as XLA with the flag off.

Expected values come from XLA:CPU itself through jaxlib, compiled with the flag on and off
(per compile, as jax's `compile(compiler_options=...)` sets it; one test sets it through
XLA_FLAGS in a fresh process, where XLA reads the environment)."""
import ml_dtypes
import numpy as np
import pytest
from click.testing import CliRunner

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import xlaplug  # noqa: E402
from xlaplug.cli.main import main  # noqa: E402
from xlaplug.hlo.text.parser import parse_module  # noqa: E402
from xlaplug.passes import PassContext  # noqa: E402
from xlaplug.passes.excess_precision import ExcessPrecision  # noqa: E402
from xlaplug.xla.xla_executables import run_on_xla_cpu  # noqa: E402

from blas_order import blas_adds_in_sequence, sequential_matmul  # noqa: E402

# The module: 60 of its 64 outputs differ between XLA's two settings.
THREE_LINES = """HloModule three
ENTRY e {
  x = bf16[64] parameter(0)
  y = bf16[64] multiply(x, x)
  ROOT z = f32[64] convert(y)
}
"""
OFF = {"xla_allow_excess_precision": False}


def _bits(a):
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}")


def _xla(text, args, excess_precision=True):
    return run_on_xla_cpu(text, [list(args)], xla_options=None if excess_precision else OFF)[0]


def _same_bits(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_array_equal(_bits(g), _bits(w))


def _three_line_input():
    return np.linspace(-3, 3, 64).astype(ml_dtypes.bfloat16)


def test_three_line_module_bit_for_bit_with_xla_either_way():
    x = _three_line_input()
    on, off = _xla(THREE_LINES, [x]), _xla(THREE_LINES, [x], excess_precision=False)
    assert np.sum(_bits(on[0]) != _bits(off[0])) >= 32  # the flag matters here
    _same_bits(xlaplug.compile(THREE_LINES)(x), on)
    _same_bits(xlaplug.compile(THREE_LINES, excess_precision=False)(x), off)


def test_xla_flags_in_a_fresh_process_agree():
    """XLA_FLAGS=--xla_allow_excess_precision=false (read when jax starts) gives the
    flag-off numbers, and no flag the default ones: xlaplug's two settings."""
    from xlaplug.xla.devices import run_in_subprocess
    x = _three_line_input()
    off = run_in_subprocess(THREE_LINES, 1, 1, [[x]],
                            xla_flags="--xla_allow_excess_precision=false")[0]
    on = run_in_subprocess(THREE_LINES, 1, 1, [[x]])[0]
    _same_bits(xlaplug.compile(THREE_LINES)(x), on)
    _same_bits(xlaplug.compile(THREE_LINES, excess_precision=False)(x), off)


def _mlp(x, w1, b1, w2, b2):
    """A dense -> relu -> dense -> softmax model with its parameters in x's dtype, as flax's
    nn.Dense(dtype=bf16) lowers it (dot, broadcast bias add, max); jax's softmax sums the
    exponentials in f32 (an `exp -> convert(f32)` pair) and divides in the narrow type."""
    h = jax.nn.relu(x @ w1 + b1)
    logits = h @ w2 + b2
    return logits, jax.nn.softmax(logits)


def _mlp_case(dtype):
    rs = np.random.RandomState(0)
    shapes = [((32, 64), 1.0), ((64, 128), 0.125), ((128,), 0.1), ((128, 64), 0.09),
              ((64,), 0.1)]
    args = [np.asarray(rs.randn(*s) * scale, dtype) for s, scale in shapes]
    return jax.jit(_mlp).lower(*args).as_text(dialect="hlo"), args


def test_bf16_mlp_bit_for_bit_with_xla_either_way():
    text, args = _mlp_case(jnp.bfloat16)
    on, off = _xla(text, args), _xla(text, args, excess_precision=False)
    assert np.sum(_bits(on[1]) != _bits(off[1])) > 0  # the softmax differs between them
    _same_bits(xlaplug.compile(text)(*args), on)
    _same_bits(xlaplug.compile(text, excess_precision=False)(*args), off)


def test_f16_is_rounded_per_op_by_xla_whatever_the_flag():
    """XLA:CPU keeps f16 elementwise ops in f16 and runs f16 dots in f32 under both
    settings: the same bits either way, and the pass leaves an f16 module alone."""
    def f(x, w1, b1, w2, b2):
        logits = _mlp(x, w1, b1, w2, b2)[0]
        return logits, (jnp.tanh(logits) * logits).astype(jnp.float32), \
            (logits @ w2.T).astype(jnp.float32)
    _, args = _mlp_case(jnp.float16)
    text = jax.jit(f).lower(*args).as_text(dialect="hlo")
    on = _xla(text, args)
    _same_bits(_xla(text, args, excess_precision=False), on)
    # The last output is an f16 product XLA adds in f32, in sequence, and rounds to f16: its
    # bits are the BLAS's order's where that order is XLA's (tests/blas_order.py).
    logits, w2t = np.asarray(on[0], np.float32), np.asarray(args[3], np.float32).T
    in_order = sequential_matmul(logits, w2t).astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(_bits(on[2]), _bits(in_order))
    exact = blas_adds_in_sequence(logits, w2t)
    for ours in (xlaplug.compile(text)(*args), xlaplug.compile(text, excess_precision=False)(*args)):
        _same_bits(ours[:2], on[:2])
        if exact:
            _same_bits(ours[2:], on[2:])
        else:
            np.testing.assert_allclose(ours[2], on[2], rtol=2 ** -10)  # f16's rounding
    assert not ExcessPrecision().run(parse_module(text), PassContext())


def test_pass_keeps_only_the_widened_result_in_f32():
    """`y` feeds the widening convert (now `y` itself, in f32), a bf16 add (which reads `y`
    rounded back to bf16) and a reduce whose reducer stays bf16; a bf16 root keeps its
    rounding."""
    module = parse_module("""HloModule m
add_bf16 {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT s = bf16[] add(a, b)
}
ENTRY e {
  x = bf16[8] parameter(0)
  y = bf16[8] multiply(x, x)
  w = f32[8] convert(y)
  u = bf16[8] add(y, x)
  zero = bf16[] constant(0)
  r = bf16[] reduce(u, zero), dimensions={0}, to_apply=add_bf16
  ROOT t = (f32[8], bf16[8], bf16[]) tuple(w, u, r)
}
""")
    assert ExcessPrecision().run(module, PassContext())
    e = module.entry
    y, u, t = e.instruction("y"), e.instruction("u"), e.root
    assert (y.shape.element_type, [o.opcode for o in y.operands]) == ("f32", ["convert"] * 2)
    assert t.operands[0] is y and "w" not in [i.name for i in e.instructions]
    assert u.operands[0].opcode == "convert" and u.operands[0].operands == [y]
    assert u.shape.element_type == "bf16" and u.operands[0].shape.element_type == "bf16"
    assert module.computation("add_bf16").root.shape.element_type == "bf16"


@pytest.mark.parametrize("args,widened", [
    ([], True),                                   # the default pipeline
    (["--no-excess-precision"], False),
    (["--decompose-all"], False),                 # the portable artifact: HLO as XLA takes it
    (["--passes", "excess-precision"], True),
    (["--passes", "excess-precision", "--no-excess-precision"], False),
])
def test_compile_flag_and_pipelines(tmp_path, args, widened):
    path = tmp_path / "three.hlo"
    path.write_text(THREE_LINES)
    r = CliRunner().invoke(main, ["compile", str(path), *args])
    assert r.exit_code == 0, r.output
    assert ("f32[64] multiply(" in r.output) == widened
    assert ("bf16[64] multiply(" in r.output) != widened


@pytest.mark.parametrize("flag", [[], ["--no-excess-precision"]])
def test_run_reference_xla_uses_the_same_setting(tmp_path, flag):
    path = tmp_path / "three.hlo"
    path.write_text(THREE_LINES)
    r = CliRunner().invoke(main, ["run", str(path), "--reference", "xla", "--rtol", "0",
                                  "--atol", "0", *flag])
    assert r.exit_code == 0, r.output
    assert "matches XLA:CPU" in r.output
