"""`mpiexec -n D xlaplug run M --engine xla`: each rank runs its own device's program on
XLA:CPU, and every collective in it is served by xlaplug's MPI communicator from inside XLA.

The rank's module is the module as read, lowered as on one device but with the plugin ops
whose kernels take a communicator kept (`engine.lowered(communicators=True)`); a copy of it
is rewritten for XLA (mpi_rewrite.py: collectives and communicator kernels become
`xlaplug.mpi.*` typed-FFI calls, replica-id and partition-id constants) and the handler
(ffi/mpi_handler.py) runs the interpreter's kernel of each original instruction, in a
context whose place holds this rank's MpiTransport: a plugin's override of a collective
(or of any opcode, with a kernel that takes a communicator) is that kernel, in the ranks'
one order.  The other overridden instructions are `xlaplug.override` calls
(override_rewrite.py), their kernels run in the same context.  The rewritten module is compiled by
XLA:CPU once per Executable (MpiProgram, kept by DeviceContexts.mpi_engine_program): every
later run, and every one of `--repeat N`, runs that executable, its arguments placed before
the clock.

Everything around the run is the interpreter's over MPI (runtime/multi_run.run_over_mpi):
the ranks agree on the module, grid and options before the first collective; a rank that
fails before its run tells the others; a collective that fails (a timeout, ranks at
different collectives) ends every rank, the one that saw it reporting one line; with
`options.gather` rank 0 gets every device's outputs.  One device per rank: D ranks for D
devices.
"""
from __future__ import annotations

import copy
import time

from ..backends.device import keep_freed_buffers
from ..hlo.errors import HloError, plural
from ..xla.engine import EngineError, lowered, require_host_device, serve_plugin_ops


def run_on_xla_over_mpi(exe, grid, inputs, options, expected, rtol, atol):
    """This rank's device run by XLA:CPU, its collectives over MPI: a RunResult as
    run_paths._over_mpi makes one (rank 0's holds every device with `options.gather`).
    The rank's XLA executable is the Executable's (MpiProgram), made by its first such run."""
    from ..backends.spmd.mpi import mpi_module
    from .multi_run import run_over_mpi, stop_before_run
    from .options import RunResult
    from .outputs import stacked
    from .run_paths import _timings
    world = mpi_module().COMM_WORLD
    rank, ranks = world.Get_rank(), world.Get_size()
    with exe.contexts.lock:  # a kept program serves one run at a time (its binding)
        try:  # (a failure here: the other ranks hear it before their first collective)
            require_host_device(exe.session.device)
            if exe.source_text is None:
                raise EngineError("engine xla runs the module as read: compile it with "
                                  "keep_source=True")
            if grid.count != ranks:
                raise EngineError(
                    f"--engine xla over MPI runs one device per process: the module runs on "
                    f"{plural(grid.count, 'device')} ({plural(grid.replicas, 'replica')} x "
                    f"{plural(grid.partitions, 'partition')}) but mpiexec started "
                    f"{plural(ranks, 'process', 'processes')}: use mpiexec -n {grid.count}")
            args = _inputs(exe, inputs, options, grid, rank)
            spare_the_cores(ranks)
            keep_freed_buffers()  # (once per process: backends/device.py)
            program = exe.contexts.mpi_engine_program(exe, grid, rank)
            ctx = program.context(options)
        except HloError as e:
            stop_before_run(e, options.collective_timeout)
        made_s, program.runs = (program.made_s if not program.runs else 0.0), program.runs + 1
        r = run_over_mpi(program.module, grid, lambda d: args, options=options,
                         contexts=lambda d: ctx, expected=expected, rtol=rtol, atol=atol,
                         execute=program.execute(options.repeat))
    per_device = r["per_device"]
    outputs = per_device[0] if len(per_device) == 1 and not options.gather else \
        stacked(per_device)
    return RunResult(outputs, per_device, _timings(made_s, r["run_times"]), r["run_times"],
                     grid=grid, transport="mpi", rank=r["rank"], devices=r["devices"],
                     mismatches=r["mismatches"], all_ok=r["all_ok"], engine="xla")


def _inputs(exe, inputs, options, grid, rank) -> list:
    from .inputs import device_inputs
    from .run_paths import _own_inputs
    if options.gather:  # every device's inputs given (or drawn): this rank takes its own
        return device_inputs(exe.module, inputs, options, grid.count)[rank]
    return _own_inputs(exe.module, inputs, options, rank)


class MpiProgram:
    """This rank's program, made once per Executable and grid (DeviceContexts.
    mpi_engine_program) -- lowered, rewritten for MPI, compiled by XLA:CPU -- and run by
    every `--engine xla` run under mpiexec, as XLA keeps one executable: `module`, the
    lowered module the ranks agree on (whose groups the transport splits communicators
    for); `text`, the rewritten HLO, its calls bound to the MPI handler's binding `key`
    (held as long as the program: the key is in the compiled text); `made_s`, lowering and
    XLA's compile, in no run's time."""

    def __init__(self, exe, grid, rank):
        import weakref

        from ..xla.xla_executables import compile_on_xla_cpu
        t0 = time.perf_counter()
        self.session = exe.session
        self.text, self.module, self.handler, self.key, self.overrides = \
            _rank_program(exe, grid, rank)
        self.binding = self.handler.runs[self.key]
        # the override kernels' binding (override_rewrite.py), or None
        self.overridden = self.overrides[0].runs[self.overrides[1]] if self.overrides else None
        for h, k in [(self.handler, self.key), *([self.overrides] if self.overrides else [])]:
            weakref.finalize(self, h.unbind, k)  # (the bindings go with it)
        self.compiled = compile_on_xla_cpu(self.text, what="--engine xla")
        self.made_s = time.perf_counter() - t0
        self.runs = 0
        self._contexts: dict[tuple, object] = {}

    def context(self, options):
        """The interpreter context the handler runs the collectives' kernels in, for runs
        as `options` say (made once per executor settings): the binding's from now on."""
        from .executor import ExecContext
        key = tuple(sorted(options.executor_options().items()))
        ctx = self._contexts.get(key)
        if ctx is None:
            ctx = self._contexts[key] = ExecContext("cpu", options.executor_options(),
                                                    overrides=self.session.resolve)
        for binding in (self.binding, self.overridden):
            if binding is None:
                continue
            if binding.ctx is not ctx:  # (the kernels each call resolved are the context's)
                binding.ctx, binding.sites = ctx, {}
            binding.failure = None
        from ..xla.ffi.mpi_sites import disarm
        disarm(self.binding)  # (a run has a transport of its own: sites armed anew)
        return ctx

    def execute(self, repeat: int):
        """execute(ctx, args) for run_over_mpi: `repeat` runs of the compiled program, the
        arguments placed before the first run's clock (xla_executables.run_compiled); a failure
        in a collective is raised as the handler kept it."""
        from ..xla.xla_executables import run_compiled

        def execute(ctx, args):
            times: list[float] = []
            try:
                (outs,) = run_compiled(self.compiled, [list(args)], repeat=repeat, times=times)
            except Exception as e:
                for binding in (self.binding, self.overridden):
                    if binding is not None and binding.failure is not None:
                        raise binding.failure from None
                raise e
            return tuple(outs), times
        return execute


def _rank_program(exe, grid, rank):
    """(HLO text of this rank's program, the lowered module it was made from, the MPI
    handler, the key of the program's binding in it: its context set by each run)."""
    from ..backends.spmd.place import Place
    from ..hlo.text.printer import module_to_text
    from ..xla.jaxlib_names import require_jax
    from ..xla.mpi_rewrite import mpi_handler, rewrite_for_mpi, twins
    from ..xla.override_rewrite import bind_overrides
    require_jax("--engine xla")
    registry = exe.session.registry
    module = lowered(exe.source_text, registry, communicators=True)
    ours = copy.deepcopy(module)
    twin = twins(ours, module)
    handler = mpi_handler()
    key, binding = handler.bind(None, [])
    try:
        served = rewrite_for_mpi(ours, Place(grid, rank), registry, key, handler.sites)
        binding.instructions = [twin[id(ins)] for ins in served]
        serve_plugin_ops(ours, registry)
        # the overrides left (not collectives, no communicator): their context is set by
        # each run (MpiProgram.context)
        overrides = bind_overrides(ours, registry, None, lambda ins: twin.get(id(ins)))
        text = module_to_text(ours)
    except BaseException:
        handler.unbind(key)
        raise
    return text, module, handler, key, overrides


def spare_the_cores(ranks: int) -> None:
    """Where the ranks on this host fill its cores, XLA:CPU runs without its Eigen thread
    pool (`--xla_cpu_multi_thread_eigen=false` in XLA_FLAGS, read when jax starts its CPU
    backend: so only before jax is imported, and never over a setting already there).  The
    pool's idle workers spin on the cores where ranks wait for each other in MPI: measured
    on 2 busy cores, 2 ranks, a 16 MiB all-reduce inside XLA took 47 ms with the pool and
    19 ms without (mpi4py's Allreduce: 12-18 ms)."""
    import os
    import sys
    flags = os.environ.get("XLA_FLAGS", "")
    if "jax" in sys.modules or "xla_cpu_multi_thread_eigen" in flags:
        return
    local = local_ranks(ranks)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if local >= (cores or 1):
        os.environ["XLA_FLAGS"] = f"{flags} --xla_cpu_multi_thread_eigen=false".strip()


def local_ranks(ranks: int) -> int:
    """The ranks on this host, as the launcher says (else all `ranks`)."""
    import os
    return next((int(os.environ[v]) for v in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE",
                                              "PMIX_LOCAL_SIZE") if v in os.environ), ranks)
