"""Data-movement and collective kernels on every device (tests/devices.py), one case table.

Each program is lowered with jax, both as lowered HLO and as XLA:CPU's optimized HLO (with
fusions, copies and layout bitcasts), parsed and run by `run_module`: on cpu compared with
jax's own result, on cuda with the cpu's -- bit-exact either way, these kernels do no
arithmetic.  HLO the lowering never emits is written by hand, its cpu oracle being jax's
equivalent program.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from devices import check_on, cuda_against_cpu, on_each_device  # noqa: E402
from oracle import assert_leaves_close, entry, jax_shard_map, run_text, xla_cpu_run  # noqa: E402

pytestmark = pytest.mark.jax
RNG = np.random.default_rng(1234)


def check(device, f, *args, x64=False, modes=("lowered", "compiled")):
    """f through jax and through run_module on both HLO forms; results must be equal."""
    check_on(device, f, args, assert_leaves_close, x64=x64, modes=modes)


def run_on(device, text, args, want):
    """Hand-written HLO: on cpu against `want()` (jax's equivalent), on cuda against the
    cpu.  Returns the device's result."""
    if device == "cuda":
        return cuda_against_cpu(text, args)
    got = run_text(text, *args)
    assert_leaves_close(got, want())
    return got


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ---- broadcast / reshape / transpose / reverse ------------------------------------------

@pytest.mark.parametrize("shape,out,dims", [
    ((), (2, 3), ()),
    ((3,), (2, 3, 4), (1,)),
    ((3, 1), (3, 5), (0, 1)),
    ((1, 4), (2, 3, 4), (1, 2)),
    ((2, 4), (2, 3, 4, 5), (0, 2)),
    ((3, 4), (2, 3, 4, 2), (1, 2)),
    ((2, 1), (2, 5), (0, 1)),
])
@on_each_device
def test_broadcast_in_dim(device, shape, out, dims):
    x = f32(*shape)
    check(device, lambda x: lax.broadcast_in_dim(x, out, dims), x)


@pytest.mark.parametrize("dt", [np.int8, np.uint16, np.int64, np.bool_, ml_dtypes.bfloat16,
                                np.float16, np.complex64, np.float64])
@on_each_device
def test_broadcast_types(device, dt):
    x = (RNG.standard_normal((3, 1)) * 50).astype(dt)
    check(device, lambda x: lax.broadcast_in_dim(x, (2, 3, 4), (1, 2)), x, x64=True)
    y = (RNG.standard_normal((3, 2)) * 50).astype(dt)
    check(device, lambda y: (lax.broadcast_in_dim(y, (2, 3, 2), (1, 2)), y.T, y[::-1, 1:]), y,
          x64=True)


@on_each_device
def test_reshape_transpose_reverse(device):
    x = f32(2, 3, 4)
    check(device, lambda x: x.reshape(4, 6), x)
    check(device, lambda x: x.reshape(24), x)
    check(device, lambda x: jnp.transpose(x, (2, 0, 1)), x)
    check(device, lambda x: jnp.transpose(x, (1, 2, 0)).reshape(12, 2), x)
    check(device, lambda x: lax.rev(x, (0, 2)), x)
    check(device, lambda x: lax.rev(x, (1,)) + 0, x)
    y = np.arange(60, dtype=np.int16).reshape(3, 4, 5)
    check(device, lambda y: jnp.transpose(y, (2, 1, 0))[::-1], y)


@on_each_device
def test_transpose_then_reshape_bitcasts(device):
    # XLA:CPU turns these into copies/bitcasts with layouts in optimized HLO.
    x = f32(4, 6, 5)
    check(device, lambda x: jnp.transpose(x, (1, 0, 2)).reshape(6, 20), x)
    check(device, lambda x: (x.reshape(24, 5).T, x.reshape(2, 60)), x)
    y = f32(4, 3, 5)
    check(device, lambda y: (jnp.transpose(y, (1, 0, 2)).reshape(3, 20), y.reshape(12, 5).T), y)


@pytest.mark.parametrize("dt", [np.float32, np.float64, ml_dtypes.bfloat16, np.bool_,
                                np.int8, np.complex64, np.complex128])
def test_large_transposes_and_pads_in_tiles(dt):
    """Arrays past transpose_copy.MIN_ELEMENTS are copied in tiles when their contiguous
    dimensions differ (cpu/transpose_copy.py): XLA's bits for a 2-D transpose, a 4-D
    permutation that swaps the outer and inner dimensions, a padded transposed operand (the
    destination a strided view) and, for the 16-byte complex128, numpy's own copy."""
    x = (RNG.standard_normal((640, 520)) * 4).astype(dt)
    check("cpu", lambda x: x.T, x)
    y = (RNG.standard_normal((260, 4, 3, 300)) * 4).astype(dt)
    check("cpu", lambda y: jnp.transpose(y, (3, 1, 2, 0)), y)
    check("cpu", lambda y: lax.pad(jnp.transpose(y, (3, 1, 2, 0)), np.zeros((), dt),
                                   [(1, 2, 0), (0, 0, 0), (0, 1, 0), (3, 0, 0)]), y)


def test_tiled_copy_is_numpys_copy(monkeypatch):
    """copy_into moves the bits numpy's copy moves, for every element size, into plain and
    strided destinations, and leaves the rest of a destination as it was."""
    from xlaplug.backends.cpu import transpose_copy
    from xlaplug.backends.cpu.transpose_copy import MIN_ELEMENTS, contiguous, copy_into
    tiled, real = [], transpose_copy._tiled
    monkeypatch.setattr(transpose_copy, "_tiled", lambda *a: tiled.append(1) or real(*a))
    for dt in (np.uint8, np.float16, np.float32, np.float64):
        x = RNG.integers(0, 255, (700, 3, 400)).astype(dt)  # sides past MIN_SIDE
        assert x.size >= MIN_ELEMENTS
        for perm in ((2, 1, 0), (1, 2, 0), (2, 0, 1)):
            v = x.transpose(perm)
            np.testing.assert_array_equal(contiguous(v), np.ascontiguousarray(v))
        big = np.full((401, 4, 702), 9, dt)
        copy_into(big[:400, 1:, 1:701], x.transpose(2, 1, 0))
        np.testing.assert_array_equal(big[:400, 1:, 1:701], x.transpose(2, 1, 0))
        assert (big[400] == 9).all() and (big[:, 0] == 9).all() and (big[:, :, 0] == 9).all() \
            and (big[:, :, 701] == 9).all()
    assert len(tiled) == 4 * 3, "the tiles did not run where both sides are long"


# ---- slices ------------------------------------------------------------------------------

@on_each_device
def test_slices(device):
    x = f32(7, 9, 4)
    check(device, lambda x: lax.slice(x, (1, 2, 0), (6, 9, 4), (2, 3, 1)), x)
    check(device, lambda x: x[::3, 1::2, ::-2], x)
    check(device, lambda x: x[2:3, 4, 1:], x)
    check(device, lambda x: lax.slice(x, (0, 0, 0), (0, 9, 4)), x)
    y = f32(2, 3, 4)
    check(device, lambda y: (y[::2, 1:, ::-2], lax.slice(y, (0, 1, 0), (2, 3, 4), (1, 1, 3))), y)


@pytest.mark.parametrize("starts", [(0, 0), (1, 2), (3, 5), (7, 1), (100, 100),
                                    (2 ** 32 - 1, 0), (2 ** 32 - 1, 1)])
@on_each_device
def test_dynamic_slice_unsigned_clamps(device, starts):
    x = f32(4, 6)
    i, j = (np.uint32(s) for s in starts)
    check(device, lambda x, i, j: lax.dynamic_slice(x, (i, j), (2, 3)), x, i, j)


@pytest.mark.parametrize("starts", [(0, 0), (-1, 2), (3, -5), (-100, 100), (2, 6)])
@on_each_device
def test_dynamic_slice_signed(device, starts):
    # jax normalizes negative indices with compare/add/select before the dynamic-slice.
    x = np.arange(24, dtype=np.int32).reshape(4, 6)
    i, j = (np.int32(s) for s in starts)
    check(device, lambda x, i, j: lax.dynamic_slice(x, (i, j), (3, 2)), x, i, j)


@pytest.mark.parametrize("starts", [(0, 0), (3, 5), (9, 1), (2 ** 31, 2 ** 31 + 7),
                                    (2 ** 32 - 1, 1)])
@on_each_device
def test_dynamic_update_slice_unsigned_clamps(device, starts):
    x = f32(4, 6)
    u = f32(2, 3)
    i, j = (np.uint32(s) for s in starts)
    check(device, lambda x, u, i, j: lax.dynamic_update_slice(x, u, (i, j)), x, u, i, j)


@pytest.mark.parametrize("starts,dt", [((-7, 1), np.int8), ((1, -1), np.int8),
                                       ((50, -50), np.int8), ((-1, 2), np.int32),
                                       ((3, -5), np.int32), ((2, 6), np.int32)])
@on_each_device
def test_dynamic_update_slice_signed(device, starts, dt):
    x = np.arange(24, dtype=dt).reshape(4, 6)
    u = -np.arange(6, dtype=dt).reshape(2, 3)
    i, j = (np.int32(s) for s in starts)
    check(device, lambda x, u, i, j: lax.dynamic_update_slice(x, u, (i, j)), x, u, i, j)


@on_each_device
def test_dynamic_update_slice_u64_index_x64(device):
    x = np.arange(10, dtype=np.float64)
    u = np.array([-1.0, -2.0])
    check(device, lambda x, u, i: lax.dynamic_update_slice(x, u, (i,)), x, u, np.uint64(2 ** 63),
          x64=True)
    check(device, lambda x, i: (lax.dynamic_slice(x, (i,), (3,)),
                                lax.dynamic_update_slice(x, x[:2], (i,))), x, np.uint64(2 ** 63),
          x64=True)


_VECTOR_FORM = """HloModule m
ENTRY e {
  x = s32[3,4] parameter(0)
  i = s64[2] parameter(1)
  u = s32[2,2] parameter(2)
  ds = s32[2,2] dynamic-slice(x, i), dynamic_slice_sizes={2,2}
  dus = s32[3,4] dynamic-update-slice(x, u, i)
  ROOT t = (s32[2,2], s32[3,4]) tuple(ds, dus)
}
"""


@pytest.mark.parametrize("starts", [(1, 3), (-4, 1), (7, -2)])
@on_each_device
def test_dynamic_slice_start_index_vector(device, starts):
    """The old form: one rank-1 start-index vector, clamped as the scalar starts are."""
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    u = -np.ones((2, 2), np.int32)
    i = np.array(starts, np.int64)

    # XLA:CPU on the StableHLO ops (jax's own dynamic_slice would first wrap negative
    # starts, which the HLO op does not: it clamps)
    mlir = """
module @m {
  func.func public @main(%x: tensor<3x4xi32>, %i: tensor<2xi64>, %u: tensor<2x2xi32>)
      -> (tensor<2x2xi32>, tensor<3x4xi32>) {
    %a1 = stablehlo.slice %i [0:1] : (tensor<2xi64>) -> tensor<1xi64>
    %a = stablehlo.reshape %a1 : (tensor<1xi64>) -> tensor<i64>
    %b1 = stablehlo.slice %i [1:2] : (tensor<2xi64>) -> tensor<1xi64>
    %b = stablehlo.reshape %b1 : (tensor<1xi64>) -> tensor<i64>
    %ds = stablehlo.dynamic_slice %x, %a, %b, sizes = [2, 2]
        : (tensor<3x4xi32>, tensor<i64>, tensor<i64>) -> tensor<2x2xi32>
    %dus = stablehlo.dynamic_update_slice %x, %u, %a, %b
        : (tensor<3x4xi32>, tensor<2x2xi32>, tensor<i64>, tensor<i64>) -> tensor<3x4xi32>
    return %ds, %dus : tensor<2x2xi32>, tensor<3x4xi32>
  }
}"""

    def want():
        with jax.enable_x64(True):  # (the s64 starts reach XLA as s64)
            return xla_cpu_run(mlir, x, i, u)
    run_on(device, _VECTOR_FORM, [x, i, u], want)


# ---- pad / concatenate / iota ------------------------------------------------------------

@pytest.mark.parametrize("cfg", [
    [(1, 2, 0), (0, 0, 0)],
    [(-1, 2, 1), (2, -3, 2)],
    [(-4, -3, 1), (0, 0, 3)],
    [(-7, 0, 1), (1, 1, 0)],
    [(3, -9, 2), (-1, -1, 0)],
])
@on_each_device
def test_pad(device, cfg):
    x = np.arange(1, 16, dtype=np.float32).reshape(5, 3)
    check(device, lambda x: lax.pad(x, np.float32(-1.5), cfg), x)


@on_each_device
def test_pad_ints_and_bf16(device):
    x = np.arange(12, dtype=np.int16).reshape(3, 4)
    check(device, lambda x: lax.pad(x, np.int16(7), [(1, -1, 1), (-1, 2, 2)]), x)
    y = f32(3, 2).astype(ml_dtypes.bfloat16)
    check(device, lambda y: lax.pad(y, ml_dtypes.bfloat16(3.5), [(2, 0, 3), (0, 1, 0)]), y)


@on_each_device
def test_concatenate(device):
    a, b, c = f32(2, 3), f32(4, 3), f32(1, 3)
    check(device, lambda a, b, c: jnp.concatenate([a, b, c], axis=0), a, b, c)
    check(device, lambda a, b: jnp.concatenate([a.T, b.T, a.T], axis=1), a, b)
    i, j = np.arange(3, dtype=np.uint8), np.arange(5, dtype=np.uint8)
    check(device, lambda i, j: jnp.concatenate([i, j]), i, j)


@pytest.mark.parametrize("dt", [jnp.int8, jnp.uint8, jnp.int16, jnp.int32, jnp.uint32,
                                jnp.float16, jnp.bfloat16, jnp.float32, jnp.complex64])
@on_each_device
def test_iota_types(device, dt):
    check(device, lambda: lax.broadcasted_iota(dt, (3, 300), 1))
    check(device, lambda: lax.broadcasted_iota(dt, (5, 2, 3), 0))
    check(device, lambda: (lax.broadcasted_iota(dt, (2, 260), 1), lax.iota(dt, 5)))


@on_each_device
def test_iota_x64_types(device):
    for dt in (jnp.int64, jnp.uint64, jnp.float64, jnp.complex128):
        check(device, lambda: lax.iota(dt, 17), x64=True)
    # f16 cannot represent every integer past 2048; rounding must match.
    check(device, lambda: lax.iota(jnp.float16, 5000))


@on_each_device
def test_copy_in_optimized_hlo(device):
    x = f32(3, 4)
    u = f32(1, 2)
    check(device, lambda x, u: (lax.dynamic_update_slice(x, u, (np.uint32(1), np.uint32(1))), x),
          x, u)


# ---- HLO the lowering never emits: checked against jax's equivalent results -------------

@on_each_device
def test_bitcast_with_layouts(device):
    x = f32(8, 4)
    p = "p = f32[8,4]{1,0} parameter(0)"
    # f32[4,8]{0,1} is the physical buffer of f32[8,4]{1,0}, read transposed.
    run_on(device, entry(p, "b = f32[4,8]{0,1} bitcast(p)"), [x],
           lambda: jnp.transpose(jnp.asarray(x)))
    run_on(device, entry(p, "b = f32[2,16]{1,0} bitcast(p)"), [x],
           lambda: jnp.reshape(jnp.asarray(x), (2, 16)))
    # f32[2,3]{0,1} holds x.T row-major: read as s32[3,2]{1,0}, its bits
    y = f32(2, 3)
    run_on(device, entry("p = f32[2,3]{0,1} parameter(0)", "b = s32[3,2]{1,0} bitcast(p)"),
           [y], lambda: lax.bitcast_convert_type(jnp.asarray(y).T, jnp.int32))


@on_each_device
def test_get_and_set_dimension_size(device):
    x = f32(3, 5)
    text = entry("p = f32[3,5]{1,0} parameter(0)",
                 "d0 = s32[] get-dimension-size(p), dimensions={0}",
                 "d1 = s32[] get-dimension-size(p), dimensions={1}",
                 "s = f32[3,<=5]{1,0} set-dimension-size(p, d1), dimensions={1}",
                 "t = (s32[], s32[], f32[3,<=5]) tuple(d0, d1, s)")
    if device == "cuda":
        cuda_against_cpu(text, [x])
        return
    want = xla_cpu_run("""
module @m {
  func.func public @main(%arg0: tensor<3x5xf32>) -> (tensor<i32>, tensor<i32>) {
    %0 = stablehlo.get_dimension_size %arg0, dim = 0 : (tensor<3x5xf32>) -> tensor<i32>
    %1 = stablehlo.get_dimension_size %arg0, dim = 1 : (tensor<3x5xf32>) -> tensor<i32>
    return %0, %1 : tensor<i32>, tensor<i32>
  }
}""", x)
    got = run_text(text, x)
    assert_leaves_close(got[:2], want)
    assert_leaves_close(got[2], x)


@on_each_device
def test_copies_tuple_copies_and_async_copies(device):
    x = f32(2, 3)
    text = """HloModule m
ENTRY e {
  x = f32[2,3] parameter(0)
  c = f32[2,3] copy(x)
  t = (f32[2,3], f32[2,3]) tuple(x, c)
  tc = (f32[2,3], f32[2,3]) copy(t)
  cs = (f32[2,3], f32[2,3], u32[]) copy-start(x)
  cd = f32[2,3] copy-done(cs)
  g = s32[] get-dimension-size(x), dimensions={1}
  s = f32[2,3] set-dimension-size(x, g), dimensions={1}
  b = s32[6] bitcast(c)
  ROOT r = ((f32[2,3], f32[2,3]), f32[2,3], s32[], f32[2,3], f32[2,3]) tuple(tc, cd, g, s, c)
}
"""
    # copies are the identity; the dimension size is the static 3 (checked against XLA above)
    run_on(device, text, [x],
           lambda: jax.jit(lambda x: ((x, x + 0), x + 0, jnp.int32(x.shape[1]), x, x + 0))(x))


@on_each_device
def test_copy_start_done(device):
    x = f32(3, 4)
    text = entry("p = f32[3,4]{1,0} parameter(0)",
                 "cs = (f32[3,4]{1,0}, f32[3,4]{1,0}, u32[]) copy-start(p)",
                 "cd = f32[3,4]{1,0} copy-done(cs)")
    run_on(device, text, [x], lambda: jax.jit(lambda x: x + 0)(x))


# ---- collectives: one replica, one partition --------------------------------------------

def _one_device(f, n_out):
    from jax.sharding import PartitionSpec as P
    mesh = jax.make_mesh((1,), ("x",))
    return jax_shard_map()(f, mesh=mesh, in_specs=P(), out_specs=(P(),) * n_out
                        if n_out > 1 else P(), check_vma=False)


@on_each_device
def test_collectives_one_device(device):
    def f(a, b):
        return (lax.psum(a, "x"), lax.pmax(b, "x"), lax.all_gather(a, "x", axis=1, tiled=True),
                lax.ppermute(a, "x", perm=[(0, 0)]), lax.ppermute(b, "x", perm=[]),
                lax.psum_scatter(a, "x", scatter_dimension=0, tiled=True),
                lax.psum((a, b), "x"))
    a = f32(4, 2)
    b = np.arange(6, dtype=np.int32).reshape(2, 3)
    # The lowered HLO carries sdy sharding custom-calls; the optimized HLO is plain.
    check(device, _one_device(f, 7), a, b, modes=("compiled",))


_COLLECTIVES_HLO = """
HloModule m

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

ENTRY e {
  a = f32[4,2]{1,0} parameter(0)
  b = s32[2,3]{1,0} parameter(1)
  ar = f32[4,2]{1,0} all-reduce(a), replica_groups={{0}}, to_apply=add
  ars = f32[4,2]{1,0} all-reduce-start(a), replica_groups={{0}}, to_apply=add
  ard = f32[4,2]{1,0} all-reduce-done(ars)
  ag = f32[4,2]{1,0} all-gather(a), replica_groups={{0}}, dimensions={0}
  ags = (f32[4,2]{1,0}, f32[4,2]{1,0}) all-gather-start(a), replica_groups={{0}}, dimensions={0}
  agd = f32[4,2]{1,0} all-gather-done(ags)
  rs = f32[4,2]{1,0} reduce-scatter(a), replica_groups={{0}}, dimensions={0}, to_apply=add
  cp = s32[2,3]{1,0} collective-permute(b), source_target_pairs={{0,0}}
  cp0 = s32[2,3]{1,0} collective-permute(b), source_target_pairs={}
  cps = (s32[2,3]{1,0}, s32[2,3]{1,0}, u32[], u32[]) collective-permute-start(b), source_target_pairs={{0,0}}
  cpd = s32[2,3]{1,0} collective-permute-done(cps)
  cps2 = (s32[2,3]{1,0}, s32[2,3]{1,0}, u32[], u32[]) collective-permute-start(b), source_target_pairs={}
  cpd2 = s32[2,3]{1,0} collective-permute-done(cps2)
  ata = f32[4,2]{1,0} all-to-all(a), replica_groups={{0}}, dimensions={0}
  atat = (f32[4,2]{1,0}) all-to-all(a), replica_groups={{0}}
  cb = s32[2,3]{1,0} collective-broadcast(b), replica_groups={{0}}
  ar2 = (f32[4,2]{1,0}, f32[4,2]{1,0}) all-reduce(a, ard), replica_groups={}, to_apply=add
  ROOT t = (f32[4,2]{1,0}, f32[4,2]{1,0}, f32[4,2]{1,0}, f32[4,2]{1,0}, f32[4,2]{1,0}, s32[2,3]{1,0}, s32[2,3]{1,0}, s32[2,3]{1,0}, s32[2,3]{1,0}, f32[4,2]{1,0}, (f32[4,2]{1,0}), s32[2,3]{1,0}, (f32[4,2]{1,0}, f32[4,2]{1,0})) tuple(ar, ard, ag, agd, rs, cp, cp0, cpd, cpd2, ata, atat, cb, ar2)
}
"""


@on_each_device
def test_async_and_other_collectives(device):
    """Every collective, sync and async, on one replica: jax's one-device equivalents."""
    a = f32(4, 2)
    b = np.arange(6, dtype=np.int32).reshape(2, 3)

    def f(a, b):
        s = lax.psum(a, "x")
        gather = lax.all_gather(a, "x", axis=0, tiled=True)
        return (s, lax.psum(a, "x"), gather, gather,
                lax.psum_scatter(a, "x", scatter_dimension=0, tiled=True),
                lax.ppermute(b, "x", perm=[(0, 0)]), lax.ppermute(b, "x", perm=[]),
                lax.ppermute(b, "x", perm=[(0, 0)]), lax.ppermute(b, "x", perm=[]),
                lax.all_to_all(a, "x", 0, 0, tiled=True),
                (lax.all_to_all(a, "x", 0, 0, tiled=True),), b, lax.psum((a, s), "x"))
    got = run_on(device, _COLLECTIVES_HLO, [a, b], lambda: jax.jit(_one_device(f, 13))(a, b))
    assert np.array_equal(got[0], a) and not got[6].any()


@on_each_device
def test_collective_group_too_large_is_an_error(device):
    text = entry("a = f32[2]{0} parameter(0)",
                 "g = f32[4]{0} all-gather(a), replica_groups={{0,1}}, dimensions={0}")
    from xlaplug.runtime.executor import run_module
    from xlaplug.hlo.text.parser import parse_module
    with pytest.raises(Exception, match="replica 1 in its groups does not exist"):
        run_module(parse_module(text), [f32(2)], device=device)
