"""xla/global_shards.py: a global program's device count, and its values cut into the shards
XLA's partitioned executable takes and put back together (padded where a dimension does not
divide, as XLA pads), with jaxlib's own HloSharding and index function."""
from __future__ import annotations

import numpy as np
import pytest

from xlaplug.hlo.text.parser import parse_module
from xlaplug.xla.global_shards import GlobalProgramError, assemble, cut, global_devices

jax = pytest.importorskip("jax")
pytestmark = pytest.mark.jax


def _jaxlib():
    from jax._src.lib import xla_client as xc
    from jax._src.op_shardings import op_sharding_to_numpy_indices
    return xc, op_sharding_to_numpy_indices


SHARDY = '''HloModule m, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<["a"=2, "b"=4]>}}
ENTRY e {
  ROOT x = f32[8,3] parameter(0)
}
'''
GSPMD = '''HloModule m
ENTRY e {
  x = f32[8,3] parameter(0), sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}
  ROOT y = f32[8,3] negate(x), sharding={devices=[6,1]<=[6]}
}
'''


def test_device_count_of_a_global_program():
    assert global_devices(parse_module(SHARDY)) == (8, True)
    assert global_devices(parse_module(GSPMD)) == (6, False)
    assert global_devices(parse_module("HloModule m\nENTRY e {\n  ROOT x = f32[2] "
                                       "parameter(0)\n}\n")) == (1, False)
    two = SHARDY.replace('}}', ', c = #sdy.mesh<["z"=2]>}}', 1)
    with pytest.raises(GlobalProgramError, match="meshes of 2 different sizes"):
        global_devices(parse_module(two))


@pytest.mark.parametrize("rows", [8, 10])
def test_cut_and_assemble_round_trip(rows):
    """10 rows over 4 devices: blocks of 3, the last padded; put back, the 10 rows."""
    xc, indices = _jaxlib()
    x = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
    hs = xc.HloSharding.iota_tile([4, 1])
    padded, shards = cut(x, hs, 4, indices)
    assert padded == (4 * -(-rows // 4), 3)
    assert all(s.shape == (padded[0] // 4, 3) for s in shards)
    np.testing.assert_array_equal(shards[1], np.pad(x, [(0, padded[0] - rows), (0, 0)])[
        padded[0] // 4:padded[0] // 2])
    np.testing.assert_array_equal(assemble(shards, hs, indices, x.shape), x)


def test_partial_replication_and_replicated():
    xc, indices = _jaxlib()
    x = np.arange(24, dtype=np.int32).reshape(6, 4)
    # rows in 2 blocks, each held by 2 devices (device order transposed)
    hs = xc.HloSharding.iota_tile([2, 1, 2], [2, 2], [1, 0], [xc.OpSharding.Type.REPLICATED])
    _, shards = cut(x, hs, 4, indices)
    np.testing.assert_array_equal(shards[0], x[:3])
    np.testing.assert_array_equal(shards[1], x[3:])   # device 1 is tile (1, 0) after T(1,0)
    np.testing.assert_array_equal(assemble(shards, hs, indices, x.shape), x)
    rep = xc.HloSharding.replicate()
    _, shards = cut(x, rep, 4, indices)
    assert all(np.array_equal(s, x) for s in shards)
    np.testing.assert_array_equal(assemble(shards, rep, indices, x.shape), x)


def test_maximal_value_is_refused():
    xc, indices = _jaxlib()
    with pytest.raises(GlobalProgramError, match="takes tiled and replicated"):
        cut(np.zeros((4,), np.float32), xc.HloSharding.from_proto(_maximal(xc)), 4, indices)


def _maximal(xc):
    op = xc.OpSharding()
    op.type = xc.OpSharding.Type.MAXIMAL
    op.tile_assignment_devices = [1]
    return op


def test_a_per_device_program_made_manual_keeps_one_sharding_per_instruction():
    """xla_executables._manual marks every instruction `sharding={manual}`; one that had a
    sharding (a partitioned module's parameters) has it replaced, nested braces and all --
    XLA's parser refuses an attribute given twice."""
    from xlaplug.xla.xla_executables import _manual
    text = ('  p = f32[2,3]{1,0} parameter(0), sharding={devices=[4,1]<=[4]}, '
            'metadata={op_name="a"}\n'
            '  ROOT t = (f32[2,3], f32[2,3]) tuple(p, p), sharding={{replicated}, '
            '{maximal device=0}}\n'
            '  q = f32[2] add(p, p)\n')
    out = _manual(text).splitlines()
    assert [ln.count("sharding=") for ln in out] == [1, 1, 1]
    assert out[0].endswith('metadata={op_name="a"}, sharding={manual}')
    assert out[1].endswith("tuple(p, p), sharding={manual}")
    assert out[2].endswith("add(p, p), sharding={manual}")
