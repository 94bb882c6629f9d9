"""`--engine xla` on 4 host devices in this process (jax started with 4), against jax itself
and against xlaplug's interpreter:

    python tests/engine_devices_program.py OUT.npz

Run in a subprocess by tests/test_engine_devices.py: the host device count is fixed when
jax starts.  OUT.npz gets, per case, `got_<case>_<j>` (the engine's output j), `want_<case>_<j>`
(jax's) and `interp_<case>_<j>` (the interpreter's), and `here_<case>` / `second_compile_s`
(whether XLA ran the devices in this process; the compile seconds of an executable's second
run), `served_<case>` and `comms_<case>` (the plugin ops served by their kernels as FFI
targets, and those whose communicator kernels met across the devices, comma-separated).
"""
from __future__ import annotations

import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, PartitionSpec as P  # noqa: E402

import xlaplug  # noqa: E402

ALLREDUCE4 = """HloModule allreduce4, replica_count=4
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[6] parameter(0)
  r = f32[6] all-reduce(x), replica_groups={}, to_apply=add
  id = u32[] replica-id()
  ROOT t = (f32[6], u32[]) tuple(r, id)
}
"""


def main(out_path: str) -> None:
    out = {}

    def keep(case, exe, res, want, interp_inputs):
        interp = xlaplug.compile(exe.source_text).run(inputs=interp_inputs)
        program = exe.contexts.devices_engine_program(exe.source_text, res.grid)  # (kept)
        out[f"here_{case}"] = np.array(program.here)
        out[f"served_{case}"] = np.array(",".join(program.ops))  # ops whose kernels XLA called
        out[f"comms_{case}"] = np.array(",".join(program.communicators))  # across the devices
        for j, g in enumerate(res.outputs):
            out[f"got_{case}_{j}"] = g
            out[f"want_{case}_{j}"] = want[j]
            out[f"interp_{case}_{j}"] = interp.outputs[j]

    # A core all-reduce on 4 replicas, through the Python API: compiled once.
    x = np.arange(24, dtype=np.float32).reshape(4, 6) / 8  # device d's row
    exe = xlaplug.compile(ALLREDUCE4, engine="xla")
    res = exe.run(inputs={"in0": x})
    again = exe.run(inputs={"in0": x})
    out["second_compile_s"] = np.array(again.timings["compile_s"])
    keep("allreduce4", exe, res, [np.tile(x.sum(0), (4, 1)), np.arange(4, dtype=np.uint32)],
         {"in0": x})

    # shard_map as jax prints it (a global program) and as XLA prints it partitioned.
    mesh = Mesh(np.array(jax.devices()[:4]), ("x",))

    def f(a):
        return jax.lax.psum(jnp.tanh(a), "x"), jax.lax.all_gather(a * 2, "x", tiled=True)
    g = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=(P(), P("x"))))
    a = np.linspace(-2, 2, 24, dtype=np.float32).reshape(8, 3)
    lowered = g.lower(a)
    want = [np.asarray(v) for v in g(a)]
    exe = xlaplug.compile(lowered.as_text(dialect="hlo"), engine="xla")
    keep("shard_map_global", exe, exe.run(inputs={"in0": a}), want, {"in0": a})

    shards = a.reshape(4, 2, 3)  # partition p holds rows 2p, 2p+1
    per_device = [np.stack([np.asarray(s.data) for s in sorted(
        v.addressable_shards, key=lambda s: s.device.id)]) for v in g(a)]
    exe = xlaplug.compile(lowered.compile().as_text(), engine="xla")
    keep("shard_map_partitioned", exe, exe.run(inputs={"in0": shards}), per_device,
         {"in0": shards})

    # The bundled rms_norm kernel inside a shard_map region: an FFI call in XLA's
    # partitioned program, served here on each device's shard.
    def h(v, scale):
        y = jax.ffi.ffi_call("example.rms_norm", jax.ShapeDtypeStruct(v.shape, v.dtype))(
            v, scale, epsilon=np.float32(1e-6))
        return jax.lax.psum(y, "x")
    gh = jax.jit(jax.shard_map(h, mesh=mesh, in_specs=(P("x"), P()), out_specs=P()))
    v = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    scale = np.linspace(0.5, 1.5, 16, dtype=np.float32)
    rms = v / np.sqrt((v * v).mean(-1, keepdims=True) + np.float32(1e-6)) * scale
    exe = xlaplug.compile(gh.lower(v, scale).as_text(dialect="hlo"), engine="xla")
    keep("shard_map_plugin", exe, exe.run(inputs={"in0": v, "in1": scale}),
         [rms.reshape(4, 2, 16).sum(0)], {"in0": v, "in1": scale})

    # A Horovod op in a per-device program: its kernel, on each of XLA's device threads.
    hvd = os.path.join(os.path.dirname(__file__), "..", "examples", "horovod_allreduce4.hlo")
    w, grad = np.ones((4, 1024), np.float32), np.random.default_rng(1).standard_normal(
        (4, 1024)).astype(np.float32)
    exe = xlaplug.compile(open(hvd).read(), engine="xla")
    keep("horovod_kernel", exe, exe.run(w, grad), [w - np.float32(0.1) * grad.mean(0)],
         {"in0": w, "in1": grad})

    # The same op in a shard_map region (a global program): decomposed, for XLA's
    # partitioner; jax's psum the oracle.
    def k(v):
        return jax.ffi.ffi_call("HorovodAllreduce", jax.ShapeDtypeStruct(v.shape, v.dtype))(
            v, reduce_op="sum")
    gk = jax.jit(jax.shard_map(k, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
    want_k = jax.jit(jax.shard_map(lambda v: jax.lax.psum(v, "x"), mesh=mesh,
                                   in_specs=P("x"), out_specs=P("x")))(v)
    exe = xlaplug.compile(gk.lower(v).as_text(dialect="hlo"), engine="xla")
    keep("horovod_global", exe, exe.run(inputs={"in0": v}), [np.asarray(want_k)], {"in0": v})
    np.savez(out_path, **out)


if __name__ == "__main__":
    main(sys.argv[1])
