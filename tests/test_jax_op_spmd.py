"""xlaplug.jax.op inside shard_map: the Horovod ops' decompositions map their collectives to
jax's over the op's axis_name, on 4 host devices (tests/jax_op_shard_map.py, a subprocess),
against lax.psum / pmean / pmax / all_gather / all_to_all / psum_scatter."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")
pytestmark = [pytest.mark.jax, pytest.mark.slow]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    path = tmp_path_factory.mktemp("jax_op_spmd") / "out.npz"
    subprocess.run([sys.executable, str(Path(__file__).with_name("jax_op_shard_map.py")),
                    str(path)], check=True, timeout=300)
    return dict(np.load(path))


@pytest.mark.parametrize("case", ["allreduce_sum", "allreduce_average", "allreduce_max_int",
                                  "allgather", "alltoall", "reducescatter_sum", "grad"])
def test_against_jax_collectives(results, case):
    got, want = results[f"got_{case}"], results[f"want_{case}"]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_collectives_jax_has_no_primitive_for(results):
    """product, broadcast and a min reduce-scatter go through all_gather and a reduction."""
    x = results["x"]
    blocks = x.reshape(4, 4, 3)  # device d holds rows 4d..4d+3
    np.testing.assert_allclose(results["got_allreduce_product"], np.tile(blocks.prod(0), (4, 1)),
                               rtol=1e-6)
    np.testing.assert_array_equal(results["got_broadcast"], np.tile(blocks[2], (4, 1)))
    # device d keeps block d (one row) of the elementwise minimum over devices
    np.testing.assert_array_equal(results["got_reducescatter_min"], blocks.min(0))
