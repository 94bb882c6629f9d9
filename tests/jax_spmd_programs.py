"""Multi-device jax programs as XLA compiles them, with every device's inputs and outputs:
the oracle of tests/test_spmd_jax.py.  Runs in a subprocess (8 host devices must be set
before jax starts):

    python tests/jax_spmd_programs.py OUT.npz

For program i: `name_i`, `compiled_i` (compiled, partitioned HLO text), `lowered_i` (the
global program jax lowers), `parts_i` (partition count), and per partition p the shards of
each argument k and output j on the device running partition p (`arg_i_k_p`, `out_i_j_p`);
the global values are `garg_i_k` and `gout_i_j`.  `plugin_hlo` and `plugin_arg` are a
shard_map program around a plugin op (`test.twice`), `horovod_hlo` and `horovod_arg` one
around the five Horovod ops: lowered only, no XLA runs them here.
"""
from __future__ import annotations

import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"

import numpy as np  # noqa: E402


def programs():
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P
    try:
        from jax import shard_map
    except ImportError:  # pragma: no cover - older jax
        from jax.experimental.shard_map import shard_map
    devs = jax.devices()
    mesh4 = Mesh(np.array(devs[:4])[::-1], ("x",))  # partition p is not device p
    mesh24 = Mesh(np.array(devs[:8]).reshape(2, 4), ("a", "b"))
    g = np.random.default_rng(7)
    f32 = lambda *s: g.standard_normal(s).astype(np.float32)  # noqa: E731

    def sm(f, mesh, ins, outs):
        return jax.jit(shard_map(f, mesh=mesh, in_specs=ins, out_specs=outs, check_vma=False))

    def collectives(a):
        return (jax.lax.psum(a, "x"), jax.lax.all_gather(a, "x"),
                jax.lax.ppermute(a, "x", [(i, (i + 1) % 4) for i in range(4)]),
                jax.lax.axis_index("x")[None], jax.lax.pmax(a, "x"))
    yield "shard_map_1d", sm(collectives, mesh4, P("x"), (P(), P(), P("x"), P("x"), P())), \
        (f32(8, 3),)

    def ints(a):
        return jax.lax.psum(a, "x"), jax.lax.psum_scatter(a, "x", tiled=True), \
            jax.lax.all_to_all(a, "x", 0, 0, tiled=True)
    yield "shard_map_int", sm(ints, mesh4, P("x"), (P(), P("x"), P("x"))), \
        (g.integers(-100, 100, (16, 2)).astype(np.int32),)

    def two_d(a):
        return jax.lax.psum(a, "a"), jax.lax.psum(a, "b"), jax.lax.psum(a, ("a", "b")), \
            jax.lax.all_gather(a, "b", tiled=True)
    yield "shard_map_2d", sm(two_d, mesh24, P("a", "b"),
                             (P(None, "b"), P("a"), P(), P("a"))), (f32(4, 8),)

    def ring(a):  # an all-reduce written with ppermute in a fori_loop
        def body(i, carry):
            acc, cur = carry
            cur = jax.lax.ppermute(cur, "x", [(j, (j + 1) % 4) for j in range(4)])
            return acc + cur, cur
        return jax.lax.fori_loop(0, 3, body, (a, a))[0]
    yield "ring_allreduce_fori", sm(ring, mesh4, P("x"), P("x")), (f32(8, 2),)

    # Automatic partitioning: a matmul with sharded operands.
    sh = NamedSharding(mesh4, P("x", None))
    rep = NamedSharding(mesh4, P())
    mm = jax.jit(lambda a, b: jnp.tanh(a @ b).sum(axis=0), in_shardings=(sh, rep),
                 out_shardings=rep)
    yield "auto_partitioned_matmul", mm, (f32(8, 16), f32(16, 4))

    # The same with Shardy off: GSPMD's `sharding=` annotations, on a 2x2 mesh with an
    # operand replicated over one axis.
    mesh22 = Mesh(np.array(devs[:4]).reshape(2, 2), ("a", "b"))
    mm2 = jax.jit(lambda a, b: jax.nn.relu(a @ b) * 2,
                  in_shardings=(NamedSharding(mesh22, P("a", "b")),
                                NamedSharding(mesh22, P("b", None))),
                  out_shardings=NamedSharding(mesh22, P("a")))
    yield "auto_partitioned_gspmd", _Gspmd(mm2), (f32(8, 6), f32(6, 4))

    # Data-parallel training step: MLP gradients, pmean, SGD.
    def loss(params, x, y):
        w1, w2 = params
        return jnp.mean((jnp.tanh(x @ w1) @ w2 - y) ** 2)

    def step(w1, w2, x, y):
        grads = jax.grad(loss)((w1, w2), x, y)
        grads = jax.tree.map(lambda t: jax.lax.pmean(t, "x"), grads)
        return w1 - 0.1 * grads[0], w2 - 0.1 * grads[1]
    yield "data_parallel_step", sm(step, mesh4, (P(), P(), P("x"), P("x")), (P(), P())), \
        (f32(6, 16), f32(16, 2), f32(16, 6), f32(16, 2))


class _Gspmd:
    """A jitted function lowered with jax's Shardy partitioner off (as jax did before it)."""

    def __init__(self, fn):
        self.fn = fn

    def lower(self, *args):
        import jax
        jax.config.update("jax_use_shardy_partitioner", False)
        try:
            return self.fn.lower(*args)
        finally:
            jax.config.update("jax_use_shardy_partitioner", True)


def plugin_programs():
    """(HLO text, argument) of shard_map programs around plugin ops: `test.twice`, and the
    bundled Horovod collectives (over the region's 4 devices)."""
    import jax
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P
    mesh = Mesh(np.array(jax.devices()[:4]), ("x",))

    def call(name, a, shape=None, **attrs):
        return jax.ffi.ffi_call(name, jax.ShapeDtypeStruct(shape or a.shape, a.dtype))(
            a, **attrs)

    def twice(a):
        return jax.lax.psum(call("test.twice", a), "x")

    def horovod(a):
        rows = a.shape[0]
        return (call("HorovodAllreduce", a, reduce_op="average"),
                call("HorovodAllgather", a, (4 * rows,) + a.shape[1:]),
                call("HorovodReducescatter", a, (rows // 4,) + a.shape[1:], reduce_op="sum"),
                call("HorovodBroadcast", a, root_rank=np.int64(2)),
                call("HorovodAlltoall", a))
    g = np.random.default_rng(3)
    for fn, outs, shape in ((twice, P(), (8, 5)),
                            (horovod, (P(), P(), P("x"), P(), P("x")), (16, 3))):
        f = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=P("x"), out_specs=outs,
                                  check_vma=False))
        a = g.standard_normal(shape).astype(np.float32)
        yield f.lower(a).as_text(dialect="hlo"), a


def main(out_path: str) -> None:
    import jax
    out = {}
    for i, (name, fn, args) in enumerate(programs()):
        lowered = fn.lower(*args)
        compiled = lowered.compile()
        devices = list(compiled.runtime_executable().local_devices())
        results = jax.tree.leaves(compiled(*args))
        shards = [jax.device_put(a, s) for a, s in zip(args, compiled.input_shardings[0])]
        out[f"name_{i}"] = np.array(name)
        out[f"compiled_{i}"] = np.array(compiled.as_text())
        out[f"lowered_{i}"] = np.array(lowered.as_text(dialect="hlo"))
        out[f"parts_{i}"] = np.array(len(devices))
        out[f"nargs_{i}"] = np.array(len(args))
        for k, a in enumerate(args):  # the global program's inputs and outputs
            out[f"garg_{i}_{k}"] = np.asarray(a)
        for j, r in enumerate(results):
            out[f"gout_{i}_{j}"] = np.asarray(r)
        for p, dev in enumerate(devices):
            for k, a in enumerate(shards):
                out[f"arg_{i}_{k}_{p}"] = next(np.asarray(s.data) for s in a.addressable_shards
                                               if s.device == dev)
            for j, r in enumerate(results):
                out[f"out_{i}_{j}_{p}"] = next(np.asarray(s.data) for s in r.addressable_shards
                                               if s.device == dev)
        out["n"] = np.array(i + 1)
    for key, (text, arg) in zip(("plugin", "horovod"), plugin_programs()):
        out[f"{key}_hlo"], out[f"{key}_arg"] = np.array(text), arg
    np.savez(out_path, **out)


if __name__ == "__main__":
    main(sys.argv[1])
