"""The Horovod ops through xlaplug.jax.op inside shard_map on 4 host devices, against jax's
own collectives (lax.psum, ...) over the same axis: values and gradients.

    python tests/jax_op_shard_map.py OUT.npz

Run in a subprocess by tests/test_jax_op_spmd.py: the host device count is fixed when jax
starts.  OUT.npz gets, per case, `got_<case>` and `want_<case>` (`want` only where jax has
the collective).
"""
from __future__ import annotations

import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, PartitionSpec as P  # noqa: E402

import xlaplug.jax  # noqa: E402

X = np.random.default_rng(0).standard_normal((16, 3)).astype(np.float32)
I = np.arange(48, dtype=np.int32).reshape(16, 3) % 7

CASES = {  # case: (op, attrs, input, the same with jax's collective or None)
    "allreduce_sum": ("HorovodAllreduce", {"reduce_op": "sum"}, X, lambda v: jax.lax.psum(v, "i")),
    "allreduce_average": ("HorovodAllreduce", {"reduce_op": "average"}, X,
                          lambda v: jax.lax.pmean(v, "i")),
    "allreduce_max_int": ("HorovodAllreduce", {"reduce_op": "max"}, I,
                          lambda v: jax.lax.pmax(v, "i")),
    "allreduce_product": ("HorovodAllreduce", {"reduce_op": "product"}, X, None),
    "allgather": ("HorovodAllgather", {}, X, lambda v: jax.lax.all_gather(v, "i", tiled=True)),
    "broadcast": ("HorovodBroadcast", {"root_rank": 2}, X, None),
    "alltoall": ("HorovodAlltoall", {}, X,
                 lambda v: jax.lax.all_to_all(v, "i", 0, 0, tiled=True)),
    "reducescatter_sum": ("HorovodReducescatter", {"reduce_op": "sum"}, X,
                          lambda v: jax.lax.psum_scatter(v, "i", tiled=True)),
    "reducescatter_min": ("HorovodReducescatter", {"reduce_op": "min"}, X, None),
}


def main(out_path: str) -> None:
    mesh = Mesh(np.array(jax.devices()[:4]), ("i",))

    def sharded(fn):
        return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=P("i"), out_specs=P("i")))
    out = {}
    for case, (name, attrs, x, ref) in CASES.items():
        op = xlaplug.jax.op(name, axis_name="i")
        mine = sharded(lambda v, op=op, attrs=attrs: op(v, **attrs))
        out[f"got_{case}"] = np.asarray(mine(x))
        if ref is not None:
            out[f"want_{case}"] = np.asarray(sharded(ref)(x))
    # gradients through the decomposition's psum against psum's own
    op = xlaplug.jax.op("HorovodAllreduce", axis_name="i")
    w = np.linspace(-1, 1, X.size, dtype=np.float32).reshape(X.shape)

    def loss(f):
        return lambda v: (sharded(f)(v) * w).sum()
    out["got_grad"] = np.asarray(jax.grad(loss(lambda v: op(v, reduce_op="average")))(X))
    out["want_grad"] = np.asarray(jax.grad(loss(lambda v: jax.lax.pmean(v, "i")))(X))
    out["x"], out["i"] = X, I
    np.savez(out_path, **out)


if __name__ == "__main__":
    main(sys.argv[1])
