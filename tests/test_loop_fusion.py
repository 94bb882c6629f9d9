"""Loop fusion (passes/loop_fusion.py) and the CPU fused-loop kernel (cpu/fused_loop.py).

jax is the oracle: programs are lowered by jax, fused by the pass, run as compiled loops and
compared with XLA's outputs.  Small shapes keep the suite fast, so the tests lower both size
thresholds to one element (pass option `min_elements`, run option `fusion_min_elements`).
The pass's own shape (what fuses, what stays) is the golden test tests/golden/loop_fusion.txt.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from xlaplug.runtime.driver import compile_module
from xlaplug.hlo import parse_module
from xlaplug.runtime.runner import execute

FUSE = {"loop-fusion": {"min_elements": 1}}


def _fused(text: str, session=None, **pass_opts):
    m = parse_module(text)
    compile_module(m, session, options={"loop-fusion": {"min_elements": 1, **pass_opts},
                                        "small-regions": {"enabled": False}})
    return m


def _fusions(m) -> list:
    return [i for c in m.computations for i in c.instructions if i.opcode == "fusion"]


def _run(m, args, **kw):
    r = execute(m, list(args), fusion_min_elements=1, **kw)
    return r.outputs, r


def _spy_compiled(monkeypatch) -> list:
    """Counts fusions that ran as compiled loops (not through the interpreter)."""
    from xlaplug.backends.cpu import fused_loop
    calls = []
    real = fused_loop.compiled_loop_fn

    def spy(comp, roles, **kw):
        calls.append(roles)
        return real(comp, roles, **kw)
    monkeypatch.setattr(fused_loop, "compiled_loop_fn", spy)
    return calls


def _jax(f, *args):
    text = jax.jit(f).lower(*args).as_text(dialect="hlo")
    want = jax.jit(f)(*args)
    want = [np.asarray(w) for w in (want if isinstance(want, (tuple, list)) else (want,))]
    return text, want


R = np.random.default_rng(0)
X = R.standard_normal((16, 24)).astype(np.float32)
Y = R.standard_normal((16, 24)).astype(np.float32)
Z = R.standard_normal((16, 24)).astype(np.float32)


def test_multiply_add_chain_is_bit_exact_with_xla(monkeypatch):
    """XLA:CPU fuses x*y+z and contracts it into an FMA (one rounding); the fused loop does
    too, so the results are XLA's bit for bit -- the per-op interpreter rounds twice."""
    text, want = _jax(lambda x, y, z: x * y + z - x * z, X, Y, Z)
    compiled = _spy_compiled(monkeypatch)
    m = _fused(text)
    assert len(_fusions(m)) == 1
    got, _ = _run(m, [X, Y, Z])
    assert compiled, "the fusion did not run as a compiled loop"
    np.testing.assert_array_equal(got[0].view(np.uint32), want[0].view(np.uint32))


EXP_ADDS = {  # f32 exp ends in its own product y * 2^m, which LLVM contracts in XLA
    "xy_plus_exp": lambda x, y: x * y + jnp.exp(-x),      # the add takes exp's product
    "exp_plus_xy": lambda x, y: jnp.exp(-x) + x * y,      # ... in either operand order
    "exp_minus_xy": lambda x, y: jnp.exp(-x) - x * y,     # ... as a subtract's minuend
    "xy_minus_exp": lambda x, y: x * y - jnp.exp(-x),     # the subtract takes x*y's
    "exp_times_y_plus_x": lambda x, y: jnp.exp(-x) * y + x,
    "chain": lambda x, y: jnp.tanh(x) * y + jnp.exp(-x) - jnp.maximum(x, y) * 0.5
    + jnp.sqrt(jnp.abs(y)),
}


@pytest.mark.parametrize("name", sorted(EXP_ADDS))
def test_multiply_adds_around_exp_are_xlas_bits(name, monkeypatch):
    """Which multiply an add absorbs when an f32 exp is one of its operands: XLA's bits on
    every element (the contraction picked wrongly differs in ~17% of them)."""
    x = np.random.default_rng(1).standard_normal((64, 96)).astype(np.float32)
    y = np.random.default_rng(2).standard_normal((64, 96)).astype(np.float32)
    text, want = _jax(EXP_ADDS[name], x, y)
    compiled = _spy_compiled(monkeypatch)
    got, _ = _run(_fused(text), [x, y])
    assert compiled, "the fusion did not run as a compiled loop"
    np.testing.assert_array_equal(got[0].view(np.uint32), want[0].view(np.uint32))


PROGRAMS = {
    "softmax": (lambda x: jax.nn.softmax(x, axis=-1), (X,), 1e-6),
    "gelu_tanh": (lambda x: jax.nn.gelu(x, approximate=True), (X,), 2e-6),
    "scalar_operands": (lambda x, y: jnp.clip(jnp.where(x > 0.5, x * 3.0, y - 1.0), -1.5, 2.0)
                        + 0.25, (X, Y), 0),
    "int_ops": (lambda a, b: (a * 3 + b) // 7 - (a ^ b) % 5 + jnp.maximum(a, b),
                (R.integers(-50, 50, (8, 9)).astype(np.int32),
                 R.integers(1, 50, (8, 9)).astype(np.int32)), 0),
    "f16": (lambda x, y: (x * y + x) / (y * y + 1), (X.astype(np.float16), Y.astype(np.float16)),
            1e-3),
    "bf16": (lambda x, y: jnp.exp(x) * y - x, (X.astype(ml_dtypes.bfloat16),
                                               Y.astype(ml_dtypes.bfloat16)), 1e-2),
    "convert_compare": (lambda x, y: (x > y).astype(jnp.float32) * x + (x.astype(jnp.int32) * 2)
                        .astype(jnp.float32), (X * 10, Y * 10), 0),
    "reshape_inside": (lambda x, y: (jnp.reshape(x * y, (24, 16)) + 1.0) * 2.0, (X, Y), 0),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_fused_programs_match_jax(name, monkeypatch):
    f, args, rtol = PROGRAMS[name]
    text, want = _jax(f, *args)
    compiled = _spy_compiled(monkeypatch)
    m = _fused(text)
    assert _fusions(m), f"{name}: nothing fused"
    got, _ = _run(m, args)
    assert compiled, f"{name}: no fusion ran as a compiled loop"
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if rtol == 0:
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol,
                                       atol=rtol)


def test_xla_kloop_fusions_run_as_compiled_loops(monkeypatch):
    """XLA's optimized HLO comes with kLoop fusions; they run through the same kernel."""
    f = lambda x, y: jnp.tanh(x * y) + jnp.exp(-x) * 0.5  # noqa: E731
    exe = jax.jit(f).lower(X, Y).compile()  # one XLA compile: its HLO and its values
    text = exe.as_text()
    m = parse_module(text)
    compile_module(m, None)
    assert any(i.attrs.get("kind") == "kLoop" for i in _fusions(m))
    compiled = _spy_compiled(monkeypatch)
    got, _ = _run(m, [X, Y])
    assert compiled
    np.testing.assert_allclose(got[0], np.asarray(exe(X, Y)), rtol=2e-6, atol=2e-6)


def test_fusion_shrinks_the_thunk_sequence_and_peak_memory():
    # At the default thresholds (65,536 elements): fused and compiled.
    x, y = (R.standard_normal((256, 256)).astype(np.float32) for _ in range(2))
    text, want = _jax(lambda x, y: jnp.exp(x) * y + jnp.sqrt(jnp.abs(x)) - y * y, x, y)
    plain = parse_module(text)
    compile_module(plain, None, "custom-call-lowering,inline-calls,tuple-simplify,dce")
    fused = parse_module(text)
    compile_module(fused, None)
    r_plain, r_fused = execute(plain, [x, y]), execute(fused, [x, y])
    np.testing.assert_allclose(r_fused.outputs[0], want[0], rtol=2e-6, atol=2e-6)
    n_plain = sum(len(c.instructions) for c in plain.computations if c is plain.entry)
    n_fused = sum(len(c.instructions) for c in fused.computations if c is fused.entry)
    assert n_fused < n_plain
    assert r_fused.peak_bytes < r_plain.peak_bytes


def test_threshold_keeps_small_arrays_unfused():
    text, _ = _jax(lambda x, y: (x + y) * y, X, Y)  # (no multiply-add to contract)
    m = parse_module(text)
    compile_module(m, None)  # default threshold: 65,536 elements
    assert not _fusions(m)
    big = np.zeros((256, 256), np.float32)
    text, _ = _jax(lambda x, y: (x + y) * y, big, big)
    m = parse_module(text)
    compile_module(m, None)
    assert len(_fusions(m)) == 1


def test_small_fusion_runs_through_the_interpreter(monkeypatch):
    m = _fused(_jax(lambda x, y: (x + y) * y, X, Y)[0])
    compiled = _spy_compiled(monkeypatch)
    got = execute(m, [X, Y]).outputs  # default fusion_min_elements: too small to compile
    assert not compiled
    np.testing.assert_allclose(got[0], (X + Y) * Y, rtol=1e-6)


SMALL_FMA = {  # XLA:CPU contracts these multiply-adds into FMAs on arrays of any size
    "sin_mul_add": lambda x, y: jnp.sin(x) * y + 1,
    "sub_of_product": lambda x, y: 0.5 - x * y,
    "through_reshape": lambda x, y: (x * y).reshape(-1) + y.reshape(-1),
    "f64": lambda x, y: x.astype(jnp.float64) * y + x,
}


@pytest.mark.parametrize("name", sorted(SMALL_FMA))
def test_small_multiply_add_is_an_fma_as_in_xla(name, monkeypatch):
    """Default thresholds: a 12-element chain with a contractible multiply-add is fused and
    run compiled (serially), so it rounds once, bit for bit XLA's; per-op kernels round
    twice (1 ULP off on some elements)."""
    x = np.linspace(-2.3, 2.9, 12, dtype=np.float32).reshape(3, 4)
    y = np.linspace(1.7, -3.1, 12, dtype=np.float32).reshape(3, 4) / np.float32(3)
    with jax.enable_x64(name == "f64"):
        text, want = _jax(SMALL_FMA[name], x, y)
    compiled = _spy_compiled(monkeypatch)
    m = parse_module(text)
    compile_module(m, None)
    assert len(_fusions(m)) == 1
    got = execute(m, [x, y]).outputs
    assert compiled == [("array", "array")]
    np.testing.assert_array_equal(got[0].view(f"u{got[0].itemsize}"),
                                  want[0].view(f"u{want[0].itemsize}"))


def test_small_fma_in_a_while_body_is_xlas_compiled_or_not():
    """A small fused multiply-add inside a while body: the iterations run before the loop
    compiles (fusion kernel) and the compiled loop (loop_codegen.py) both contract it, so
    the result is XLA's bit for bit."""
    x = np.linspace(0.05, 0.95, 12, dtype=np.float32).reshape(3, 4)

    def f(v):  # the logistic map: chaotic, so one double rounding shows in the result
        return lax.fori_loop(0, 40, lambda i, v: v * 3.9 - v * v * 3.9, v)
    text, want = _jax(f, x)
    m = parse_module(text)
    compile_module(m, None)
    got = execute(m, [x]).outputs
    np.testing.assert_array_equal(got[0].view(np.uint32), want[0].view(np.uint32))


def test_non_loop_fusion_is_interpreted(monkeypatch):
    """A fusion whose body moves elements (transpose) is not one loop: it is interpreted."""
    text = """HloModule m
fused {
  p = f32[3,4] parameter(0)
  t = f32[4,3] transpose(p), dimensions={1,0}
  ROOT n = f32[4,3] negate(t)
}
ENTRY e {
  x = f32[3,4] parameter(0)
  ROOT f = f32[4,3] fusion(x), kind=kLoop, calls=fused
}
"""
    compiled = _spy_compiled(monkeypatch)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    got, _ = _run(parse_module(text), [x])
    assert not compiled
    np.testing.assert_array_equal(got[0], -x.T)


def test_opcodes_a_plugin_overrides_are_not_fused():
    from xlaplug.plugin import Plugin, Registry, Session
    p = Plugin("fast_add")

    @p.kernel("add", device="cpu")
    def fast_add(a, b, out):
        np.add(a, b, out=out)
    reg = Registry()
    reg.add(p)
    text, _ = _jax(lambda x, y: (x * y + y) * x, X, Y)
    m = _fused(text, Session(reg))
    for f in _fusions(m):
        assert not any(i.opcode == "add" for i in f.attrs["calls"][0].instructions)
    assert any(i.opcode == "add" for i in m.entry.instructions)


def test_loop_inside_while_body():
    """Fusion applies inside called computations too (a while body), and the loop state
    flows through the compiled loop each iteration."""
    def f(x):
        return lax.fori_loop(0, 5, lambda i, v: v * 0.5 + jnp.sin(v), x)
    text, want = _jax(f, X)
    m = _fused(text)
    assert _fusions(m)
    got, _ = _run(m, [X])
    np.testing.assert_allclose(got[0], want[0], rtol=2e-6, atol=2e-6)


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["softmax", "scalar_operands", "int_ops", "f16", "bf16"])
def test_fused_programs_on_cuda_match_cpu(name):
    """The same fused modules on CUDA (numba's simulator in CI): one kernel per fusion."""
    from xlaplug.backends.cuda import fused_loop as cuda_fused
    f, args, rtol = PROGRAMS[name]
    text, want = _jax(f, *args)
    m = _fused(text)
    cpu, _ = _run(m, args)
    calls = []
    real = cuda_fused.gen_kernel

    def spy(key, *a, **k):
        calls.append(key)
        return real(key, *a, **k)
    cuda_fused.gen_kernel = spy
    try:
        gpu, _ = _run(_fused(text), args, device="cuda")
    finally:
        cuda_fused.gen_kernel = real
    assert calls, f"{name}: no fusion ran as one CUDA kernel"
    for g, c, w in zip(gpu, cpu, want):
        assert g.dtype == c.dtype == w.dtype
        if rtol == 0:
            np.testing.assert_array_equal(g, c)
        else:
            np.testing.assert_allclose(g.astype(np.float64), c.astype(np.float64), rtol=rtol,
                                       atol=rtol)


def test_shared_broadcast_of_a_constant_stays_for_its_other_users():
    """A broadcast(constant) is duplicated into the fusion; when an instruction outside
    still reads it, both the broadcast and its constant stay (found running the corpus)."""
    text = """HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  c = f32[] constant(2)
  b = f32[4] broadcast(c), dimensions={}
  m = f32[4] multiply(x, b)
  a = f32[4] add(m, x)
  z = f32[] constant(0)
  r = f32[] reduce(b, z), dimensions={0}, to_apply=add
  ROOT t = (f32[4], f32[]) tuple(a, r)
}
add {
  p = f32[] parameter(0)
  q = f32[] parameter(1)
  ROOT s = f32[] add(p, q)
}
"""
    m = _fused(text)  # verified after the pass: every operand is in its computation
    assert len(_fusions(m)) == 1
    x = np.arange(4, dtype=np.float32)
    got, _ = _run(m, [x])
    np.testing.assert_array_equal(got[0], x * 2 + x)
    assert got[1] == 8


def test_fused_computation_names_stay_unique():
    """XLA's optimized HLO already has `fused_computation`s; new ones get fresh names."""
    text = """HloModule m
fused_computation {
  p = f32[4] parameter(0)
  ROOT n = f32[4] negate(p)
}
ENTRY e {
  x = f32[4] parameter(0)
  f = f32[4] fusion(x), kind=kLoop, calls=fused_computation
  m = f32[4] multiply(f, x)
  ROOT a = f32[4] add(m, x)
}
"""
    m = _fused(text)
    names = [c.name for c in m.computations]
    assert len(_fusions(m)) == 2 and len(names) == len(set(names)), names
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(_run(m, [x])[0][0], -x * x + x)


@pytest.mark.parametrize("case", ["rows", "cols", "middle", "outer_of_3d"])
def test_broadcast_operands_are_read_in_place(case, monkeypatch):
    """A broadcast of an array (a bias, a row statistic) joins the loop: the loop reads its
    operand at the mapped index instead of materializing it (loop_fusion.param_index_map)."""
    r = np.random.default_rng(4)
    x = r.standard_normal((6, 5, 4)).astype(np.float32)
    f, v = {
        "rows": (lambda x, v: x * v[:, None, None] + x, r.standard_normal(6)),
        "cols": (lambda x, v: x * v[None, None, :] - 1.5, r.standard_normal(4)),
        "middle": (lambda x, v: (x - v[None, :, None]) * 2.0, r.standard_normal(5)),
        "outer_of_3d": (lambda x, v: x * v[:, None, :] + v[:, None, :],
                        r.standard_normal((6, 4))),
    }[case]
    v = v.astype(np.float32)
    text, want = _jax(f, x, v)
    compiled = _spy_compiled(monkeypatch)
    m = _fused(text)
    (fusion,) = _fusions(m)
    body = fusion.attrs["calls"][0]
    assert any(i.opcode == "broadcast" and i.operands[0].shape.rank for i in body.instructions)
    got, _ = _run(m, [x, v])
    assert compiled and any(isinstance(role, tuple) for role in compiled[0])
    np.testing.assert_array_equal(got[0], want[0])


def test_bf16_loop_reads_and_writes_bf16_bits(monkeypatch):
    """bf16 operands and results travel through a compiled loop as their bits
    (fused_loop.loop_storage), widened and rounded inside the loop, with no f32 copies:
    edge values (NaN, inf, subnormals, the largest finite, ties) and a broadcast bf16
    operand give XLA's values and the interpreter's bits."""
    bf = ml_dtypes.bfloat16
    edge = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-39, 3.389e38,
                     -3.38e38, 1.0078125, 1.00390625, 65504.0, 2.5e-38, 1.2e-38], np.float32)
    x = np.concatenate([edge, R.standard_normal(16 * 24 - edge.size).astype(np.float32)])
    x = x.reshape(16, 24).astype(bf)
    y = (R.standard_normal((16, 24)) * 3).astype(bf)
    v = R.standard_normal(24).astype(bf)
    text, want = _jax(lambda x, y, v: jnp.tanh(x * y + v) * x - v * 3, x, y, v)
    compiled = _spy_compiled(monkeypatch)
    m = _fused(text)
    got, _ = _run(m, [x, y, v])
    assert compiled and got[0].dtype == want[0].dtype
    ref, _ = _run(m, [x, y, v], interpret=True)
    np.testing.assert_array_equal(got[0].view(np.uint16), ref[0].view(np.uint16))
    np.testing.assert_array_equal(np.float32(got[0]), np.float32(want[0]))  # NaN where NaN
