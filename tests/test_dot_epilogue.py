"""The dot-epilogue pass (passes/dot_epilogue.py) and the output fusion's CPU kernel
(backends/cpu/dot_epilogue.py): a product and the loop fusion reading it run as one thunk,
the loop in place on the product's buffer.

Expected values are XLA's through jax (the HLO jax lowers, run by XLA:CPU); fused and
unfused runs (the default pipeline less dot-epilogue) must give the same bits, since the
product's kernel and the compiled loop are the unfused ones.
"""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import xlaplug  # noqa: E402
from xlaplug.hlo import parse_module  # noqa: E402
from xlaplug.runtime.driver import compile_module  # noqa: E402
from xlaplug.runtime.runner import execute  # noqa: E402

from blas_order import blas_adds_in_sequence, sequential_matmul  # noqa: E402

pytestmark = pytest.mark.jax
R = np.random.default_rng(23)
WITHOUT = ("sdy-shard-map,custom-call-lowering,inline-calls,tuple-simplify,dce,"
           "excess-precision,reduce-fusion,loop-fusion")
# The default pipeline up to dot-epilogue: small-regions (after it) would take these small
# products' epilogues into regions of its own (tests/test_small_regions.py).
WITH = WITHOUT + ",dot-epilogue"


def _n(*shape, scale=1.0):
    return (R.standard_normal(shape) * scale).astype(np.float32)


def _layer(act):
    return lambda x, w, b: act(x @ w + b)


def _conv_relu(x, w, b):
    y = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return jax.nn.relu(y + b)


def _block(x, wq, wk, wv, wo, w1, b1, w2, b2):
    """A transformer-style block: causal attention, then a GELU MLP, residuals around
    both, as flax writes it (no layer norms: those are reduce-fusion's)."""
    q, k, v = x @ wq, x @ wk, x @ wv
    s = jnp.einsum("btd,bsd->bts", q, k) / np.float32(8.0)
    s = jnp.where(jnp.tril(jnp.ones(s.shape[-2:], bool)), s, -1e9)
    h = x + jax.nn.softmax(s, axis=-1) @ v @ wo
    return h + jax.nn.gelu(h @ w1 + b1) @ w2 + b2


def _fused(f, args, **compile_opts):
    """(fused executable, unfused executable) of f's lowered HLO."""
    text = jax.jit(f).lower(*args).as_text(dialect="hlo")
    return (xlaplug.compile(text, passes=WITH, **compile_opts),
            xlaplug.compile(text, passes=WITHOUT, **compile_opts))


def _outputs(f, args):
    return [np.asarray(o) for o in jax.tree.leaves(jax.jit(f)(*args))]


def _kinds(exe) -> list[str]:
    return [f"{i.opcode}:{i.attrs.get('kind', '')}" for i in exe.module.entry.instructions
            if i.opcode in ("dot", "convolution", "fusion")]


def _same_bits_close(fused, unfused, f, args, rtol):
    got = fused.run(*args)
    ref = unfused.run(*args)
    for g, r, w in zip(got.outputs, ref.outputs, _outputs(f, args)):
        assert g.dtype == r.dtype and g.tobytes() == r.tobytes()
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * float(np.abs(w).max()))
    return got, ref


@pytest.mark.parametrize("act", [jax.nn.relu, jax.nn.gelu, jnp.tanh],
                         ids=["relu", "gelu", "tanh"])
def test_mlp_layer_one_thunk_one_buffer_fewer(act):
    f, args = _layer(act), [_n(128, 256), _n(256, 512, scale=0.06), _n(512)]
    fused, unfused = _fused(f, args)
    assert _kinds(fused) == ["fusion:kOutput"]
    assert _kinds(unfused) == ["dot:", "fusion:kLoop"]
    assert len(fused.thunks.thunks) == len(unfused.thunks.thunks) - 1
    got, ref = _same_bits_close(fused, unfused, f, args, 1e-5)
    product = 128 * 512 * 4
    assert ref.peak_bytes - got.peak_bytes == product
    assert fused.thunks.peak_bytes == unfused.thunks.peak_bytes - product


def test_operand_of_the_product_read_by_the_epilogue():
    """x @ w + x: x is one parameter of the fusion, read by the product and the loop."""
    f = lambda x, w: jnp.tanh(x @ w + x)  # noqa: E731
    args = [_n(256, 256), _n(256, 256, scale=0.06)]
    fused, unfused = _fused(f, args)
    assert _kinds(fused) == ["fusion:kOutput"]
    assert len(fused.module.entry.instructions[-1].operands) == 2
    _same_bits_close(fused, unfused, f, args, 1e-5)


def test_small_layer_below_the_loop_threshold():
    """A layer of 4x32: the epilogue a small loop (interpreted, or compiled for its FMA)."""
    f, args = _layer(jax.nn.gelu), [_n(4, 16), _n(16, 32, scale=0.25), _n(32)]
    fused, unfused = _fused(f, args)
    assert _kinds(fused) == ["fusion:kOutput"]
    _same_bits_close(fused, unfused, f, args, 1e-5)
    # Interpreted: the product's kernel, then the epilogue instruction by instruction.
    m = parse_module(jax.jit(f).lower(*args).as_text(dialect="hlo"))
    compile_module(m, options={"small-regions": {"enabled": False}})
    assert [i.opcode for i in m.entry.instructions].count("dot") == 0
    got = execute(m, args, interpret=True).outputs[0]
    np.testing.assert_allclose(got, _outputs(f, args)[0], rtol=1e-5, atol=1e-5)


def test_transformer_block():
    d = 128  # the residual stream's 4x128x128 reaches loop-fusion's threshold
    args = [_n(4, 128, d)] + [_n(d, d, scale=d ** -0.5) for _ in range(4)] + \
        [_n(d, 4 * d, scale=d ** -0.5), _n(4 * d), _n(4 * d, d, scale=(4 * d) ** -0.5), _n(d)]
    fused, unfused = _fused(_block, args)
    assert _kinds(fused).count("fusion:kOutput") == 2  # the MLP's two products
    assert len(fused.thunks.thunks) == len(unfused.thunks.thunks) - 2
    got, ref = _same_bits_close(fused, unfused, _block, args, 1e-4)
    assert got.peak_bytes < ref.peak_bytes


def test_convolution_bias_relu():
    f, args = _conv_relu, [_n(2, 32, 32, 16), _n(3, 3, 16, 64, scale=0.08), _n(64)]
    fused, unfused = _fused(f, args)
    assert _kinds(fused) == ["fusion:kOutput"]
    got, ref = _same_bits_close(fused, unfused, f, args, 1e-5)
    assert ref.peak_bytes - got.peak_bytes == 2 * 32 * 32 * 64 * 4
    off = xlaplug.compile(jax.jit(f).lower(*args).as_text(dialect="hlo"),
                          passes=WITHOUT + ",dot-epilogue{convolution=false}")
    assert _kinds(off) == ["convolution:", "fusion:kLoop"]


def test_result_of_another_type_gets_its_own_buffer():
    """bf16 out of an f32 product: the loop cannot write the product's buffer, but the
    thunk is still one."""
    f = lambda x, w, b: jax.nn.relu(x @ w + b).astype(jnp.bfloat16)  # noqa: E731
    args = [_n(128, 256), _n(256, 512, scale=0.06), _n(512)]
    fused, unfused = _fused(f, args)
    assert _kinds(fused) == ["fusion:kOutput"]
    _same_bits_close(fused, unfused, f, args, 1e-2)


@pytest.mark.parametrize("f", [
    lambda x, w, b: jax.nn.gelu(x @ w + b),
    lambda x, w, b: (x @ w).astype(jnp.float32) + b.astype(jnp.float32)],
    ids=["bf16-gelu", "f32-result"])
def test_bf16_product_gives_xla_bits(f):
    """A bf16 product and its epilogue (the product widened once, the loop in place on it):
    XLA's bits, compiled and with the epilogue interpreted on the product as its kernel
    gave it."""
    import ml_dtypes
    bf = ml_dtypes.bfloat16
    args = [_n(128, 256).astype(bf), _n(256, 512, scale=0.06).astype(bf), _n(512).astype(bf)]
    fused, unfused = _fused(f, args)
    assert _kinds(fused) == ["fusion:kOutput"]
    want = _outputs(f, args)[0]
    got = fused.run(*args).outputs[0]
    assert got.dtype == want.dtype
    assert unfused.run(*args).outputs[0].tobytes() == got.tobytes()
    assert fused.run(*args, interpret=True).outputs[0].tobytes() == got.tobytes()
    x, w, b = (np.asarray(a, np.float32) for a in args)
    if want.dtype == np.float32:  # the product widened to f32: XLA adds k in sequence
        assert want.tobytes() == (sequential_matmul(x, w) + b).tobytes()
    if blas_adds_in_sequence(x, w):  # our product is numpy's BLAS (tests/blas_order.py)
        assert got.tobytes() == want.tobytes()
    else:  # XLA's values within the rounding of the sum (bf16's after the gelu)
        rtol = 2e-6 if want.dtype == np.float32 else 2 ** -7
        np.testing.assert_allclose(np.float32(got), np.float32(want), rtol=rtol, atol=1e-6)


def test_what_stays_apart():
    """A product read by anything else, or one the loop reads through a broadcast, keeps
    its own thunk; so does one inside a while body (compiled whole: compiled_while.py)."""
    x, w, b = _n(128, 256), _n(256, 512, scale=0.06), _n(512)

    def both(x, w, b):
        y = x @ w
        return y, jax.nn.relu(y + b)
    fused, unfused = _fused(both, [x, w, b])
    assert _kinds(fused) == ["dot:", "fusion:kLoop"]
    _same_bits_close(fused, unfused, both, [x, w, b], 1e-5)
    column = lambda x, w, b: jnp.tanh((x @ w[:, 0])[:, None] + b)  # noqa: E731
    assert _kinds(_fused(column, [x, w, b])[0]) == ["dot:", "fusion:kLoop"]

    def loop(x, w, b):
        return jax.lax.fori_loop(0, 3, lambda i, h: jnp.tanh(h @ w + b), x)
    sq = [_n(256, 256), _n(256, 256, scale=0.06), _n(256)]
    fused, unfused = _fused(loop, sq)
    assert all(str(i.attrs.get("kind", "")) != "kOutput"
               for c in fused.module.computations for i in c.instructions)
    assert any(str(i.attrs.get("kind", "")) == "kLoop"  # the body's loop fusion is there
               for c in fused.module.computations for i in c.instructions)
    _same_bits_close(fused, unfused, loop, sq, 1e-4)


def test_printed_output_fusion_runs_as_read():
    """The compiled module printed and read back (a kOutput fusion in the text) runs with
    no passes to the same bits."""
    from xlaplug.hlo.text.printer import module_to_text
    f, args = _layer(jax.nn.gelu), [_n(128, 256), _n(256, 512, scale=0.06), _n(512)]
    fused, _ = _fused(f, args)
    again = xlaplug.compile(module_to_text(fused.module), passes="none")
    assert _kinds(again) == ["fusion:kOutput"]
    assert again.run(*args).outputs[0].tobytes() == fused.run(*args).outputs[0].tobytes()
