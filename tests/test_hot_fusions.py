"""A small loop fusion runs interpreted until its run context has called it HOT_CALLS times,
then as the serial compiled loop (cpu/fused_loop.py): our own policy; the values must not
change when it switches."""
from __future__ import annotations

import numpy as np

from xlaplug.backends.cpu import fused_loop
from xlaplug.runtime.executor import ExecContext
from xlaplug.hlo.text.parser import parse_module

_TEXT = """HloModule m
f {
  a = f32[64,64] parameter(0)
  b = f32[64,64] parameter(1)
  d = f32[64,64] subtract(a, b)
  c = f32[] constant(0.00048828125)
  k = f32[64,64] broadcast(c), dimensions={}
  ROOT m = f32[64,64] multiply(d, k)
}
ENTRY e {
  a = f32[64,64] parameter(0)
  b = f32[64,64] parameter(1)
  ROOT r = f32[64,64] fusion(a, b), kind=kLoop, calls=f
}
"""


def test_a_small_fusion_compiles_once_hot_with_the_same_values():
    module = parse_module(_TEXT)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((64, 64)).astype(np.float32) for _ in range(2))
    a[0, :4] = [1e-39, -1e-39, np.nan, np.inf]  # subnormals flush, as XLA:CPU does
    ctx = ExecContext("cpu", {})
    plans = ctx.kernel_cache.table("_fused_small_plans")
    outs = []
    for call in range(fused_loop.HOT_CALLS + 2):
        outs.append(ctx.run(module.entry, [a, b]).tobytes())
        assert (len(plans) > 0) == (call >= fused_loop.HOT_CALLS), call
    assert len(set(outs)) == 1
    interpreted = ExecContext("cpu", {"interpret_loops": True})
    for _ in range(fused_loop.HOT_CALLS + 2):
        assert interpreted.run(module.entry, [a, b]).tobytes() == outs[0]
    assert not interpreted.kernel_cache.table("_fused_small_plans")


def test_a_tiny_fusion_calls_its_body_a_larger_one_inlines_it():
    # Below INLINE_FROM_ELEMENTS the serial loop calls the body's functions (half the cold
    # compile); from there it inlines them, so that the loop vectorizes.  Same values.
    from xlaplug.backends.cpu.jit_cache import scalar_piece
    tiny = parse_module(_TEXT.replace("64,64", "8,8"))
    comp = tiny.entry.root.attrs["calls"][0]
    assert 'inline="always"' not in scalar_piece(comp, "F", elementwise=True, inline=False)[0]
    assert 'inline="always"' in scalar_piece(comp, "F", elementwise=True)[0]
    a, b = (np.random.default_rng(1).standard_normal((8, 8)).astype(np.float32)
            for _ in range(2))
    ctx = ExecContext("cpu", {})
    for _ in range(fused_loop.HOT_CALLS + 1):
        got = ctx.run(tiny.entry, [a, b])
    assert ctx.kernel_cache.table("_fused_tiny_plans")
    assert not ctx.kernel_cache.table("_fused_small_plans")
    interpreted = ExecContext("cpu", {"interpret_loops": True}).run(tiny.entry, [a, b])
    assert got.tobytes() == interpreted.tobytes()
    large = ExecContext("cpu", {})
    module = parse_module(_TEXT)  # 4096 elements: inlined
    for _ in range(fused_loop.HOT_CALLS + 1):
        large.run(module.entry, [np.ones((64, 64), np.float32)] * 2)
    assert large.kernel_cache.table("_fused_small_plans")
    assert not large.kernel_cache.table("_fused_tiny_plans")


def test_a_fusion_forced_to_compile_below_the_threshold_is_a_serial_loop():
    # A run that lowers fusion_min_elements compiles fusions below the default threshold
    # (DEFAULT_MIN_ELEMENTS): too small for a team of threads, so the serial loop, which
    # numba also compiles faster than a parallel one.  Same values as interpreted.
    module = parse_module(_TEXT)
    a, b = (np.random.default_rng(2).standard_normal((64, 64)).astype(np.float32)
            for _ in range(2))
    ctx = ExecContext("cpu", {"fusion_min_elements": 1})
    got = ctx.run(module.entry, [a, b])
    assert ctx.kernel_cache.table("_fused_serial_plans")
    assert not ctx.kernel_cache.table("_fused_loop_plans")
    interpreted = ExecContext("cpu", {"interpret_loops": True}).run(module.entry, [a, b])
    assert got.tobytes() == interpreted.tobytes()


_OUTPUT = """HloModule o
f {
  x = f32[32,64] parameter(0)
  w = f32[64,256] parameter(1)
  d = f32[32,256] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[32,256] tanh(d)
  ROOT m = f32[32,256] multiply(d, t)
}
ENTRY e {
  x = f32[32,64] parameter(0)
  w = f32[64,256] parameter(1)
  ROOT r = f32[32,256] fusion(x, w), kind=kOutput, calls=f
}
"""


def test_a_small_output_fusion_runs_its_epilogue_in_place_once_hot():
    # A product's epilogue below the threshold, hot, writes the product's own buffer through
    # the loop that reads parameter 0 from `out` (cpu/dot_epilogue.py): handed the one array
    # as two pointers, LLVM's overlap check ran the loop scalar (the transformer block's GELU,
    # f32[4,32,256]: 0.54 of 0.85 ms a step).  Same bits as interpreted.
    module = parse_module(_OUTPUT)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((32, 64)).astype(np.float32)
    w = (rng.standard_normal((64, 256)) / 8).astype(np.float32)
    ctx = ExecContext("cpu", {})
    outs = [ctx.run(module.entry, [x, w]).tobytes() for _ in range(fused_loop.HOT_CALLS + 2)]
    assert ctx.kernel_cache.table("_fused_small_inplace_plans")
    assert len(set(outs)) == 1
    interpreted = ExecContext("cpu", {"interpret_loops": True}).run(module.entry, [x, w])
    assert interpreted.tobytes() == outs[0]
