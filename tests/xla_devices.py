"""XLA:CPU as the oracle for multi-device HLO: run in a subprocess (the host device count is
fixed when jax starts), on `XLA_FLAGS=--xla_force_host_platform_device_count=8`.

    python tests/xla_devices.py CASES.npz OUT.npz

CASES.npz holds `n` and, per case i, `text_i` (HLO text with replica_count= /
num_partitions= in its header), `grid_i` ([R, P]), `nargs_i`, `arg_i_k_d` (argument k of
device d) and `dtype_i_k`; OUT.npz gets `out_i_j_d` (output leaf j of device d) and
`dtype_i_j`, or `error_i` (XLA's message).  ml_dtypes arrays travel as their bits.
Device d is replica d // P, partition d % P, as XLA's default device assignment.
"""
from __future__ import annotations

import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"

import numpy as np  # noqa: E402


def _manual(text: str) -> str:
    import re
    return re.sub(r"^(\s*(?:ROOT\s+)?[\w.\-]+\s*=\s*.*?)\s*$", r"\1, sharding={manual}", text,
                  flags=re.M)


def run_case(text: str, replicas: int, partitions: int, args: list[list[np.ndarray]]):
    import jax
    from jax._src import compiler, xla_bridge
    from jax._src.interpreters import mlir
    from jax._src.lib import _jax
    from jax._src.lib import xla_client as xc
    from jax._src.lib.mlir import ir
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    from jaxlib import _hlo
    n = replicas * partitions
    if partitions > 1:  # already partitioned: every instruction is manual to XLA's partitioner
        text = _manual(text)
    proto = _hlo.hlo_module_from_text(text).as_serialized_hlo_module_proto()
    opts = xc.CompileOptions()
    opts.num_replicas, opts.num_partitions = replicas, partitions
    opts.device_assignment = xc.DeviceAssignment.create(np.arange(n).reshape(replicas,
                                                                             partitions))
    opts.executable_build_options.use_spmd_partitioning = partitions > 1
    backend = xla_bridge.get_backend("cpu")
    devs = backend.local_devices()[:n]
    with mlir.make_ir_context():
        module = ir.Module.parse(_jax.mlir.hlo_to_stablehlo(proto))
        exe = compiler.backend_compile_and_load(backend, module, xc.DeviceList(tuple(devs)),
                                                opts, [])
    sharding = NamedSharding(Mesh(np.array(devs), ("d",)), PartitionSpec("d"))
    globals_ = []
    for k in range(len(args[0])):
        per = [np.asarray(args[d][k]) for d in range(n)]
        shape = (n * per[0].shape[0],) + per[0].shape[1:] if per[0].ndim else (n,)
        bufs = [jax.device_put(p if p.ndim else p.reshape(1), dv) for p, dv in zip(per, devs)]
        if not per[0].ndim:
            raise ValueError("scalar parameters are not supported by this oracle")
        globals_.append(jax.make_array_from_single_device_arrays(shape, sharding, bufs))
    res = exe.execute_sharded(globals_).disassemble_into_single_device_arrays()
    return [[np.asarray(x) for x in leaf] for leaf in res]  # [leaf][device]


def _raw(a: np.ndarray):
    """npz keeps no ml_dtypes types: an array as (plain bits, its dtype's name)."""
    a = np.asarray(a)
    if a.dtype.kind == "V" or a.dtype.type.__module__.startswith("ml_dtypes"):
        return a.view(f"u{a.dtype.itemsize}"), np.array(a.dtype.name)
    return a, np.array(a.dtype.name)


def _typed(bits: np.ndarray, name: str) -> np.ndarray:
    import ml_dtypes
    dt = np.dtype(getattr(ml_dtypes, name)) if hasattr(ml_dtypes, name) else np.dtype(name)
    return bits.view(dt) if bits.dtype != dt else bits


def main(cases_path: str, out_path: str) -> None:
    cases = np.load(cases_path, allow_pickle=False)
    out = {}
    for i in range(int(cases["n"])):
        r, p = (int(v) for v in cases[f"grid_{i}"])
        nargs = int(cases[f"nargs_{i}"])
        args = [[_typed(cases[f"arg_{i}_{k}_{d}"], str(cases[f"dtype_{i}_{k}"]))
                 for k in range(nargs)] for d in range(r * p)]
        try:
            for j, leaf in enumerate(run_case(str(cases[f"text_{i}"]), r, p, args)):
                for d, v in enumerate(leaf):
                    out[f"out_{i}_{j}_{d}"], out[f"dtype_{i}_{j}"] = _raw(v)
        except Exception as e:  # noqa: BLE001 - the message is the oracle's answer
            out[f"error_{i}"] = np.array(str(e).splitlines()[0] if str(e) else repr(e))
    np.savez(out_path, **out)


if __name__ == "__main__":
    main(*sys.argv[1:3])
