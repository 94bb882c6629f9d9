"""A dot of two f32 / f64 matrices takes the direct `@` of its operands' views after its first
call in a run context (cpu/linalg._dot): the bits of the general path, for every layout of
the contracting dimensions; other dots (batched, no contraction, narrow floats, integers)
never take it."""
from __future__ import annotations

import numpy as np
import pytest

from xlaplug.hlo.text.parser import parse_module
from xlaplug.runtime.executor import ExecContext


def _module(lhs: str, rhs: str, out: str, dims: str, t: str = "f32"):
    return parse_module(f"""HloModule m
ENTRY e {{
  a = {t}[{lhs}] parameter(0)
  b = {t}[{rhs}] parameter(1)
  ROOT d = {t}[{out}] dot(a, b), {dims}
}}
""")


def _direct(ctx) -> set[str]:
    return {i.name for i in ctx.kernel_cache.table("_dot_direct")}


@pytest.mark.parametrize("t", ["f32", "f64"])
@pytest.mark.parametrize("lc, rc", [(1, 0), (0, 0), (1, 1), (0, 1)])
def test_a_matrix_product_is_direct_after_its_first_call_with_the_same_bits(t, lc, rc):
    m, k, n = 33, 65, 17
    lhs = (m, k) if lc == 1 else (k, m)
    rhs = (k, n) if rc == 0 else (n, k)
    module = _module(",".join(map(str, lhs)), ",".join(map(str, rhs)), f"{m},{n}",
                     f"lhs_contracting_dims={{{lc}}}, rhs_contracting_dims={{{rc}}}", t)
    rng = np.random.default_rng(lc * 2 + rc)
    a = rng.standard_normal(lhs).astype(t.replace("f", "float"))
    b = rng.standard_normal(rhs).astype(t.replace("f", "float"))
    a.flat[:3] = [1e-39, np.nan, np.inf]  # subnormals flush under the kernel's FTZ either way
    ctx = ExecContext("cpu", {})
    first = ctx.run(module.entry, [a, b])
    assert _direct(ctx) == {"d"}
    later = ctx.run(module.entry, [a, b])
    assert later.shape == first.shape == (m, n) and later.flags.c_contiguous
    assert later.tobytes() == first.tobytes()
    x = a if lc == 1 else a.T
    y = b if rc == 0 else b.T
    np.testing.assert_allclose(later, x.astype(np.float64) @ y.astype(np.float64),
                               rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("lhs, rhs, out, dims, t", [
    ("2,3,4", "2,4,5", "2,3,5",
     "lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, "
     "rhs_contracting_dims={1}", "f32"),
    ("3,4", "5,6", "3,4,5,6", "lhs_contracting_dims={}, rhs_contracting_dims={}", "f32"),
    ("3,4", "4,5", "3,5", "lhs_contracting_dims={1}, rhs_contracting_dims={0}", "bf16"),
    ("3,4", "4,5", "3,5", "lhs_contracting_dims={1}, rhs_contracting_dims={0}", "s32"),
])
def test_other_dots_never_go_direct(lhs, rhs, out, dims, t):
    module = _module(lhs, rhs, out, dims, t)
    import ml_dtypes
    dt = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "s32": np.int32}[t]
    a = np.arange(np.prod([int(d) for d in lhs.split(",")])).reshape(
        [int(d) for d in lhs.split(",")]).astype(dt)
    b = np.ones([int(d) for d in rhs.split(",")], dt)
    ctx = ExecContext("cpu", {})
    first = ctx.run(module.entry, [a, b])
    assert ctx.run(module.entry, [a, b]).tobytes() == first.tobytes()
    assert _direct(ctx) == set()
