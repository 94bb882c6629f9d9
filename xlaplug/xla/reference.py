"""`xlaplug run FILE --reference xla`, as XLA's `run_hlo_module --reference_platform`.

The module xlaplug runs (plugin kernels and all) is held against XLA:CPU running the
portable artifact of the same file: every plugin op replaced by its decomposition (as
`compile --decompose-all`; see portable_text), then XLA's own parser and compiler in jaxlib.  Both get the
same inputs.  One device runs XLA in this process; D > 1 runs it on D host devices in a
subprocess (devices.py), since jax fixes its device count when it starts.

A global program for many devices -- jax's shard_map and automatically partitioned programs,
as jax lowers them before partitioning -- is compiled by XLA's SPMD partitioner for its
mesh's device count and compared on the global values (global_shards.py); xlaplug runs it
on one device.
"""
from __future__ import annotations

import numpy as np

from ..hlo.errors import HloError
from ..hlo.ir import Module


class ReferenceInputError(HloError):
    """A module or input the reference run cannot take (one line, exit 2)."""

    def headline(self) -> str:
        return f"error: --reference xla: {self.message}"

    def __str__(self) -> str:
        return self.headline()


def portable_text(module: Module, registry) -> str:
    """`module` (freshly loaded, no passes run) as the HLO text XLA gets: every plugin op
    that has a decomposition replaced by it, as `compile --decompose-all` does; a custom
    call whose plugin has only a kernel stays, for XLA to resolve (jax_lapack's
    `lapack_*_ffi` targets are XLA:CPU's own; a target XLA has no handler for is its
    compile error), and so do XLA's partitioner calls (jax's shard_map regions).  None of
    xlaplug's other passes: XLA runs its own."""
    from ..passes.pipeline import compile_module
    from ..hlo.text.printer import module_to_text
    from ..plugin.session import Session
    compile_module(module, Session(registry, prefer="decomposition"),
                   "custom-call-lowering{keep_sharding=true}")
    return module_to_text(module)


def check_arguments(module: Module) -> None:
    """XLA's runtime takes arrays: a tuple or token parameter is refused up front."""
    for p in module.entry.parameters:
        if p.shape.is_tuple or p.shape.is_token:
            raise ReferenceInputError(f"parameter '{p.name}' is {p.shape}; XLA's runtime takes "
                                  f"array parameters only")


def run_reference(text: str, per_device: list[list[np.ndarray]], replicas: int = 1,
                  partitions: int = 1, platform: str = "cpu",
                  excess_precision: bool = True) -> list[list[np.ndarray]]:
    """[device][leaf] outputs of XLA (its `platform` backend) running HLO text on each
    device's arguments.  `excess_precision=False`: XLA:CPU compiles it with
    --xla_allow_excess_precision=false (the numerics of `run --no-excess-precision`)."""
    from .jaxlib_names import require_jax
    from .xla_executables import run_on_xla, run_on_xla_cpu
    require_jax("--reference xla")
    if platform != "cpu":  # an accelerator's own devices, in this process
        return run_on_xla(text, per_device, platform, replicas, partitions,
                          what=f"--reference xla:{platform}")
    options, flags = _xla_settings(excess_precision)
    if replicas * partitions == 1:
        return run_on_xla_cpu(text, per_device, 1, 1, xla_options=options)
    from .devices import run_in_subprocess
    return run_in_subprocess(text, replicas, partitions, per_device, xla_flags=flags)


def _xla_settings(excess_precision: bool) -> tuple[dict, str]:
    """XLA's debug options for a reference run, as a compilation's overrides (this
    process) and as XLA_FLAGS (a subprocess, whose jax reads them once at start)."""
    options = {} if excess_precision else {"xla_allow_excess_precision": False}
    return options, " ".join(f"--{k}={str(v).lower()}" for k, v in options.items())


def run_global_reference(text: str, args: list[np.ndarray], shapes: list[tuple[int, ...]],
                         devices: int, shardy: bool, platform: str = "cpu",
                         excess_precision: bool = True) -> list[np.ndarray]:
    """The global outputs of XLA running a global program on `devices` partitions: in this
    process where jax has that many devices, else on host devices in a subprocess."""
    from .cpu_client import cpu_backend
    from .jaxlib_names import require_jax
    from .xla_executables import run_global_on_xla
    require_jax("--reference xla")
    options, flags = _xla_settings(excess_precision)
    if platform != "cpu" or len(cpu_backend("--reference xla").local_devices()) >= devices:
        return run_global_on_xla(text, args, shapes, devices, shardy, platform,
                                 xla_options=options)
    from .devices import run_in_subprocess
    (outs,) = run_in_subprocess(text, 1, 1, [args], global_program=(devices, shardy),
                                xla_flags=flags)
    return outs


def reference_for_text(text: str, registry, per_device: list[list[np.ndarray]],
                       replicas: int = 1, partitions: int = 1, platform: str = "cpu",
                       excess_precision: bool = True) -> list[list[np.ndarray]]:
    """XLA:CPU's outputs for the portable artifact of HLO `text` (the module as read, before
    xlaplug's passes) with the registry's decompositions; a global program's
    (global_shards.py) on its own device count, one set of global outputs."""
    from ..hlo.text.parser import parse_module
    from .global_shards import global_devices
    module = parse_module(text, "<reference>")
    check_arguments(module)
    portable = portable_text(module, registry)
    devices, shardy = global_devices(module) if replicas * partitions == 1 else (1, False)
    if devices > 1:
        root = module.entry.root.shape
        shapes = [tuple(s.dims) for s in (root.tuple_shapes if root.is_tuple else (root,))]
        return [run_global_reference(portable, per_device[0], shapes, devices, shardy,
                                     platform, excess_precision)]
    return run_reference(portable, per_device, replicas, partitions, platform,
                         excess_precision)


def check_reference_options(expect_path, repeat, reference: str = "xla") -> str:
    """`--reference xla[:PLATFORM]` is its own comparison, in this process: checked before
    any work.  Returns the platform (`cpu` for plain `xla`)."""
    from ..backends.spmd.mpi import launched_by_mpi
    from ..hlo.errors import OptionError
    from .jaxlib_names import require_jax
    kind, _, platform = reference.partition(":")
    if kind != "xla" or (_ and not platform):
        raise OptionError(f"--reference: expected xla or xla:PLATFORM (xla:cpu, xla:tpu, "
                          f"xla:gpu), got '{reference}'")
    platform = platform.lower() or "cpu"
    if expect_path:
        raise OptionError("--reference xla and --expect: give one thing to compare against")
    if repeat != 1:
        raise OptionError("--reference xla runs once: drop --repeat")
    if launched_by_mpi():
        raise OptionError("--reference xla runs its devices as threads: run it without "
                          "mpiexec")
    require_jax("--reference xla")
    if platform != "cpu":
        import jax
        try:
            jax.devices(platform)
        except RuntimeError:
            present = [p for p in ("cpu", "tpu", "gpu") if _has(jax, p)]
            raise OptionError(f"--reference xla:{platform}: jax has no {platform} platform "
                              f"here (present: {', '.join(present)})") from None
    return platform


def _has(jax, platform: str) -> bool:
    try:
        return bool(jax.devices(platform))
    except RuntimeError:
        return False


def global_reference_devices(exe) -> int:
    """Devices XLA runs `exe`'s module on as one global program (1 when it is not one)."""
    from ..hlo.text.parser import parse_module
    from .global_shards import global_devices
    if exe.grid.count != 1:
        return 1
    return global_devices(parse_module(exe.source_text, "<reference>"))[0]
