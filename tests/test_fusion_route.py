"""A fusion's route, kept in the run context after a call (cpu/fusion_route.py): later calls
take it and give the bits the full path gives; a loop's route is kept for devices running
alone or at once, and found only under the same; a fusion of one dot (XLA:CPU's
`__ynn_fusion`) calls the dot's kernel, and a profiled run still times that dot."""
from __future__ import annotations

import numpy as np
import pytest

from xlaplug.backends.cpu.fusion_route import (ROUTES, LoopRoute, ProductRoute, one_product)
from xlaplug.backends.cpu.jit_cache import HOT_CALLS
from xlaplug.hlo.text.parser import parse_module
from xlaplug.runtime.executor import ExecContext
from xlaplug.runtime.profiler import Profiler

_TEXT = """HloModule m
product {
  a = f32[64,256] parameter(0)
  b = f32[256,512] parameter(1)
  ROOT d = f32[64,512] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
swapped {
  b = f32[256,512] parameter(0)
  a = f32[64,256] parameter(1)
  ROOT d = f32[64,512] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
update {
  w = f32[64,512] parameter(0)
  g = f32[64,512] parameter(1)
  c = f32[] constant(0.025)
  k = f32[64,512] broadcast(c), dimensions={}
  m = f32[64,512] multiply(g, k)
  ROOT s = f32[64,512] subtract(w, m)
}
ENTRY e {
  a = f32[64,256] parameter(0)
  b = f32[256,512] parameter(1)
  p = f32[64,512] fusion(a, b), kind=kCustom, calls=product,
    backend_config={"fusion_config":{"kind":"__ynn_fusion"}}
  q = f32[64,512] fusion(b, a), kind=kCustom, calls=swapped,
    backend_config={"fusion_config":{"kind":"__ynn_fusion"}}
  ROOT u = f32[64,512] fusion(p, q), kind=kLoop, calls=update
}
"""


def _inputs():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 256)).astype(np.float32)
    b = rng.standard_normal((256, 512)).astype(np.float32)
    a[0, :3] = [1e-39, np.nan, np.inf]  # subnormals and specials go through as before
    return a, b


def _routes(ctx) -> dict:
    return {i.name: r for i, r in ctx.kernel_cache.table(ROUTES).items()}


def test_later_calls_take_the_kept_routes_with_the_same_bits():
    module = parse_module(_TEXT)
    a, b = _inputs()
    ctx = ExecContext("cpu", {})
    first = ctx.run(module.entry, [a, b]).tobytes()
    routes = _routes(ctx)
    assert isinstance(routes["p"], ProductRoute) and isinstance(routes["q"], ProductRoute)
    assert isinstance(routes["u"], LoopRoute)
    assert routes["q"].picks == [1, 0]  # the dot's operands, in the order it reads them
    for _ in range(3):
        assert ctx.run(module.entry, [a, b]).tobytes() == first
    interpreted = ExecContext("cpu", {"interpret_loops": True})  # no compiled loop: no route
    interpreted.run(module.entry, [a, b])
    assert "u" not in _routes(interpreted)


class _Transport:
    parallel = True  # devices of this context run at once with others


class _Place:
    transport = _Transport()
    gang = None


def test_a_loop_route_is_found_only_for_the_devices_it_was_kept_for():
    module = parse_module(_TEXT)
    a, b = _inputs()
    ctx = ExecContext("cpu", {})
    ctx.run(module.entry, [a, b])
    alone = _routes(ctx)["u"]
    assert alone.at_once is False
    ctx.begin_run(spmd=_Place())
    try:
        from xlaplug.backends.cpu.fusion_route import kept
        u = next(i for i in module.entry.instructions if i.name == "u")
        assert kept(ctx, u) is None  # a serial loop is wanted now: worked out afresh
        out = ctx.run(module.entry, [a, b])
        assert _routes(ctx)["u"].at_once is True and kept(ctx, u) is not None
    finally:
        ctx.end_run()
    assert out.tobytes() == ExecContext("cpu", {}).run(module.entry, [a, b]).tobytes()


def test_a_profiled_run_still_times_the_fusions_dot():
    module = parse_module(_TEXT)
    a, b = _inputs()
    ctx = ExecContext("cpu", {})
    ctx.run(module.entry, [a, b])
    prof = Profiler()
    ctx.begin_run(profiler=prof)
    try:
        with prof.run():
            ctx.run(module.entry, [a, b])
    finally:
        ctx.end_run()
    timed = {(s.computation, s.opcode) for s in prof.stats.values() if s.calls}
    assert ("product", "dot") in timed and ("swapped", "dot") in timed


@pytest.mark.parametrize("body, expected", [
    ("ROOT d = f32[4,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}", True),
    ("n = f32[4,4] negate(a)\n  ROOT d = f32[4,4] dot(n, b), lhs_contracting_dims={1}, "
     "rhs_contracting_dims={0}", False),
    ("ROOT d = f32[4,4] add(a, b)", False),
])
def test_one_product_is_a_dot_of_parameters_alone(body, expected):
    text = f"""HloModule m
f {{
  a = f32[4,4] parameter(0)
  b = f32[4,4] parameter(1)
  {body}
}}
ENTRY e {{
  a = f32[4,4] parameter(0)
  b = f32[4,4] parameter(1)
  ROOT r = f32[4,4] fusion(a, b), kind=kLoop, calls=f
}}
"""
    module = parse_module(text)
    assert one_product(module.entry.root.attrs["calls"][0]) is expected


_SHAPES = """HloModule m
f {
  x = T[64,32] parameter(0)
  b = T[32] parameter(1)
  k = T[64,32] broadcast(b), dimensions={1}
  m = T[64,32] multiply(x, k)
  ROOT s = T[64,32] add(m, x)
}
ENTRY e {
  a = T[32,64] parameter(0)
  b = T[32] parameter(1)
  t = T[64,32] transpose(a), dimensions={1,0}
  ROOT r = T[64,32] fusion(t, b), kind=kLoop, calls=f
}
"""


@pytest.mark.parametrize("t", ["f32", "f64", "bf16", "f16"])
def test_a_kept_loop_reads_views_broadcasts_and_narrow_types_as_before(t):
    """Operands the route cannot hand in as they are (a transposed view, a type numba
    computes in another) and results it cannot return as written (bf16, f16) go the
    general way: the bits of the first call, every call."""
    import ml_dtypes
    dt = {"f32": np.float32, "f64": np.float64, "bf16": ml_dtypes.bfloat16,
          "f16": np.float16}[t]
    module = parse_module(_SHAPES.replace("T[", f"{t}["))
    rng = np.random.default_rng(1)
    a = rng.standard_normal((32, 64)).astype(dt)
    b = rng.standard_normal(32).astype(dt)
    ctx = ExecContext("cpu", {})
    for _ in range(HOT_CALLS + 1):  # a small loop without an FMA compiles once hot
        first = ctx.run(module.entry, [a, b])  # (the call that finds the loop: no route)
        if "r" in _routes(ctx):
            break
    assert isinstance(_routes(ctx)["r"], LoopRoute)
    for _ in range(2):
        again = ctx.run(module.entry, [a, b])
        assert again.dtype == first.dtype and again.tobytes() == first.tobytes()
