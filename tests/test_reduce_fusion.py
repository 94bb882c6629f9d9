"""Reduction fusion (passes/reduce_fusion.py) and the CPU row loop (cpu/row_fusion.py,
cpu/row_loop.py): softmax, layernorm, logsumexp, mean/variance as one fusion run per row.

Values are XLA's through jax (lowered HLO, and XLA:CPU's own optimized HLO with its kInput
and `__ynn_fusion` fusions).  Float sums match XLA to a tolerance only -- neither path
adds in XLA:CPU's order (YNNPACK's, or a reduce-window tree for odd sizes) -- but the fused
loop keeps the unfused kernels' order (numpy's pairwise sum for a plain f32/f64 add, the
reducer's own fold otherwise), so fused and interpreted runs give the same bits: that is
checked exactly.
"""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from xlaplug.backends.cpu.row_folds import pairwise_program  # noqa: E402
from xlaplug.runtime.driver import compile_module  # noqa: E402
from xlaplug.hlo import parse_module  # noqa: E402
from xlaplug.runtime.runner import execute  # noqa: E402

pytestmark = pytest.mark.jax
R = np.random.default_rng(12)
FUSE = {"reduce-fusion": {"min_elements": 1}, "loop-fusion": {"min_elements": 1}}


def _normal(*shape, dt=np.float32):
    return R.standard_normal(shape).astype(dt)


def _layernorm(x):
    m = jnp.mean(x, axis=-1, keepdims=True)
    v = jnp.mean((x - m) ** 2, axis=-1, keepdims=True)
    return (x - m) * lax.rsqrt(v + 1e-5)


def _scaled_layernorm(x, g, b):
    return _layernorm(x) * g + b


def _spy_rows(monkeypatch) -> list:
    """Records each fusion the row loop ran (True) or left to the interpreter (False)."""
    from xlaplug.backends.cpu import fused_loop
    calls = []
    real = fused_loop.run_row_fusion

    def spy(ins, args, ctx):
        out = real(ins, args, ctx)
        calls.append(out is not None)
        return out
    monkeypatch.setattr(fused_loop, "run_row_fusion", spy)
    return calls


def _fusions(m) -> list:
    return [i for c in m.computations for i in c.instructions if i.opcode == "fusion"]


def _check(m, args, want, rtol, today=None):
    """Run fused (compiled at any size); close to XLA's `want`, and bit for bit what
    today's path gives: `today` (the module through loop-fusion alone, at any size), or
    the interpreter -- the unfused kernels' order of additions is kept."""
    got = execute(m, list(args), fusion_min_elements=1).outputs
    if today is None:
        ref = execute(m, list(args), interpret=True).outputs
    else:
        ref = execute(today, list(args), fusion_min_elements=1).outputs
    want = want if isinstance(want, (tuple, list)) else (want,)
    for g, r, w in zip(got, ref, want):
        w = np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g.view(np.uint8), r.view(np.uint8))
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol,
                                   atol=rtol)


def _today(text: str):
    """The module through the default pipeline without reduce-fusion (loop fusion at any
    size: its fused multiply-adds are XLA's, which interpreting would round twice)."""
    m = parse_module(text)
    compile_module(m, None, "custom-call-lowering,inline-calls,tuple-simplify,dce,"
                   "loop-fusion{min_elements=1}")
    return m


PROGRAMS = {  # name: (function, arguments, rtol against XLA); the first two in the fast loop
    "softmax": (lambda x: jax.nn.softmax(x, axis=-1), (_normal(7, 37),), 2e-6),
    "scaled_layernorm": (_scaled_layernorm, (_normal(6, 33), _normal(33), _normal(33)), 1e-5),
    "layernorm": (_layernorm, (_normal(5, 3, 40),), 1e-5),
    "logsumexp": (lambda x: jax.nn.logsumexp(x, axis=-1), (_normal(9, 130),), 1e-6),
    "mean_var": (lambda x: (jnp.mean(x, axis=(1, 2)), jnp.var(x, axis=(1, 2))),
                 (_normal(4, 3, 50),), 1e-5),
    "short_rows": (lambda x: jax.nn.softmax(x * 2.0, axis=-1), (_normal(11, 5),), 2e-6),
    # A mask broadcast under the rows (read per row as a slice of its own: row_loop.py).
    "causal_softmax": (lambda x: jax.nn.softmax(jnp.where(jnp.tril(jnp.ones((9, 9), bool)),
                                                          x, -1e9), axis=-1),
                       (_normal(2, 3, 9, 9),), 2e-6),
    # Lone reduces: a sum of rows of 1,000 (eight leaves of numpy's pairwise sum, of unequal
    # lengths, as vector code: pairwise_vector.py) and a max, each a fusion of its own.
    "row_sum": (lambda x: jnp.sum(x, axis=-1), (_normal(6, 1000),), 1e-5),
    "row_max": (lambda x: jnp.max(x, axis=-1), (_normal(6, 1000),), 0.0),
}
FAST = ["softmax", "scaled_layernorm"]


def _lowered_program(name, monkeypatch):
    f, args, rtol = PROGRAMS[name]
    jf = jax.jit(f)
    text = jf.lower(*args).as_text(dialect="hlo")
    m = parse_module(text)
    compile_module(m, None, options=FUSE)
    fused = [i for i in _fusions(m) if any(x.opcode == "reduce"
                                          for x in i.attrs["calls"][0].instructions)]
    assert fused, f"{name}: no reduce was fused"
    rows = _spy_rows(monkeypatch)
    _check(m, args, jf(*args), rtol, _today(text))
    assert rows and all(rows), f"{name}: a row fusion was interpreted"


@pytest.mark.parametrize("name", FAST)
def test_lowered_programs_fuse_and_match_xla(name, monkeypatch):
    _lowered_program(name, monkeypatch)


@pytest.mark.parametrize("name", sorted(set(PROGRAMS) - set(FAST)))
def test_more_lowered_programs_fuse_and_match_xla(name, monkeypatch):
    _lowered_program(name, monkeypatch)


def test_softmax_is_one_fusion_with_no_full_size_temporary():
    """softmax = max, exp-sum, normalize in one fusion reading x: the unfused thunks hold
    two more f32[M,K] buffers."""
    x = _normal(256, 256)
    text = jax.jit(lambda x: jax.nn.softmax(x, axis=-1)).lower(x).as_text(dialect="hlo")
    fused, plain = parse_module(text), parse_module(text)
    compile_module(fused, None)   # the default thresholds: 65,536 elements fuse
    compile_module(plain, None, "custom-call-lowering,inline-calls,tuple-simplify,dce")
    (f,) = _fusions(fused)
    assert [i.opcode for i in fused.entry.instructions] == ["parameter", "fusion"]
    body = f.attrs["calls"][0]
    assert sum(i.opcode == "reduce" for i in body.instructions) == 2
    r_fused, r_plain = execute(fused, [x]), execute(plain, [x])
    assert r_fused.peak_bytes < r_plain.peak_bytes
    assert r_fused.peak_bytes <= 2 * x.nbytes  # x and the output, nothing of their size more
    np.testing.assert_array_equal(r_fused.outputs[0], execute(fused, [x], interpret=True)
                                  .outputs[0])


XLA_PROGRAMS = {  # XLA:CPU's optimized HLO: kCustom __ynn_fusion and kLoop row fusions
    "softmax": (lambda x: jax.nn.softmax(x, axis=-1), (_normal(64, 300),), 2e-6),
    "layernorm": (_layernorm, (_normal(64, 250),), 1e-5),
    "softmax_bitcast": (lambda x: jax.nn.softmax(x.reshape(8, 8, 300), axis=-1),  # a bitcast
                        (_normal(64, 300),), 2e-6),
}


@pytest.mark.parametrize("name", ["softmax"])
def test_xla_optimized_fusions_run_as_row_loops(name, monkeypatch):
    _xla_program(name, monkeypatch)


@pytest.mark.parametrize("name", ["layernorm", "softmax_bitcast"])
def test_more_xla_optimized_fusions_run_as_row_loops(name, monkeypatch):
    _xla_program(name, monkeypatch)


def _xla_program(name, monkeypatch):
    f, args, rtol = XLA_PROGRAMS[name]
    compiled = jax.jit(f).lower(*args).compile()  # one XLA compile: its HLO and its values
    text = compiled.as_text()
    m = parse_module(text)
    compile_module(m, None)
    kinds = {str(i.attrs["kind"]) for i in _fusions(m)}
    assert kinds & {"kCustom", "kInput"}, kinds
    from xlaplug.backends.cpu import fused_loop
    with monkeypatch.context() as mp:  # today's path: those fusions interpreted
        mp.setattr(fused_loop, "run_row_fusion", lambda ins, args, ctx: None)
        today = execute(m, list(args), fusion_min_elements=1).outputs
    rows = _spy_rows(monkeypatch)
    got = execute(m, list(args), fusion_min_elements=1).outputs
    assert any(rows), f"{name}: no XLA fusion ran as a row loop"
    want = np.asarray(compiled(*args))
    np.testing.assert_array_equal(got[0].view(np.uint32), today[0].view(np.uint32))
    np.testing.assert_allclose(got[0], want, rtol=rtol, atol=rtol)


def test_f64_and_nan_rows():
    """f64 softmax (x64) and max/sum rows holding NaN and infinities: NaN wins a max."""
    x = _normal(6, 70).astype(np.float64)
    x[1, 3] = np.nan
    x[2, :] = -np.inf
    x[3, 5] = np.inf
    with jax.enable_x64(True):
        jf = jax.jit(lambda x: (jnp.max(x * 2.0, axis=-1), jnp.sum(jnp.exp(x - 1.0), axis=-1)))
        text = jf.lower(x).as_text(dialect="hlo")
        want = jf(x)
    m = parse_module(text)
    compile_module(m, None, options=FUSE)
    assert len(_fusions(m)) == 2
    _check(m, [x], want, 1e-12)


def test_f32_max_and_min_rows_by_their_codes(monkeypatch):
    """row_folds.coded_extreme: an f32 row's max and min from its elements' integer codes,
    the 8 lanes in numpy's order only where the result is a 0 or a NaN is there -- the
    lanes' bits on rows of +-0 in either order, NaNs of either sign, infinities, all -inf,
    subnormals and plain values, at a length with a tail past the lanes (37); and the
    interpreter's (numpy's fold) on the rows with neither 0s nor subnormals (where a row's
    extreme is a 0 of either sign the lanes keep the one numpy's 8-lane order keeps, which
    numpy's own reduce on this CPU need not: row 8's min gave -0 against numpy's +0, as
    before the codes)."""
    from xlaplug.backends.cpu import row_folds
    x = _normal(14, 37)
    x[0, :] = 0.0
    x[0, ::3] = -0.0                     # max and min are 0s: their signs are the order's
    x[1, :] = -np.abs(x[1])
    x[1, 5], x[1, 9] = -0.0, 0.0
    x[2, 4] = np.nan
    x[3, 7] = -np.float32(np.nan)        # a NaN whose sign bit is set
    x[4, :] = -np.inf
    x[5, 2], x[5, 30] = np.inf, -np.inf
    x[6, :] = np.finfo(np.float32).tiny / np.float32(4) * _normal(37)
    x[7, 36] = np.abs(x[7]).max() + 1    # the max in the tail
    x[8, :] = np.abs(x[8])
    x[8, 11], x[8, 12] = 0.0, -0.0
    jf = jax.jit(lambda x: (x - jnp.max(x, axis=-1, keepdims=True),
                            x - jnp.min(x, axis=-1, keepdims=True)))
    m = parse_module(jf.lower(x).as_text(dialect="hlo"))
    compile_module(m, None, options=FUSE)
    rows = _spy_rows(monkeypatch)
    got = execute(m, [x], fusion_min_elements=1).outputs
    assert rows and all(rows)
    with monkeypatch.context() as lanes:  # the 8 lanes on every row
        lanes.setattr(row_folds, "coded_extreme", lambda *a: [f"{a[6]}if True:", *a[7]])
        ref = execute(m, [x], fusion_min_elements=1).outputs
    numpy = execute(m, [x], interpret=True).outputs
    plain = ~np.isin(np.arange(14), [0, 1, 6, 8])
    for g, r, n in zip(got, ref, numpy):
        np.testing.assert_array_equal(g.view(np.uint32), r.view(np.uint32))
        np.testing.assert_array_equal(g[plain].view(np.uint32), n[plain].view(np.uint32))


def test_bf16_reduce_rounds_every_step_as_xla():
    """A bf16 add reduce: XLA:CPU accumulates in f32 rounding to bf16 after every add (its
    optimized reducer is convert(convert(add))); the fused loop folds with the bf16 reducer
    in row order, as the unfused compiled fold does.  A bf16 max fuses too."""
    x = (_normal(8, 96) * 4).astype(ml_dtypes.bfloat16)

    def f(x):
        s = lax.reduce(jnp.abs(x) + x, jnp.bfloat16(0), lax.add, (1,))
        return s, jnp.max(x * 2, axis=-1)
    jf = jax.jit(f)
    m = parse_module(jf.lower(x).as_text(dialect="hlo"))
    compile_module(m, None, options=FUSE)
    assert len(_fusions(m)) == 2
    _check(m, [x], jf(x), 5e-2)


def test_bf16_causal_softmax_is_xlas_bits(monkeypatch):
    """The bf16 transformer block's attention softmax: the causal mask, pred[T,T] under
    [B,H,T,T], read per row as a slice (row_loop.py), exp unrounded into the sum (excess
    precision) and rounded for the divide -- XLA's bits, and the interpreter's."""
    x = (_normal(2, 3, 40, 40) * 3).astype(ml_dtypes.bfloat16)
    jf = jax.jit(lambda x: jax.nn.softmax(jnp.where(jnp.tril(jnp.ones((40, 40), bool)),
                                                    x * 0.125, jnp.finfo(x.dtype).min)))
    m = parse_module(jf.lower(x).as_text(dialect="hlo"))
    compile_module(m, None, options=FUSE)
    rows = _spy_rows(monkeypatch)
    got = execute(m, [x], fusion_min_elements=1).outputs[0]
    assert rows and all(rows)
    np.testing.assert_array_equal(got.view(np.uint16), np.asarray(jf(x)).view(np.uint16))
    ref = execute(m, [x], interpret=True).outputs[0]
    np.testing.assert_array_equal(got.view(np.uint16), ref.view(np.uint16))


def test_row_loop_flushes_only_what_may_hold_a_subnormal(monkeypatch):
    """row_flush.py: the row loop's code leaves out the operand flushes of values flushed
    already (an op's flushed result, a select between such values, a clean constant, a
    row buffer of them), and keeps those of parameters -- the same bits as the loop with
    every flush, where rows, scales and offsets hold subnormals, in a scaled layer norm and
    a causal softmax of scaled scores."""
    from xlaplug.backends.cpu import row_loop
    from xlaplug.backends.cpu.row_fusion import row_work
    sub = np.finfo(np.float32).tiny / np.float32(8)
    x, g, b = _normal(6, 40), _normal(40), _normal(40)
    x[:, ::5] *= sub
    x[2] = sub * _normal(40)  # a whole row of subnormals: its mean and variance flush
    g[::4] *= sub
    b[1::4] *= sub
    s = _normal(2, 3, 40, 40)
    s[..., ::7] *= sub
    causal = lambda s: jax.nn.softmax(jnp.where(jnp.tril(jnp.ones((40, 40), bool)),  # noqa: E731
                                                s * 0.125, jnp.finfo(s.dtype).min))
    for f, args, rtol in ((_scaled_layernorm, (x, g, b), 1e-5), (causal, (s,), 2e-6)):
        jf = jax.jit(f)
        m = parse_module(jf.lower(*args).as_text(dialect="hlo"))
        compile_module(m, None, options=FUSE)
        rows = _spy_rows(monkeypatch)
        got = execute(m, list(args), fusion_min_elements=1).outputs[0]
        assert rows and all(rows)
        np.testing.assert_allclose(got, np.asarray(jf(*args)), rtol=rtol, atol=rtol)
        for fusion in _fusions(m):
            comp = fusion.attrs["calls"][0]
            shape = row_work(comp)
            if shape is not None:
                src = row_loop.RowLoopGen(comp, *shape).source(False)
                assert re.search(r"_xftzd?32\(x0\[k\]\)", src)  # a parameter's element: flushed
                assert not re.search(r"_xftzd?32\(((e|r|RK)\d+|t\d+\[k\])\)", src), src
        with monkeypatch.context() as every:  # the loop with every flush
            every.setattr(row_loop, "strip", lambda expr, clean: expr)
            ref = execute(m, list(args), fusion_min_elements=1).outputs[0]
        np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))


def test_bf16_layernorm_reads_and_writes_bits(monkeypatch):
    """The bf16 block's layernorm (f32 sums of widened rows, bf16 scale and offset read
    per column): the row loop reads and writes bf16 as its bits (jit_drivers.loop_storage);
    XLA's bits where the sums agree, and the interpreter's."""
    bf = ml_dtypes.bfloat16
    x, g, b = (_normal(6, 64) * 2).astype(bf), _normal(64).astype(bf), _normal(64).astype(bf)
    x[0, :3] = [np.nan, np.inf, -np.inf]
    jf = jax.jit(_scaled_layernorm)
    m = parse_module(jf.lower(x, g, b).as_text(dialect="hlo"))
    compile_module(m, None, options=FUSE)
    rows = _spy_rows(monkeypatch)
    got = execute(m, [x, g, b], fusion_min_elements=1).outputs[0]
    assert rows and all(rows) and got.dtype == bf
    ref = execute(m, [x, g, b], interpret=True).outputs[0]
    np.testing.assert_array_equal(got.view(np.uint16), ref.view(np.uint16))
    np.testing.assert_allclose(np.float32(got), np.float32(jf(x, g, b)), rtol=2e-2, atol=2e-2)


def test_what_stays_unfused():
    """Below min_elements nothing fuses; a reduce over a leading dimension is not a row
    reduction; a producer read outside the group stays outside (computed once); a sum left
    alone is a fusion of its own (its fold is vector code in the row loop), a product left
    alone none (numpy's reduce runs it as fast)."""
    x = _normal(8, 16)
    lowered = lambda f: parse_module(jax.jit(f).lower(x).as_text(dialect="hlo"))  # noqa: E731
    m = lowered(lambda x: jax.nn.softmax(x, axis=-1))
    compile_module(m, None, options={"reduce-fusion": {"min_elements": 1 << 20},
                                    "small-regions": {"enabled": False}})
    assert not _fusions(m)
    m = lowered(lambda x: jnp.sum(jnp.exp(x), axis=0))
    compile_module(m, None, "reduce-fusion{min_elements=1}")
    assert not _fusions(m)

    def shared(x):
        e = jnp.exp(x)
        return e * 2.0, jnp.sum(e, axis=1)
    m = lowered(shared)
    compile_module(m, None, "reduce-fusion{min_elements=1}")
    (f,) = _fusions(m)
    assert "exponential" not in {i.opcode for i in f.attrs["calls"][0].instructions}
    assert any(i.opcode == "exponential" for i in m.entry.instructions)
    m = lowered(lambda x: jnp.prod(x, axis=1))
    compile_module(m, None, "reduce-fusion{min_elements=1}")
    assert not _fusions(m)
    m = lowered(lambda x: jnp.sum(jnp.exp(x), axis=1) * 2.0)
    compile_module(m, None, "reduce-fusion{min_elements=1}")
    (f,) = _fusions(m)
    assert str(f.attrs["kind"]) == "kLoop"
    assert {i.opcode for i in f.attrs["calls"][0].instructions} >= {"exponential", "reduce"}


def test_pairwise_program_is_numpys_order():
    """The leaf/add program sums in numpy's pairwise order: same bits as np.add.reduce."""
    for n in (8, 9, 127, 128, 129, 300, 1000, 4099):
        x = R.standard_normal(n).astype(np.float32)
        starts, lens, prog = pairwise_program(n)
        stack = []
        for c in prog:
            if c < 0:
                b, a = stack.pop(), stack.pop()
                stack.append(np.float32(a + b))
                continue
            s, ln = starts[c], lens[c]
            r = list(x[s:s + 8])
            q = 8
            while q < ln - ln % 8:
                r = [np.float32(r[j] + x[s + q + j]) for j in range(8)]
                q += 8
            res = np.float32(np.float32(np.float32(r[0] + r[1]) + np.float32(r[2] + r[3])) +
                             np.float32(np.float32(r[4] + r[5]) + np.float32(r[6] + r[7])))
            for t in range(q, ln):
                res = np.float32(res + x[s + t])
            stack.append(res)
        assert stack[0].tobytes() == np.add.reduce(x).tobytes(), n


def test_multi_output_kinput_fusion(monkeypatch):
    """A kInput fusion with a tuple root (a row sum and the full exp it summed, as XLA's
    multi-output fusions have) runs as one row loop; its init is a parameter holding the
    identity, so the sum takes numpy's pairwise order, as the interpreter's reduce does."""
    text = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
fused {
  p = f32[16,1030]{1,0} parameter(0)
  z = f32[] parameter(1)
  e = f32[16,1030]{1,0} exponential(p)
  s = f32[16]{0} reduce(e, z), dimensions={1}, to_apply=add
  ROOT t = (f32[16]{0}, f32[16,1030]{1,0}) tuple(s, e)
}
ENTRY main {
  x = f32[16,1030]{1,0} parameter(0)
  zero = f32[] constant(0)
  ROOT f = (f32[16]{0}, f32[16,1030]{1,0}) fusion(x, zero), kind=kInput, calls=fused
}
"""
    x = _normal(16, 1030)
    m = parse_module(text)
    rows = _spy_rows(monkeypatch)
    got = execute(m, [x], fusion_min_elements=1).outputs
    ref = execute(m, [x], interpret=True).outputs
    assert rows[0] is True  # (the interpreted run asks too, and is refused)
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g.view(np.uint32), r.view(np.uint32))
    np.testing.assert_allclose(got[0], np.exp(x.astype(np.float64)).sum(axis=1), rtol=1e-5)
