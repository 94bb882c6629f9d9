"""The Python API: `xlaplug.compile(...)` gives an `Executable`; calling it runs the module.

    import xlaplug
    exe = xlaplug.compile("examples/mlp.hlo")          # a path, or HLO text
    (y,) = exe(x, w1, b1, w2, b2)                       # numpy (ml_dtypes) arrays in and out
    print(exe.hlo)                                       # the module after the passes

The CLI's `compile` and `run` are a layer over this module: every error is an
`xlaplug.HloError` whose `str()` is the message the CLI prints.
"""
from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..hlo.errors import HloError, plural
from ..hlo.ir import Module
from .options import RunError, RunOptions, RunResult
from .outputs import tolerance

# A run's options when none are given (RunOptions is frozen: a value, shared by every call).
DEFAULT_OPTIONS = RunOptions()


def load_session(plugins: Iterable = (), *, device: str = "cpu", prefer: str = "kernel",
                 strict: bool = False, bundled: bool = True, warn: bool = True,
                 no_plugins: bool = False):
    """A plugin.Session: the bundled plugins (unless `bundled=False`), the plugin
    directories and `Plugin` objects in `plugins`, XLAPLUG_PLUGIN_PATH and the entry points.
    A plugin that fails to load is a warning (an error with `strict`)."""
    from ..plugin import Plugin, load_plugins
    from ..plugin.session import Session
    from ..backends.backend import backend_for
    backend = backend_for(device)  # an unknown name: a one-line error naming the known ones
    if prefer not in ("kernel", "decomposition"):
        raise HloError(f"prefer must be 'kernel' or 'decomposition', got {prefer!r}")
    items = [plugins] if isinstance(plugins, (str, os.PathLike, Plugin)) else list(plugins)
    dirs = [p for p in items if isinstance(p, (str, os.PathLike))]
    objects = [p for p in items if isinstance(p, Plugin)]
    other = [p for p in items if not isinstance(p, (str, os.PathLike, Plugin))]
    if other:
        raise HloError(f"plugins: expected plugin directories or Plugin objects, got "
                       f"{type(other[0]).__name__}")
    backend.require()
    reg = load_plugins(dirs, objects=objects, bundled=bundled, strict=strict,
                       no_plugins=no_plugins)
    if warn:
        for rec in reg.records:
            if rec.error:
                warnings.warn(f"plugin {rec.source} not loaded: {rec.error}", stacklevel=2)
    return Session(reg, device=device, prefer=prefer, strict=strict)


@dataclass(frozen=True)
class ServedOp:
    """How the plugins served one op of the module: `via` is "kernel" (on `device`) or
    "decomposition" (lowered to core HLO by the passes); `count` instructions."""
    op: str
    plugin: str
    via: str
    device: str
    count: int


@dataclass
class Executable:
    """A module compiled for one session (its plugins, device and preference)."""
    module: Module
    session: Any
    pass_manager: Any
    served: list[ServedOp] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    # The module's text as read, before the passes (compile(..., keep_source=True); its
    # header as --replicas/--partitions set it): what `--reference xla` and `--engine xla`
    # read, so their errors' positions are the file's.
    source_text: str | None = None
    # (name, start, end) perf_counter readings of parsing and the pass pipeline: the host's
    # slices in a run's trace (RunOptions.trace).
    phases: list = field(default_factory=list)
    # The options of a call, and of a run given no `options=` (its keywords change them):
    # compile(..., engine="xla") makes XLA run every such call.
    run_options: RunOptions = DEFAULT_OPTIONS
    _thunks: Any = None
    _contexts: Any = field(default=None, repr=False)

    @property
    def hlo(self) -> str:
        """The module after the passes, as canonical HLO text XLA reads back."""
        from ..hlo.text.printer import module_to_text
        return module_to_text(self.module)

    @property
    def thunks(self):
        """The entry computation's thunk sequence (kernels resolved as a run resolves them,
        buffer assignment included); `thunks_text()` prints it."""
        if self._thunks is None:
            from .executor import ExecContext
            ctx = ExecContext(self.session.device, overrides=self.session.resolve)
            self._thunks = ctx.sequence(self.module.entry)
        return self._thunks

    def thunks_text(self) -> str:
        from .thunks import thunks_text
        return thunks_text(self.thunks)

    @property
    def plugins(self) -> list[ServedOp]:
        """What served each plugin op and core-opcode override of the module."""
        return list(self.served)

    @property
    def grid(self):
        """The devices the module runs on (replicas x partitions, from its header)."""
        from ..backends.spmd.groups import DeviceGrid
        return DeviceGrid.of_module(self.module)

    @property
    def num_devices(self) -> int:
        return self.grid.count

    def __call__(self, *args) -> tuple:
        """Run on `args` (one array per parameter); the output leaves, depth-first through
        tuples.  On D > 1 devices each argument is the parameter's own shape (every device
        gets it) or stacked on a new leading axis of length D, and so are the outputs.
        Under mpiexec, the arguments and outputs are this rank's devices'."""
        got = self.contexts.call(args, self.run_options)  # numpy arrays as the module takes
        return got if got is not None else tuple(self.run(*args).outputs)

    def run(self, *args, inputs: dict | None = None, options: RunOptions | None = None,
            expected: dict | None = None, rtol: float | None = None, atol: float | None = None,
            progress=None, **changes) -> RunResult:
        """Run with positional `args`, or `inputs` as `{"in0": ..., ...}` with the missing
        parameters drawn at random from the seed (what `xlaplug run --inputs` does), as
        `options` (a RunOptions; or its fields as keywords, changing the executable's
        `run_options`) say: on one device, the module's
        devices in this process, or -- under mpiexec -- this rank's devices, meeting the
        other ranks at every collective.  `expected`: `{"out0": ...}` to compare with
        (`rtol`/`atol`: None, the dtype's default); RunResult.mismatches lists what differs.
        `progress`: called with (runs done, runs) after each of `options.repeat` runs."""
        if options is None and not changes:
            options = self.run_options  # one object: what a call keeps is found by identity
        else:
            options = RunOptions.of(self.run_options if options is None else options,
                                    **changes)
        if rtol is not None or atol is not None:
            rtol, atol = tolerance("rtol", rtol), tolerance("atol", atol)
        params = self.module.entry.parameters
        if args:
            if inputs is not None:
                raise RunError("give the arguments positionally or as inputs=, not both")
            if len(args) != len(params):
                raise RunError(f"module '{self.module.name}' takes "
                               f"{plural(len(params), 'argument')}, got {len(args)}")
            inputs = {f"in{p.parameter_number}": a for p, a in zip(params, args)}
        elif inputs is not None and not isinstance(inputs, dict):
            raise RunError(f"inputs: expected a dict of in0, in1, ... arrays, got "
                           f"{type(inputs).__name__}")
        # Imported here: `compile` alone (the CLI's compile, a module only printed) never
        # loads the run path (its devices, MPI and statistics: 15 ms).
        from .run_paths import run_executable
        return run_executable(self, inputs, options, expected, rtol, atol, progress)

    @property
    def contexts(self):
        """What the executable keeps between runs, per device: run contexts and rng state
        (device_contexts.DeviceContexts)."""
        if self._contexts is None:
            from .device_contexts import DeviceContexts
            self._contexts = DeviceContexts(self.module, self.session)
        return self._contexts

    def prepared(self, options: RunOptions):
        """The one-device context for `options` (runner.Prepared), made on first use and
        kept: its thunk sequence and kernels serve every later call."""
        return self.contexts.prepared(options)


def compile(source, *, plugins: Iterable = (), device: str = "cpu", passes: str | None = None,
            decompose_all: bool = False, prefer: str = "kernel", strict: bool = False,
            bundled_plugins: bool = True, session=None, dump_dir: str | None = None,
            verify_each: bool = False, keep_source: bool = False,
            name: str = "<string>", replicas: int | None = None,
            partitions: int | None = None, excess_precision: bool = True,
            engine: str = "interpreter") -> Executable:
    """Parse, verify and compile `source` (a path, `-` for standard input, or HLO text)
    with the plugins in `plugins` (directories or `Plugin` objects, beside the bundled
    ones), for `device`.  `passes`: a pipeline spec as `--passes` takes it (None: the
    default pipeline; "none": no passes).  `decompose_all`: every plugin op lowered to core
    HLO (the portable artifact).  `session`: a ready plugin.Session instead of `plugins`,
    `device`, `prefer` and `strict`.  `keep_source`: keep the module's text as read in
    `source_text`.  `name`: how errors in HLO text given as a string name it.
    `replicas` / `partitions`: the devices the module runs on, when not its header's: set
    before any rewrite, so decompositions (`b.num_devices`) and runs see them.
    `excess_precision`: bf16 results kept in f32 where XLA:CPU keeps them by default (the
    excess-precision pass); False: every bf16 result rounded as the HLO states.
    `engine`: who runs the executable's calls and runs ("xla": XLA:CPU, its plugin kernels
    as FFI handlers, as `run --engine xla`; the module as read is kept for it) -- a run
    given `engine=` or `options=` runs as they say."""
    from .driver import compile_module, load_source
    if engine not in ("interpreter", "xla"):
        raise HloError(f"engine: must be 'interpreter' or 'xla', got {engine!r}")
    keep_source = keep_source or engine == "xla"
    if session is None:
        session = load_session(plugins, device=device,
                               prefer="decomposition" if decompose_all else prefer,
                               strict=strict, bundled=bundled_plugins)
    if engine == "xla":
        from ..backends.backend import backend_for
        if not backend_for(session.device).on_host:  # XLA:CPU hands kernels host buffers
            raise HloError(f"engine xla runs on cpu; device {session.device} is not served "
                           "by it")
    t0 = time.perf_counter()
    module, text = load_source(str(source)) if _is_path(source) else \
        load_source(None, source, name)
    _set_devices(module, replicas, partitions)
    source_text = _as_read(text, module, replicas, partitions) if keep_source else None
    t1 = time.perf_counter()
    before = _plugin_ops(module, session)
    pm = compile_module(module, session, passes, dump_dir=dump_dir, verify_each=verify_each,
                        decompose_all=decompose_all, excess_precision=excess_precision,
                        verified=replicas is None and partitions is None)
    # No pass ran, nothing changed: the module's ops are those counted before (a second
    # walk over a 20,000-instruction module is 1% of `compile --passes none`).
    after = _plugin_ops(module, session) if pm.pipeline else before
    served = []
    for (op, plugin), n in before.items():
        kept = min(after.get((op, plugin), 0), n)  # what the passes left runs on a kernel
        served += [ServedOp(op, plugin, via, session.device, k)
                   for via, k in (("kernel", kept), ("decomposition", n - kept)) if k]
    t2 = time.perf_counter()
    return Executable(module, session, pm, served, {"parse_s": t1 - t0, "pipeline_s": t2 - t1},
                      source_text, phases=[("parse", t0, t1), ("passes", t1, t2)],
                      run_options=DEFAULT_OPTIONS if engine == "interpreter" else
                      RunOptions(engine=engine))


def _set_devices(module: Module, replicas: int | None, partitions: int | None) -> None:
    """The run's device grid written into the module's header (`replica_count=`,
    `num_partitions=`), where the passes and the runtime read it."""
    for key, value in (("replica_count", replicas), ("num_partitions", partitions)):
        if value is None:
            continue
        if not isinstance(value, int) or value < 1:
            raise HloError(f"{key.replace('_count', 's').replace('num_', '')}: must be at "
                           f"least 1, got {value}")
        module.attrs[key] = value


def _as_read(text: str, module: Module, replicas, partitions) -> str:
    """The module's text as read -- so the engine's errors point at the user's lines --
    its header line made the module's where `replicas` / `partitions` changed it (the
    other lines as they are); the module reprinted where no header line is found."""
    import re
    if replicas is None and partitions is None:
        return text
    from ..hlo.text.printer import module_header, module_to_text
    m = re.search(r"^[ \t]*HloModule\b[^\n]*", text, re.M)
    if m is None:
        return module_to_text(module)
    return text[:m.start()] + module_header(module) + text[m.end():]


def _is_path(source) -> bool:
    if isinstance(source, os.PathLike):
        return True
    if not isinstance(source, str):
        raise HloError(f"compile: expected a path or HLO text, got {type(source).__name__}")
    # HLO text has a newline or braces; a file name has neither.
    return "\n" not in source and "{" not in source


def _plugin_ops(module: Module, session) -> dict:
    """{(op, plugin name): instruction count} of the custom ops the session's plugins
    provide and the core opcodes they override on its device, across the module."""
    from ..plugin.attrs import op_name
    reg, out = session.registry, {}
    # Only these opcodes can count: the two a plugin op is written as, and those with a
    # plugin kernel on the device (most instructions are skipped unread).
    counted = {"custom-call", "call"} | {op for op, d in reg.kernels if d == session.device}
    for comp in module.computations:
        for ins in comp.instructions:
            if ins.opcode not in counted:
                continue
            name = op_name(ins)
            if name is None:
                entry = reg.kernel_for(ins.opcode, session.device)
                key = (ins.opcode, entry.plugin.name) if entry is not None else None
            else:
                entry = (reg.kernel_for(name, session.device) or reg.decompositions.get(name)
                         or reg.shapes.get(name))
                key = (name, entry.plugin.name) if entry is not None else None
            if key is not None:
                out[key] = out.get(key, 0) + 1
    return out
