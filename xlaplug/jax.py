"""JAX functions run by xlaplug, so a custom op is served by a plugin kernel.

    import xlaplug.jax
    swish_x = xlaplug.jax.jit(f, plugins=["plugins"])   # dirs or Plugin objects
    y = swish_x(x)                                       # numpy in, numpy out
    report = xlaplug.jax.check(f, x, plugins=["plugins"])
    xlaplug.jax.register(["plugins"])                    # served inside XLA: jax.jit(f)(x)
    assert report.ok, report

`jit` lowers f with jax (`jax.jit(f, keep_unused=True).lower(*args).as_text(dialect="hlo")`)
once per input signature (the arguments' tree, shapes and dtypes), compiles the HLO with
xlaplug for a session holding the plugins, and runs it on numpy arrays: a
`jax.ffi.ffi_call("acme.swish", ...)` inside f becomes a custom call whose target is the
plugin op, served by its kernel (or its decomposition).  `check` runs f that way and runs the
portable artifact (every plugin op decomposed) on XLA:CPU with the same inputs, and compares.

The seam to the rest of xlaplug is `_Compiled` (module + session); the Python API
(`xlaplug.compile`) can take its place.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np

from .hlo.errors import HloError


class JaxInputError(HloError):
    """An argument xlaplug.jax cannot hand to the lowered module (one line)."""

    def headline(self) -> str:
        return f"error: {self.message}"

    def __str__(self) -> str:
        return self.headline()


def op(name: str, plugins=None, prefer: str | None = None, axis_name=None,
       collective_timeout: float | None = None):
    """The plugin op `name` as a jax function (xla/jax_op.PluginOp); `plugins`: directories
    or Plugin objects beside the bundled ones (as jit takes them).  Here, not in xla/, since
    loading the plugins is the runtime's (load_session) and the bridge sits below it.

    Under mpiexec (more than one rank), an op whose CPU kernel takes a communicator, called
    without `axis_name` and not with prefer="decomposition", runs that kernel over MPI inside
    XLA (xla/jax_mpi.py); `collective_timeout` (seconds, default 60) bounds every wait of
    this process's MPI calls."""
    from .backends.spmd.mpi import launched_by_mpi
    from .runtime.executable import load_session
    from .xla.jax_op import PluginOp, needs_communicator
    from .xla.jaxlib_names import require_jax
    require_jax("xlaplug.jax.op")
    registry = load_session(plugins or ()).registry
    world = None
    if axis_name is None and prefer != "decomposition" and \
            needs_communicator(registry, name) and launched_by_mpi():
        world = _mpi_world(collective_timeout)
    return PluginOp(name, registry, prefer, axis_name, world)


def _mpi_world(timeout: float | None):
    """This process's MpiWorld, made by the first op that needs it (every rank makes it at
    the same point of the same program: the transport's start is collective) and kept on
    the MPI handler, as process-wide as XLA's FFI targets."""
    from .backends.spmd.mpi import MpiTransport
    from .plugin.session import Session
    from .runtime.executor import ExecContext
    from .xla.jax_mpi import MpiWorld
    from .xla.mpi_rewrite import mpi_handler
    handler = mpi_handler()
    if handler.jax_world is None:
        transport = MpiTransport(60.0 if timeout is None else float(timeout))
        transport.prepare([[tuple(range(transport.size))]])
        handler.jax_world = MpiWorld(handler, transport, lambda registry: ExecContext(
            "cpu", {}, overrides=Session(registry, prefer="kernel").resolve))
    elif timeout is not None:
        handler.jax_world.set_timeout(timeout)
    return handler.jax_world


def _jax():
    from .xla.jaxlib_names import require_jax
    require_jax("xlaplug.jax")
    import jax
    return jax


@dataclass
class _Compiled:
    text: str            # the HLO jax lowered
    module: object       # after xlaplug's passes
    out_tree: object
    param_dtypes: list
    exe: object = None   # the Executable (source kept) that runs it over MPI
    xla: object = None   # engine="xla": its on_xla.EngineProgram, compiled on the first call


def _arrays(args, jax) -> tuple[list[np.ndarray], object]:
    leaves, tree = jax.tree_util.tree_flatten(args)
    arrays = []
    for k, x in enumerate(leaves):
        a = np.asarray(x)
        if a.dtype.kind in "OUSMmV" and not a.dtype.type.__module__.startswith("ml_dtypes"):
            raise JaxInputError(f"argument leaf {k}: dtype {a.dtype} is not an array type jax "
                                f"lowers (give numeric or bool arrays)")
        arrays.append(a)
    return arrays, tree


def _lower(f, args, session, jax) -> _Compiled:
    from .runtime.executable import compile as compile_hlo
    name = f"<xlaplug.jax {getattr(f, '__name__', 'f')}>"
    with _ops_as_custom_calls():
        lowered = jax.jit(f, keep_unused=True).lower(*args)
    text = lowered.as_text(dialect="hlo")
    try:
        module = compile_hlo(text, session=session, name=name).module
    except HloError as e:
        raise e.located(name, text) from None
    return _Compiled(text, module, lowered.out_tree,
                     [p.shape.dtype for p in module.entry.parameters])


@contextlib.contextmanager
def _ops_as_custom_calls():
    """Under mpiexec, xlaplug.jax.op's MPI calls lower as their ops' own custom calls while
    xlaplug lowers a function to run it itself (xla/jax_mpi.py's `plain`)."""
    from .backends.spmd.mpi import launched_by_mpi
    world = None
    if launched_by_mpi():
        from .xla.mpi_rewrite import mpi_handler
        world = mpi_handler().jax_world
    if world is None:
        yield
        return
    world.plain += 1
    try:
        yield
    finally:
        world.plain -= 1


def _fit(arrays: list[np.ndarray], compiled: _Compiled) -> list[np.ndarray]:
    """The arguments in the dtypes jax lowered them to (f64 -> f32 without x64, as jax.jit
    does); a count that does not fit is an error."""
    if len(arrays) != len(compiled.param_dtypes):
        raise JaxInputError(f"{len(arrays)} argument leaves, the lowered module takes "
                            f"{len(compiled.param_dtypes)}")
    return [a if a.dtype == dt else a.astype(dt) for a, dt in zip(arrays, compiled.param_dtypes)]


class Jitted:
    """f compiled by xlaplug, per input signature; call it on numpy (or jax) arrays."""

    def __init__(self, f, session, engine: str = "interpreter"):
        self.f, self.session, self.engine = f, session, engine
        self._cache: dict = {}

    def compiled(self, *args) -> _Compiled:
        jax = _jax()
        arrays, tree = _arrays(args, jax)
        key = (tree, tuple((a.shape, a.dtype.str) for a in arrays))
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = _lower(self.f, args, self.session, jax)
        return hit

    def run_flat(self, *args) -> tuple[list[np.ndarray], list[np.ndarray], _Compiled]:
        """(inputs as run, output leaves, compiled entry)."""
        from .runtime.runner import execute
        jax = _jax()
        compiled = self.compiled(*args)
        arrays = _fit(_arrays(args, jax)[0], compiled)
        if self.engine == "xla":  # XLA runs it, plugin kernels as FFI handlers (xla/engine.py)
            from .backends.spmd.mpi import launched_by_mpi
            from .runtime.on_xla import EngineProgram
            if launched_by_mpi():
                return arrays, self._over_mpi(compiled, arrays), compiled
            if compiled.xla is None:
                compiled.xla = EngineProgram(compiled.text, self.session)
            return arrays, compiled.xla.run(arrays).outputs, compiled
        return arrays, execute(compiled.module, arrays, self.session).outputs, compiled

    def _over_mpi(self, compiled: _Compiled, arrays: list) -> list:
        """Under mpiexec: this rank's device of a module on one device per rank, its
        collectives over MPI (`mpiexec -n D xlaplug run M --engine xla`)."""
        from .backends.spmd.mpi import mpi_module
        from .runtime.executable import compile as compile_hlo
        if compiled.exe is None:
            compiled.exe = compile_hlo(compiled.text, session=self.session, keep_source=True,
                                       name=f"<xlaplug.jax {getattr(self.f, '__name__', 'f')}>")
        ranks = mpi_module().COMM_WORLD.Get_size()
        return list(compiled.exe.run(*arrays, engine="xla", replicas=ranks).outputs)

    def __call__(self, *args):
        jax = _jax()
        _, outs, compiled = self.run_flat(*args)
        return jax.tree_util.tree_unflatten(compiled.out_tree, outs)

    @property
    def cache_size(self) -> int:
        return len(self._cache)


def jit(f, *, plugins=(), device: str = "cpu", prefer: str = "kernel",
        engine: str = "interpreter") -> Jitted:
    """f run by xlaplug with `plugins` (directories or Plugin objects, beside the bundled
    ones) on `device`; lowered and compiled once per input signature.  `engine="xla"`:
    XLA:CPU runs it, the plugin kernels served as FFI handlers (`run --engine xla`)."""
    _jax()
    from .runtime.executable import load_session
    if engine not in ("interpreter", "xla"):
        raise JaxInputError(f"engine must be 'interpreter' or 'xla', got {engine!r}")
    return Jitted(f, load_session(plugins, device=device, prefer=prefer), engine)


@dataclass
class Comparison:
    """xlaplug (plugin kernels) against XLA:CPU (decompositions) for one call of f."""
    ok: bool
    outputs: list          # stats.OutputDiff per output leaf
    ours: list             # output leaves, xlaplug
    xla: list              # output leaves, XLA:CPU
    portable_hlo: str      # what XLA ran

    def __str__(self) -> str:
        import io

        from rich.console import Console

        from .cli.reference_report import diff_table
        buf = io.StringIO()
        Console(file=buf, width=100, no_color=True).print(diff_table(self.outputs))
        return buf.getvalue()


def check(f, *args, plugins=(), device: str = "cpu", rtol=None, atol=None) -> Comparison:
    """Run f(*args) on xlaplug with the plugin kernels and, decomposed, on XLA:CPU; compare
    every output (runner.compare's tolerances; `rtol` / `atol` override)."""
    from .hlo.text.parser import parse_module
    from .runtime.on_xla import diff_devices
    from .xla.reference import check_arguments, portable_text, run_reference
    jitted = jit(f, plugins=plugins, device=device)
    arrays, ours, compiled = jitted.run_flat(*args)
    fresh = parse_module(compiled.text, "<xlaplug.jax check>")
    check_arguments(fresh)
    text = portable_text(fresh, jitted.session.registry)
    (theirs,) = run_reference(text, [arrays])
    diffs = diff_devices([ours], [theirs], rtol, atol)
    return Comparison(all(d.ok for d in diffs), diffs, ours, theirs, text)


def register(plugins=None, *, strict: bool = False):
    """Serve every loaded plugin op that has a CPU kernel inside XLA: an FFI target under
    the op's own name, so `jax.ffi.ffi_call("acme.swish", ...)` in plain `jax.jit` code runs
    the kernel.  `plugins` as for `jit` (None: the bundled ones, XLAPLUG_PLUGIN_PATH and the
    entry points).  Returns an xlaplug.xla.ffi.Report: how each op is served."""
    _jax()
    from .runtime.executable import load_session
    from .xla.ffi import register_registry
    return register_registry(load_session(plugins or (), strict=strict).registry)
