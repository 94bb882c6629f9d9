"""`--engine xla` on many devices in one process: XLA runs the module's devices itself, on
XLA:CPU host devices (issue 22 item 3).

Two kinds of module run this way:
  - a per-device program for D = replicas x partitions devices (`replica_count=4`,
    `--replicas/--partitions`, or a module as XLA prints it after SPMD partitioning,
    `num_partitions=4`): XLA compiles it for D devices and runs every device's arguments,
    the outputs per device as the interpreter's many-device run gives them;
  - a global program as jax prints it before partitioning (shard_map regions, sharding
    annotations; global_shards.py): XLA's SPMD partitioner cuts it for its mesh's device
    count, and the outputs are the global values, as the interpreter (which runs it on one
    device) gives them.

The module is lowered as on one device (xla/engine.py): plugin ops with a CPU kernel become
typed-FFI calls served by their kernels.  Core collectives are XLA's own.  An op whose
kernel needs a communicator (the Horovod ops) is served by that kernel too: XLA runs its
devices at once, each on its own thread, and the kernel's calls on every device meet at
xlaplug's in-process rendezvous, as on the interpreter's device threads (engine_comms.py);
in a global program, which XLA's partitioner cuts, such an op is decomposed.  A core
opcode a plugin overrides runs the override kernel on each device, in that device's
interpreter context (xla/devices_rewrite.py); in a global program it is a one-line error.

jax fixes its host device count when its CPU backend starts.  Where this process's jax has
as many host devices as the run needs (XLA_FLAGS=--xla_force_host_platform_device_count=D
set before jax started), XLA runs the devices here.  Else a worker process started with D
host devices runs them (engine_worker.py): it loads the plugins whose kernels the module
calls, or that override its core opcodes, from their files (a plugin made in Python cannot
be sent: a one-line error), registers the kernels and compiles the module, and is kept for
the later runs.  What the worker would refuse is refused here first, at the file's lines.  Either way the
program is made once per Executable and grid (DevicesProgram, kept by
DeviceContexts.devices_engine_program), its making in the first run's compile_s and in no
run's time; the worker's start (a Python process, jax's import, the plugins) is paid once
per Executable too, and each run then sends its arguments and outputs through a pipe.
"""
from __future__ import annotations

import time

from ..hlo.errors import plural
from .options import RunError, RunResult


def run_devices_on_xla(exe, grid, inputs, options, expected, rtol, atol) -> RunResult:
    """A RunResult of the module's devices run by XLA:CPU: stacked per-device outputs, or
    a global program's global outputs (one device, as the interpreter gives them)."""
    from .inputs import build_inputs, device_inputs
    from .outputs import compare, compare_devices, stacked
    from .run_paths import _timings
    program = exe.contexts.devices_engine_program(exe.source_text, grid)
    if program.global_devices:  # one set of global arguments, the global outputs
        args = [build_inputs(exe.module, inputs, options)]
    else:
        args = device_inputs(exe.module, inputs, options, grid.count)
    per_device, times, made_s = program.run(args, options.repeat,
                                            options.collective_timeout)
    timings = _timings(made_s, times)
    if program.global_devices:
        outs = per_device[0]
        mismatches = compare(outs, expected, rtol, atol) if expected is not None else None
        return RunResult(outs, per_device, timings, times, grid=grid, engine="xla",
                         mismatches=mismatches, all_ok=not mismatches)
    mismatches = (compare_devices(per_device, expected, rtol, atol)
                  if expected is not None else None)
    return RunResult(stacked(per_device), per_device, timings, times, grid=grid,
                     engine="xla", transport="xla" if program.here else "xla-worker",
                     devices=tuple(range(grid.count)),
                     mismatches=mismatches, all_ok=not mismatches)


def global_program_devices(source_text: str) -> tuple[int, bool]:
    """(devices, Shardy?) of a global program as read; (1, False) for any other module."""
    from ..hlo.text.parser import parse_module
    from ..xla.global_shards import global_devices
    return global_devices(parse_module(source_text, "<xla engine>"))


def host_devices() -> int:
    """XLA:CPU's host devices in this process (starting its CPU client if it has not: jax's,
    or jaxlib's own where jax is not imported)."""
    from ..xla.cpu_client import cpu_backend
    return len(cpu_backend("--engine xla").local_devices())


class DevicesProgram:
    """The module lowered for XLA on `grid`'s devices (or a global program's mesh), made
    once per Executable and grid: compiled here when this process's jax has the devices,
    else by a worker process kept for its runs.  `made_s`: lowering, and XLA's compile
    here or the worker's start and compile; `ops`: the plugin ops served by their kernels
    as FFI targets; `communicators`: those served across the devices; `overrides`: the
    core opcodes whose plugin overrides each device runs."""

    def __init__(self, source_text: str, session, grid, global_devices: tuple[int, bool]):
        from ..hlo.text.printer import module_to_text
        from ..xla.engine import EngineError, lowered, require_host_device
        from ..xla.jaxlib_names import require_jax
        from ..xla.xla_executables import compile_global_on_xla, compile_on_xla_cpu
        from .engine_comms import communicator_ops, override_ops, xla_program
        require_jax("--engine xla")
        require_host_device(session.device)
        t0 = time.perf_counter()
        n, shardy = global_devices if grid.count == 1 else (grid.count, False)
        self.grid, self.devices = grid, n
        self.global_devices = global_devices if grid.count == 1 else None
        whole = self.global_devices is not None
        module = lowered(source_text, session.registry, keep_sharding=whole,
                         communicators=not whole)
        if whole:
            _no_overrides(module, session.registry)
            root = module.entry.root.shape
            self.shapes = [tuple(s.dims) for s in (root.tuple_shapes if root.is_tuple
                                                   else (root,))]
        self.compiled = self.worker = self.comms = None
        if host_devices() >= n:
            self.text, served, self.comms = xla_program(module, session, grid, whole)
            self.ops = [s.op for s in served]
            if whole:
                self.compiled = compile_global_on_xla(self.text, n, shardy, what="--engine xla")
            else:
                self.compiled = compile_on_xla_cpu(self.text, grid.replicas, grid.partitions,
                                                   what="--engine xla")
            self.communicators = communicator_ops(self.comms)
            self.overrides = override_ops(self.comms)
        else:
            if not whole:  # the worker's errors would point at the reprinted lines
                from ..xla.devices_rewrite import plan
                from ..xla.engine import check_plugin_calls
                plan(module, session.registry)
                check_plugin_calls(module, session.registry)
            self.text = module_to_text(module)  # lowered: the worker makes XLA's text
            self.sources = _sources(session.registry, module, n)
            self._start_worker()
        self.made_s = time.perf_counter() - t0
        self.runs = 0

    def _start_worker(self) -> None:
        import weakref

        from .engine_worker import Worker
        self.worker = Worker(self.text, self.grid.replicas, self.grid.partitions,
                             self.sources, global_program=self.global_devices)
        self.ops, self.communicators = self.worker.ops, self.worker.communicators
        self.overrides = self.worker.overrides
        weakref.finalize(self, self.worker.close)  # the worker ends with the executable

    @property
    def here(self) -> bool:
        """Whether XLA runs the devices in this process (else in the worker process)."""
        return self.compiled is not None

    def run(self, per_device: list[list], repeat: int = 1, timeout: float = 60.0):
        """([device][leaf] outputs of the last of `repeat` runs, each run's seconds, the
        program's making on its first run (0 after; a worker started again, its start)).
        `timeout`: how long a communicator call waits for the other devices."""
        from ..xla.xla_executables import run_compiled, run_global_compiled
        from .engine_comms import run_with
        times: list[float] = []
        made_s = self.made_s if not self.runs else 0.0
        self.runs += 1
        if not self.here:
            if not self.worker.alive:  # ended by a failure or a timeout: a new one
                t0 = time.perf_counter()
                self._start_worker()
                made_s += time.perf_counter() - t0
            per, times = self.worker.run(per_device, repeat, timeout)
            return per, times, made_s
        if self.global_devices:
            per = [run_global_compiled(self.compiled, per_device[0], self.shapes,
                                       what="--engine xla", repeat=repeat, times=times)]
        else:
            per = run_with(self.comms, timeout, lambda: run_compiled(
                self.compiled, per_device, repeat=repeat, times=times))
        return per, times, made_s


def _no_overrides(module, registry) -> None:
    """A global program is cut by XLA's SPMD partitioner, which knows nothing of xlaplug's
    calls: a core opcode a plugin overrides there is a one-line error, never XLA's own op
    in the override's place."""
    from ..xla.engine import EngineError
    from ..xla.override_rewrite import overridden
    for _comp, ins, entry in overridden(module, registry):
        raise EngineError(f"{ins.opcode} '{ins.name}': plugin '{entry.plugin.name}' overrides "
                          f"core opcode '{ins.opcode}', which --engine xla does not serve in "
                          "a global program XLA partitions (shard_map as jax prints it); the "
                          "interpreter engine runs the override", line=ins.line,
                          column=ins.column)


def _sources(registry, module, n: int) -> list[str]:
    """The plugin sources a worker loads for the kernels the lowered `module` calls; a
    plugin it cannot load by name (made in Python) is a one-line error saying how to run
    the devices here instead."""
    from ..plugin.attrs import op_name
    from ..xla.override_rewrite import overridden
    sources = []
    calls = [(f"op '{op_name(ins)}'", registry.kernel_for(op_name(ins), "cpu"))
             for comp in module.computations for ins in comp.instructions
             if ins.opcode == "custom-call" and op_name(ins)]
    calls += [(f"its override of '{ins.opcode}'", entry)  # (core opcodes it overrides)
              for _comp, ins, entry in overridden(module, registry)]
    for what, entry in calls:
        if entry is None:
            continue
        plugin = entry.plugin
        if not plugin.source or plugin.source == "<python>":  # (api.Plugin's default)
            raise RunError(
                f"--engine xla: {plural(n, 'device')} run in a worker process (jax here "
                f"has {plural(host_devices(), 'host device')}), which loads plugins from "
                f"their files: plugin '{plugin.name}' ({what}) was made in Python; "
                f"load it from a file (--plugins-dir), or start jax with "
                f"XLA_FLAGS=--xla_force_host_platform_device_count={n}")
        sources.append(plugin.source)
    return list(dict.fromkeys(sources))
