"""XLA:CPU's reductions, dots, convolutions, windowed reductions and f32/f64 add, subtract,
multiply and divide flush subnormals (backends/cpu/denormals.py): over subnormal values they
give XLA's bits, jax as the oracle (elementwise ops, which keep some subnormals as XLA does, are tests/
test_elementwise.py's); the MXCSR is the caller's again after a run, also on devices.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from oracle import check_against_jax, run_text
from xlaplug.backends.cpu import denormals

F32_TINY, F64_TINY = 1e-39, 1e-310  # subnormal in f32 / f64


def _programs(dt, tiny):
    """(name, f, args): each over subnormal operands, or operands whose partial results are
    subnormal (products of 1e-20 and 1e-19 in f32; a difference of close normals)."""
    x = np.full(64, tiny, dt) * (1 + np.arange(64) % 8).astype(dt)  # all subnormal
    mat = np.full((4, 8), tiny, dt)
    img = np.full((1, 1, 6, 6), tiny, dt)
    near = np.array([1.5e-38, -1.4e-38] * 8, dt)
    # exact products and quotients under the smallest normal that round up to it: 0 under
    # FTZ (XLA), the smallest normal when flushed after rounding
    below_one = np.full(16, 1 - np.finfo(dt).epsneg, dt)
    smallest = np.full(16, np.finfo(dt).tiny, dt)
    return [
        ("add of subnormals", lambda a, b: a + b, (x, x[::-1].copy())),
        ("difference of close normals", lambda a, b: a - b, (near, near[::-1].copy())),
        ("product rounding up to the smallest normal", lambda a, b: a * b,
         (below_one, smallest)),
        ("quotient of subnormals", lambda a, b: a / b, (x, np.full(64, 3, dt))),
        ("quotient rounding up to the smallest normal", lambda a, b: a / b,
         (smallest, np.full(16, 1 + np.finfo(dt).eps, dt))),
        ("sum", jnp.sum, (x,)),
        ("row sums", lambda a: jnp.sum(a.reshape(8, 8), axis=1), (x,)),
        ("max", jnp.max, (x,)),
        ("min of negatives", jnp.min, (-x,)),
        ("cancelling sum", jnp.sum, (near,)),
        ("dot of subnormals", lambda a, b: a @ b, (mat, np.ones((8, 4), dt))),
        ("dot with subnormal products", lambda a, b: a @ b,
         (np.full((4, 8), 1e-20, dt), np.full((8, 4), 1e-19, dt))),
        ("conv", lambda a, k: lax.conv(a, k, (1, 1), "VALID"), (img, np.ones((1, 1, 3, 3), dt))),
        ("window sum", lambda a: lax.reduce_window(a, dt(0), lax.add, (1, 1, 2, 2),
                                                   (1, 1, 1, 1), "VALID"), (img,)),
        ("cumsum", jnp.cumsum, (x,)),
    ]


def _bits_equal(got, want, mode):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, mode
    assert got.tobytes() == want.tobytes(), f"{mode}: {got.reshape(-1)[:4]} vs XLA's " \
                                            f"{want.reshape(-1)[:4]}"


@pytest.mark.parametrize("dt,tiny", [(np.float32, F32_TINY), (np.float64, F64_TINY)],
                         ids=["f32", "f64"])
def test_kernels_flush_as_xla_does(dt, tiny):
    for name, f, args in _programs(dt, tiny):
        try:
            check_against_jax(f, args, _bits_equal, x64=dt == np.float64, modes=("lowered",))
        except AssertionError as e:
            raise AssertionError(f"{np.dtype(dt)} {name}: {e}") from None


def test_the_callers_mxcsr_is_back_after_a_run():
    x = np.full(64, F32_TINY, np.float32)
    text = jax.jit(jnp.sum).lower(x).as_text(dialect="hlo")
    assert float(run_text(text, x)) == 0.0  # inside the run: flushed, as XLA
    assert x.sum() > 0  # outside it, numpy keeps IEEE gradual underflow (the caller's code)


@pytest.mark.skipif(not denormals.available(), reason="FTZ/DAZ are x86-64's MXCSR bits")
def test_flush_and_restore():
    x = np.full(8, F32_TINY, np.float32)
    env = denormals.Env()
    changed = env.flush()
    try:
        assert changed and x.sum() == 0
        inner = denormals.Env()  # already set: nothing to restore
        assert not inner.flush()
        inner.restore(False)
        assert x.sum() == 0
    finally:
        env.restore(changed)
    assert x.sum() > 0


ALLREDUCE_THEN_SUM = """HloModule m, replica_count=4
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[64] parameter(0)
  r = f32[64] all-reduce(x), replica_groups={}, to_apply=add
  z = f32[] constant(0)
  s = f32[] reduce(x, z), dimensions={0}, to_apply=add, control-predecessors={r}
  ROOT t = (f32[64], f32[]) tuple(r, s)
}
"""


@pytest.mark.parametrize("fibers", [True, False], ids=["fibers", "threads"])
def test_devices_keep_the_bits_across_collectives(fibers, monkeypatch):
    # Each device's reduce runs after a collective, i.e. after its fiber or thread has
    # waited for the others (a switch of greenlets, whose state includes the MXCSR).  The
    # sum of 64 values of 1e-39 is 6.4e-38 in IEEE arithmetic; flushed, every term reads 0.
    from xlaplug.runtime.spmd import runner
    from xlaplug.backends.spmd.groups import DeviceGrid
    from xlaplug.hlo.text.parser import parse_module
    monkeypatch.setattr(runner, "FIBERS_BELOW_BYTES", 1 << 30 if fibers else 0)
    x = np.full(64, F32_TINY, np.float32)
    outs = runner.run_module_devices(parse_module(ALLREDUCE_THEN_SUM), [[x]] * 4,
                                     DeviceGrid(4, 1))
    assert [float(o[1]) for o in outs] == [0.0] * 4
    assert x.sum() > 0
