"""Data-movement and collective kernels, checked against jax (the oracle) on the HLO jax emits.

Each program is lowered with jax, both as lowered HLO and as XLA:CPU's optimized HLO,
parsed, run by `run_module`, and compared with jax's own result (bit-exact: these kernels
do no arithmetic).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from oracle import (assert_leaves_close, check_against_jax, jax_shard_map,  # noqa: E402
                    run_text, xla_cpu_run)

RNG = np.random.default_rng(1234)


def check(f, *args, x64=False, modes=("lowered", "compiled")):
    """Run f through jax and through run_module on both HLO forms; results must be equal."""
    check_against_jax(f, args, assert_leaves_close, x64=x64, modes=modes)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ---- broadcast / reshape / transpose / reverse ------------------------------------------

@pytest.mark.parametrize("shape,out,dims", [
    ((), (2, 3), ()),
    ((3,), (2, 3, 4), (1,)),
    ((3, 1), (3, 5), (0, 1)),
    ((1, 4), (2, 3, 4), (1, 2)),
    ((2, 4), (2, 3, 4, 5), (0, 2)),
])
def test_broadcast_in_dim(shape, out, dims):
    x = f32(*shape)
    check(lambda x: lax.broadcast_in_dim(x, out, dims), x)


@pytest.mark.parametrize("dt", [np.int8, np.uint16, np.int64, np.bool_, ml_dtypes.bfloat16,
                                np.complex64, np.float64])
def test_broadcast_types(dt):
    x = (RNG.standard_normal((3, 1)) * 50).astype(dt)
    check(lambda x: lax.broadcast_in_dim(x, (2, 3, 4), (1, 2)), x, x64=True)


def test_reshape_transpose_reverse():
    x = f32(2, 3, 4)
    check(lambda x: x.reshape(4, 6), x)
    check(lambda x: x.reshape(24), x)
    check(lambda x: jnp.transpose(x, (2, 0, 1)), x)
    check(lambda x: jnp.transpose(x, (1, 2, 0)).reshape(12, 2), x)
    check(lambda x: lax.rev(x, (0, 2)), x)
    check(lambda x: lax.rev(x, (1,)) + 0, x)
    y = np.arange(60, dtype=np.int16).reshape(3, 4, 5)
    check(lambda y: jnp.transpose(y, (2, 1, 0))[::-1], y)


def test_transpose_then_reshape_bitcasts():
    # XLA:CPU turns these into copies/bitcasts with layouts in optimized HLO.
    x = f32(4, 6, 5)
    check(lambda x: jnp.transpose(x, (1, 0, 2)).reshape(6, 20), x)
    check(lambda x: (x.reshape(24, 5).T, x.reshape(2, 60)), x)


# ---- slices ------------------------------------------------------------------------------

def test_slices():
    x = f32(7, 9, 4)
    check(lambda x: lax.slice(x, (1, 2, 0), (6, 9, 4), (2, 3, 1)), x)
    check(lambda x: x[::3, 1::2, ::-2], x)
    check(lambda x: x[2:3, 4, 1:], x)
    check(lambda x: lax.slice(x, (0, 0, 0), (0, 9, 4)), x)


@pytest.mark.parametrize("starts", [(0, 0), (1, 2), (3, 5), (7, 1), (100, 100),
                                    (2 ** 32 - 1, 0)])
def test_dynamic_slice_unsigned_clamps(starts):
    x = f32(4, 6)
    i, j = (np.uint32(s) for s in starts)
    check(lambda x, i, j: lax.dynamic_slice(x, (i, j), (2, 3)), x, i, j)


@pytest.mark.parametrize("starts", [(0, 0), (-1, 2), (3, -5), (-100, 100), (2, 6)])
def test_dynamic_slice_signed(starts):
    # jax normalizes negative indices with compare/add/select before the dynamic-slice.
    x = np.arange(24, dtype=np.int32).reshape(4, 6)
    i, j = (np.int32(s) for s in starts)
    check(lambda x, i, j: lax.dynamic_slice(x, (i, j), (3, 2)), x, i, j)


@pytest.mark.parametrize("starts", [(0, 0), (3, 5), (9, 1), (2 ** 31, 2 ** 31 + 7)])
def test_dynamic_update_slice_unsigned_clamps(starts):
    x = f32(4, 6)
    u = f32(2, 3)
    i, j = (np.uint32(s) for s in starts)
    check(lambda x, u, i, j: lax.dynamic_update_slice(x, u, (i, j)), x, u, i, j)


@pytest.mark.parametrize("starts", [(-7, 1), (1, -1), (50, -50)])
def test_dynamic_update_slice_signed(starts):
    x = np.arange(24, dtype=np.int8).reshape(4, 6)
    u = -np.arange(6, dtype=np.int8).reshape(2, 3)
    i, j = (np.int32(s) for s in starts)
    check(lambda x, u, i, j: lax.dynamic_update_slice(x, u, (i, j)), x, u, i, j)


def test_dynamic_update_slice_u64_index_x64():
    x = np.arange(10, dtype=np.float64)
    u = np.array([-1.0, -2.0])
    check(lambda x, u, i: lax.dynamic_update_slice(x, u, (i,)), x, u, np.uint64(2 ** 63),
          x64=True)


# ---- pad / concatenate / iota ------------------------------------------------------------

@pytest.mark.parametrize("cfg", [
    [(1, 2, 0), (0, 0, 0)],
    [(-1, 2, 1), (2, -3, 2)],
    [(-4, -3, 1), (0, 0, 3)],
    [(-7, 0, 1), (1, 1, 0)],
    [(3, -9, 2), (-1, -1, 0)],
])
def test_pad(cfg):
    x = np.arange(1, 16, dtype=np.float32).reshape(5, 3)
    check(lambda x: lax.pad(x, np.float32(-1.5), cfg), x)


def test_pad_ints_and_bf16():
    x = np.arange(12, dtype=np.int16).reshape(3, 4)
    check(lambda x: lax.pad(x, np.int16(7), [(1, -1, 1), (-1, 2, 2)]), x)
    y = f32(3, 2).astype(ml_dtypes.bfloat16)
    check(lambda y: lax.pad(y, ml_dtypes.bfloat16(3.5), [(2, 0, 3), (0, 1, 0)]), y)


def test_concatenate():
    a, b, c = f32(2, 3), f32(4, 3), f32(1, 3)
    check(lambda a, b, c: jnp.concatenate([a, b, c], axis=0), a, b, c)
    check(lambda a, b: jnp.concatenate([a.T, b.T, a.T], axis=1), a, b)
    i, j = np.arange(3, dtype=np.uint8), np.arange(5, dtype=np.uint8)
    check(lambda i, j: jnp.concatenate([i, j]), i, j)


@pytest.mark.parametrize("dt", [jnp.int8, jnp.uint8, jnp.int16, jnp.int32, jnp.uint32,
                                jnp.float16, jnp.bfloat16, jnp.float32, jnp.complex64])
def test_iota_types(dt):
    check(lambda: lax.broadcasted_iota(dt, (3, 300), 1))
    check(lambda: lax.broadcasted_iota(dt, (5, 2, 3), 0))


def test_iota_x64_types():
    for dt in (jnp.int64, jnp.uint64, jnp.float64, jnp.complex128):
        check(lambda: lax.iota(dt, 17), x64=True)
    # f16 cannot represent every integer past 2048; rounding must match.
    check(lambda: lax.iota(jnp.float16, 5000))


def test_copy_in_optimized_hlo():
    x = f32(3, 4)
    u = f32(1, 2)
    check(lambda x, u: (lax.dynamic_update_slice(x, u, (np.uint32(1), np.uint32(1))), x), x, u)


# ---- HLO the lowering never emits: checked against jax's equivalent results -------------

def test_bitcast_with_layouts():
    x = f32(8, 4)
    text = """
HloModule m
ENTRY e {
  p = f32[8,4]{1,0} parameter(0)
  ROOT b = f32[4,8]{0,1} bitcast(p)
}"""
    # f32[4,8]{0,1} is the physical buffer of f32[8,4]{1,0}, read transposed.
    assert_leaves_close(run_text(text, x), jnp.transpose(jnp.asarray(x)))
    text2 = """
HloModule m
ENTRY e {
  p = f32[8,4]{1,0} parameter(0)
  ROOT b = f32[2,16]{1,0} bitcast(p)
}"""
    assert_leaves_close(run_text(text2, x), jnp.reshape(jnp.asarray(x), (2, 16)))


def test_get_and_set_dimension_size():
    x = f32(3, 5)
    want = xla_cpu_run("""
module @m {
  func.func public @main(%arg0: tensor<3x5xf32>) -> (tensor<i32>, tensor<i32>) {
    %0 = stablehlo.get_dimension_size %arg0, dim = 0 : (tensor<3x5xf32>) -> tensor<i32>
    %1 = stablehlo.get_dimension_size %arg0, dim = 1 : (tensor<3x5xf32>) -> tensor<i32>
    return %0, %1 : tensor<i32>, tensor<i32>
  }
}""", x)
    text = """
HloModule m
ENTRY e {
  p = f32[3,5]{1,0} parameter(0)
  d0 = s32[] get-dimension-size(p), dimensions={0}
  d1 = s32[] get-dimension-size(p), dimensions={1}
  s = f32[3,<=5]{1,0} set-dimension-size(p, d1), dimensions={1}
  ROOT t = (s32[], s32[], f32[3,<=5]) tuple(d0, d1, s)
}"""
    got = run_text(text, x)
    assert_leaves_close(got[:2], want)
    assert_leaves_close(got[2], x)


# ---- collectives: one replica, one partition --------------------------------------------

def _one_device(f, n_out):
    from jax.sharding import PartitionSpec as P
    mesh = jax.make_mesh((1,), ("x",))
    return jax_shard_map()(f, mesh=mesh, in_specs=P(), out_specs=(P(),) * n_out
                        if n_out > 1 else P(), check_vma=False)


def test_collectives_one_device():
    def f(a, b):
        return (lax.psum(a, "x"), lax.pmax(b, "x"), lax.all_gather(a, "x", axis=1, tiled=True),
                lax.ppermute(a, "x", perm=[(0, 0)]), lax.ppermute(b, "x", perm=[]),
                lax.psum_scatter(a, "x", scatter_dimension=0, tiled=True),
                lax.psum((a, b), "x"))
    a = f32(4, 2)
    b = np.arange(6, dtype=np.int32).reshape(2, 3)
    # The lowered HLO carries sdy sharding custom-calls; the optimized HLO is plain.
    check(_one_device(f, 7), a, b, modes=("compiled",))


_ASYNC_HLO = """
HloModule m

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

ENTRY e {
  a = f32[4,2]{1,0} parameter(0)
  b = s32[2,3]{1,0} parameter(1)
  ars = f32[4,2]{1,0} all-reduce-start(a), replica_groups={{0}}, to_apply=add
  ard = f32[4,2]{1,0} all-reduce-done(ars)
  ags = (f32[4,2]{1,0}, f32[4,2]{1,0}) all-gather-start(a), replica_groups={{0}}, dimensions={0}
  agd = f32[4,2]{1,0} all-gather-done(ags)
  cps = (s32[2,3]{1,0}, s32[2,3]{1,0}, u32[], u32[]) collective-permute-start(b), source_target_pairs={{0,0}}
  cpd = s32[2,3]{1,0} collective-permute-done(cps)
  cps2 = (s32[2,3]{1,0}, s32[2,3]{1,0}, u32[], u32[]) collective-permute-start(b), source_target_pairs={}
  cpd2 = s32[2,3]{1,0} collective-permute-done(cps2)
  ata = f32[4,2]{1,0} all-to-all(a), replica_groups={{0}}, dimensions={0}
  atat = (f32[4,2]{1,0}, s32[2,3]{1,0}) all-to-all(a, b), replica_groups={{0}}
  cb = s32[2,3]{1,0} collective-broadcast(b), replica_groups={{0}}
  ar2 = (f32[4,2]{1,0}, f32[4,2]{1,0}) all-reduce(a, ard), replica_groups={}, to_apply=add
  ROOT t = (f32[4,2]{1,0}, f32[4,2]{1,0}, s32[2,3]{1,0}, s32[2,3]{1,0}, f32[4,2]{1,0}, (f32[4,2]{1,0}, s32[2,3]{1,0}), s32[2,3]{1,0}, (f32[4,2]{1,0}, f32[4,2]{1,0})) tuple(ard, agd, cpd, cpd2, ata, atat, cb, ar2)
}
"""


def test_async_and_other_collectives():
    a = f32(4, 2)
    b = np.arange(6, dtype=np.int32).reshape(2, 3)

    def f(a, b):
        s = lax.psum(a, "x")
        return (s, lax.all_gather(a, "x", axis=0, tiled=True),
                lax.ppermute(b, "x", perm=[(0, 0)]), lax.ppermute(b, "x", perm=[]),
                lax.all_to_all(a, "x", 0, 0, tiled=True),
                (lax.all_to_all(a, "x", 0, 0, tiled=True), b), b, lax.psum((a, s), "x"))
    want = jax.jit(_one_device(f, 8))(a, b)
    assert_leaves_close(run_text(_ASYNC_HLO, a, b), want)


def test_collective_group_too_large_is_an_error():
    text = """
HloModule m
ENTRY e {
  a = f32[2]{0} parameter(0)
  ROOT g = f32[4]{0} all-gather(a), replica_groups={{0,1}}, dimensions={0}
}"""
    with pytest.raises(Exception, match="one device"):
        run_text(text, f32(2))


def test_copy_start_done():
    x = f32(3, 4)
    text = """
HloModule m
ENTRY e {
  p = f32[3,4]{1,0} parameter(0)
  cs = (f32[3,4]{1,0}, f32[3,4]{1,0}, u32[]) copy-start(p)
  ROOT cd = f32[3,4]{1,0} copy-done(cs)
}"""
    assert_leaves_close(run_text(text, x), jax.jit(lambda x: x + 0)(x))
