"""XLA compiling HLO text and running its executables, through jaxlib (the bridge's
names: jaxlib_names.py): a per-device program for replicas x partitions devices on XLA:CPU
(or any platform jax has), a global program cut by XLA's SPMD partitioner, and the runs of
a compiled executable -- arguments placed once, before the clock; outputs as numpy views.
`--reference xla`, `--engine xla` (one device, many, each MPI rank) and check-plugins all
compile and run here.
"""
from __future__ import annotations

import re
import time

import numpy as np

from ..hlo.errors import HloError
from . import jaxlib_names
from .cpu_client import cpu_backend, uses_own_client
from .jaxlib_names import XlaError, hlo_to_stablehlo_bytecode, xla_message


def run_on_xla_cpu(text: str, per_device: list[list[np.ndarray]], replicas: int = 1,
                   partitions: int = 1, *, what: str = "--reference xla", repeat: int = 1,
                   times: list | None = None, xla_options: dict | None = None,
                   runs: list | None = None) -> list[list[np.ndarray]]:
    """Compile HLO text with XLA:CPU for replicas x partitions devices (the process's jax must
    have that many host devices) and run it on each device's arguments; [device][leaf].
    Device d is replica d // P, partition d % P, as XLA's default assignment.  `repeat`
    runs of the one compiled executable; each run's seconds go to `times` when given, and
    each run's outputs ([device][leaf]) to `runs` (the last run's are returned).
    `xla_options`: XLA debug options for this compile ({"xla_allow_excess_precision":
    False}), as jax's `compile(compiler_options=...)` sets them."""
    compiled = compile_on_xla_cpu(text, replicas, partitions, what=what,
                                  xla_options=xla_options)
    return run_compiled(compiled, per_device, repeat=repeat, times=times, runs=runs)


def compile_on_xla_cpu(text: str, replicas: int = 1, partitions: int = 1, *,
                       what: str = "--reference xla", xla_options: dict | None = None):
    """(XLA:CPU's loaded executable of HLO text, its devices): compiled once, for
    `run_compiled` to run as often as asked (run_on_xla_cpu is both)."""
    if partitions > 1:  # a per-device program: every instruction is manual to XLA's partitioner
        text = _manual(text)
    return _compile(hlo_to_stablehlo_bytecode(text, what), replicas, partitions, what,
                    xla_options=xla_options)


def run_stablehlo_on_xla_cpu(mlir: str | bytes, args: list[np.ndarray],
                             what: str = "XLA:CPU") -> list[np.ndarray]:
    """A StableHLO module compiled by XLA:CPU and run on one device (the tests' oracle)."""
    return _compile_and_run(mlir, [list(args)], 1, 1, what)[0]


def run_on_xla(text: str, per_device: list[list[np.ndarray]], platform: str,
               replicas: int = 1, partitions: int = 1, *, what: str = "XLA"
               ) -> list[list[np.ndarray]]:
    """run_on_xla_cpu on any platform jax has (`cpu`, `tpu`, `gpu`): the HLO text compiled
    by that backend of XLA and run on its first replicas x partitions devices."""
    if partitions > 1:
        text = _manual(text)
    return _compile_and_run(hlo_to_stablehlo_bytecode(text, what), per_device, replicas,
                            partitions, what, platform)


def _compile(computation: str | bytes, replicas: int, partitions: int, what: str,
             platform: str = "cpu", shardy: bool | None = None,
             xla_options: dict | None = None):
    """(XLA's loaded executable, its devices): `computation` compiled for replicas x
    partitions devices.  `shardy`: None for a per-device program (every instruction manual);
    else a global program that XLA's SPMD partitioner cuts, with Shardy (True) or GSPMD.
    `xla_options`: debug options for this compilation (e.g. xla_allow_excess_precision)."""
    backend, devs, opts = compile_setup(replicas, partitions, what, platform, shardy,
                                        xla_options)
    try:
        return backend.compile_and_load(computation, devs_list(what, devs), opts), devs
    except Exception as e:
        raise XlaError(f"XLA:{platform.upper()} cannot compile the module: "
                       f"{xla_message(e)}") from None


def devs_list(what: str, devs):
    return jaxlib_names.xla_client(what).DeviceList(tuple(devs))


def compile_setup(replicas: int, partitions: int, what: str, platform: str = "cpu",
                  shardy: bool | None = None, xla_options: dict | None = None):
    """(backend, devices, compile options) of `_compile` -- apart from it so that a
    serialized executable can be loaded for the same devices and options (the tests share
    executables between their processes that way: tests/xla_session_cache.py)."""
    xc = jaxlib_names.xla_client(what)
    n = replicas * partitions
    label = f"XLA:{platform.upper()}"
    if platform == "cpu":  # jaxlib's own client where this process has not imported jax
        backend = cpu_backend(what)
    else:
        try:
            backend = jaxlib_names.get_backend(what)(platform)
        except RuntimeError as e:
            raise XlaError(f"jax has no '{platform}' platform here: {xla_message(e)}") from None
    devs = backend.local_devices()[:n]
    if len(devs) < n:
        raise XlaError(f"{label} has {len(devs)} devices, the module needs {n}")
    opts = xc.CompileOptions()
    opts.num_replicas, opts.num_partitions = replicas, partitions
    opts.device_assignment = xc.DeviceAssignment.create(
        np.arange(n).reshape(replicas, partitions))
    opts.executable_build_options.use_spmd_partitioning = partitions > 1
    if shardy is not None:
        opts.executable_build_options.use_shardy_partitioner = shardy
    if xla_options:
        opts.env_option_overrides = list(xla_options.items())
    return backend, devs, opts


def _compile_and_run(computation: str | bytes, per_device, replicas: int, partitions: int,
                     what: str, platform: str = "cpu") -> list[list[np.ndarray]]:
    compiled = _compile(computation, replicas, partitions, what, platform)
    return run_compiled(compiled, per_device, platform=platform)


def run_compiled(compiled, per_device, *, platform: str = "cpu", repeat: int = 1,
                 times: list | None = None, runs: list | None = None
                 ) -> list[list[np.ndarray]]:
    """`repeat` runs of a compiled (executable, devices) on each device's arguments, placed
    once and waited for (jax copies a numpy array that is not 64-byte aligned, in the
    background: a copy the first run would otherwise wait for); a run is the execution and
    its outputs as numpy arrays (views of XLA's buffers on the host, no copy): its seconds
    go to `times`, its outputs to `runs`; [device][leaf] of the last run."""
    exe, devs = compiled
    n = len(devs)
    if _own(platform):
        from .host_arrays import run_own
        return run_own(exe, devs, per_device, platform, repeat, times, runs)
    import jax
    try:
        with jax.enable_x64(True):  # f64 / s64 arguments stay 64-bit
            # placed before the first run's clock starts (a copy in runs asynchronously)
            args = jax.block_until_ready(_placed(jax, per_device, devs))
            for _ in range(repeat):
                t0 = time.perf_counter()
                res = exe.execute_sharded(args).disassemble_into_single_device_arrays()
                out = _every_output(res, n)
                if times is not None:
                    times.append(time.perf_counter() - t0)
                if runs is not None:
                    runs.append(out)
    except Exception as e:
        raise XlaError(f"XLA:{platform.upper()} failed running the module: "
                       f"{xla_message(e)}") from None
    return out


def _own(platform: str) -> bool:
    """Whether executables of `platform` come from jaxlib's own XLA:CPU client (this process
    has no jax: its arrays are xla/host_arrays.py's)."""
    return platform == "cpu" and uses_own_client()


def _every_output(res, n: int) -> list[list[np.ndarray]]:
    """[device][leaf] of one execution as numpy arrays, each waited for; a failed output's
    error is raised only once every device's outputs are done.  Raised at the first, the
    other devices' executions could still be running -- one blocked in a collective the
    failed device never reached -- when the caller ends the run's communicator, and the
    next run's devices then waited for them until the collective timeout (seen once in
    test_engine_devices under load)."""
    out, first = [], None
    for d in range(n):
        row = []
        for leaf in res:
            try:
                row.append(np.asarray(leaf[d]))
            except Exception as e:  # noqa: BLE001 - XLA's error, raised below
                first = first or e
        out.append(row)
    if first is not None:
        raise first
    return out


def _placed(jax, per_device, devs) -> list:
    """Each argument on its devices: on one, the arrays as they are (placed in one call);
    on many, each device's own value as a "replicated" global array (jax does not compare
    shards)."""
    if len(devs) == 1:
        return jax.device_put([np.asarray(a) for a in per_device[0]], devs[0])
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    replicated = NamedSharding(Mesh(np.array(devs), ("d",)), PartitionSpec())
    args = []
    for k in range(len(per_device[0]) if per_device else 0):
        vals = [np.asarray(per_device[d][k]) for d in range(len(devs))]
        bufs = [jax.device_put(v, dv) for v, dv in zip(vals, devs)]
        args.append(jax.make_array_from_single_device_arrays(vals[0].shape, replicated, bufs))
    return args


def run_global_on_xla(text: str, args: list[np.ndarray], shapes: list[tuple[int, ...]],
                      devices: int, shardy: bool, platform: str = "cpu",
                      what: str = "--reference xla", xla_options: dict | None = None
                      ) -> list[np.ndarray]:
    """A global program (jax's, before partitioning) compiled by XLA's SPMD partitioner for
    `devices` partitions and run on the global `args`: each argument cut into the shards the
    executable's parameter shardings give each device, and each output (of global shape
    `shapes[j]`) put back together from its shards.  The global outputs, one per leaf."""
    compiled = compile_global_on_xla(text, devices, shardy, platform, what, xla_options)
    return run_global_compiled(compiled, args, shapes, platform, what)


def compile_global_on_xla(text: str, devices: int, shardy: bool, platform: str = "cpu",
                          what: str = "--reference xla", xla_options: dict | None = None):
    """(XLA's loaded executable, its devices) of a global program, for run_global_compiled
    to run as often as asked."""
    return _compile(hlo_to_stablehlo_bytecode(text, what), 1, devices, what, platform,
                    shardy, xla_options)


def run_global_compiled(compiled, args: list[np.ndarray], shapes: list[tuple[int, ...]],
                        platform: str = "cpu", what: str = "--reference xla", *,
                        repeat: int = 1, times: list | None = None) -> list[np.ndarray]:
    """`repeat` runs of a compiled global program on the global `args` (cut and placed
    once, before the clock; a run is the execution and its shards as numpy arrays, its
    seconds to `times`); the last run's global outputs, put back together."""
    if _own(platform):
        from .host_arrays import run_global_own
        return run_global_own(compiled, args, shapes, platform, what, repeat, times)
    import jax
    from .global_shards import assemble, cut
    xc = jaxlib_names.xla_client(what)
    indices = jaxlib_names.sharding_indices(what)
    gspmd = jaxlib_names.gspmd_sharding(what)
    exe, devs = compiled
    devices = len(devs)
    label = f"XLA:{platform.upper()}"
    try:
        with jax.enable_x64(True):
            arrays = []
            for x, op in zip(args, exe.get_parameter_shardings()):
                hs = xc.HloSharding.from_proto(op)
                padded, shards = cut(np.asarray(x), hs, devices, indices)
                bufs = [jax.device_put(s, dv) for s, dv in zip(shards, devs)]
                arrays.append(jax.make_array_from_single_device_arrays(
                    padded, gspmd(tuple(devs), hs), bufs))
            arrays = jax.block_until_ready(arrays)
            for _ in range(repeat):
                t0 = time.perf_counter()
                res = exe.execute_sharded(arrays).disassemble_into_single_device_arrays()
                shards = [[np.asarray(s) for s in leaf] for leaf in res]
                if times is not None:
                    times.append(time.perf_counter() - t0)
            outs = exe.get_output_shardings()
    except HloError:
        raise  # what the reference cannot cut (global_shards), in its own words
    except Exception as e:
        raise XlaError(f"{label} failed running the module: {xla_message(e)}") from None
    return [assemble(leaf, xc.HloSharding.from_proto(op), indices, shape)
            for leaf, op, shape in zip(shards, outs, shapes)]


def _manual(text: str) -> str:
    """Every instruction of a per-device program `sharding={manual}` (XLA's partitioner then
    leaves it as written); a sharding the instruction had -- a module as XLA partitioned it
    keeps its parameters' -- is replaced, not repeated (XLA's parser refuses a second)."""
    def one(m: re.Match) -> str:
        return _without_sharding(m.group(1)) + ", sharding={manual}"
    return re.sub(r"^(\s*(?:ROOT\s+)?[\w.\-]+\s*=\s*.*?)\s*$", one, text, flags=re.M)


def _without_sharding(line: str) -> str:
    """`line` without its `, sharding={...}` attribute (braces nest: tuple shardings)."""
    start = line.find(", sharding={")
    if start < 0:
        return line
    depth, k = 0, start + len(", sharding=")
    for k in range(k, len(line)):
        depth += {"{": 1, "}": -1}.get(line[k], 0)
        if depth == 0:
            break
    return line[:start] + line[k + 1:]
