"""What a run is asked to do (`RunOptions`) and what it gives back (`RunResult`): the one
vocabulary of `Executable.run`, whoever calls it -- the CLI, `exe(*arrays)`, `xlaplug.jax`,
`--reference xla`, or an MPI rank -- so an option means the same thing everywhere."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from ..hlo.errors import HloError


class RunError(HloError):
    """A user-facing failure of a run (bad inputs, guard tripped, kernel failure)."""


@dataclass(frozen=True)
class RunOptions:
    """seed: the draws of inputs not given (and of rng ops; None: 0) -- with inputs given,
    a parameter they lack is drawn only when a seed is given, else it is an error; cast:
    inputs whose dtype differs from their parameter's are converted (else an error); repeat: runs after one setup
    (the timings are their median); replicas / partitions: the device grid (None: the
    module header's); collective_timeout: seconds a collective waits for the others;
    max_memory: bytes of buffers a run may hold (None: the memory available);
    max_while_iterations: a while loop past it is an error; interpret: every instruction
    its own kernel (no compiled fusions or loops); profile: time every thunk (one device);
    trace: record every kernel call of every device and run as a Chrome trace
    (RunResult.trace; runtime/timeline.py);
    blas_threads: the BLAS libraries' threads, set once when a run starts and restored when
    it ends (None: one per 2^24 flops of the module's largest product, at most the cores
    divided among the devices running at once and the library's own count:
    backends/cpu/blas_threads.py);
    blas_yield: that derived count is cut, when each run starts, to the cores other
    processes' runnable threads leave free -- faster on a busy machine, but OpenBLAS's bits
    depend on its thread count, so products may then round differently run to run;
    blas_pool: a run on one device computes its large f32/f64 products on
    numba's threads, one BLAS thread each, with numpy's OpenBLAS on one thread for the run
    (backends/cpu/pool_gemm.py): their bits do not depend on the thread count (but for
    products of few rows), they flush subnormals throughout as XLA does, and OpenBLAS's
    team never spins between products -- faster on a busy machine, no faster on a quiet
    one (numba's threads sleep between calls, each gemm packs its own operand);
    loop_teams: how many of numba's threads each parallel kernel (fused loops, row loops)
    takes -- "cost": as many as XLA:CPU's parallel task assignment gives it from its flops
    and bytes (memory-bound kernels at most ceil(sqrt(cores)); backends/cpu/team_size.py),
    "all": every thread;
    device_threads: the threads that carry the devices of a run in this process (None: as
    runtime/spmd/runner.devices_for decides from the module; 1: the devices take turns on
    one thread as fibers, their large products computed together on numba's threads,
    runtime/spmd/gang.py -- no GIL hand-offs between device threads);
    gather: under MPI, rank 0's result holds every device's outputs (what the CLI prints);
    engine: who runs it -- "interpreter" (xlaplug's) or "xla" (XLA:CPU through jaxlib, plugin
    kernels served as FFI handlers: runtime/on_xla.py, xla/engine.py)."""
    seed: int | None = None
    cast: bool = False
    repeat: int = 1
    replicas: int | None = None
    partitions: int | None = None
    collective_timeout: float = 60.0
    max_memory: int | None = None
    max_while_iterations: int | None = None
    interpret: bool = False
    profile: bool = False
    trace: bool = False
    blas_threads: int | None = None
    blas_yield: bool = False
    blas_pool: bool = False
    loop_teams: str = "cost"
    device_threads: int | None = None
    gather: bool = False
    engine: str = "interpreter"

    def __post_init__(self):
        if self.seed is not None and (not isinstance(self.seed, int) or self.seed < 0):
            raise RunError(f"seed: must be an integer 0 or more, got {self.seed!r}")
        if not isinstance(self.repeat, int) or self.repeat < 1:
            raise RunError(f"repeat: must be 1 or more, got {self.repeat}")
        for name in ("replicas", "partitions", "blas_threads", "device_threads"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v < 1):
                raise RunError(f"{name}: must be at least 1, got {v}")
        if self.loop_teams not in ("cost", "all"):
            raise RunError(f"loop_teams: must be 'cost' or 'all', got {self.loop_teams!r}")
        if self.engine not in ("interpreter", "xla"):
            raise RunError(f"engine: must be 'interpreter' or 'xla', got {self.engine!r}")
        if self.engine == "xla" and (self.profile or self.interpret or self.trace):
            raise RunError("engine xla: runs without profile, trace or interpret")
        if not (self.collective_timeout > 0 and math.isfinite(self.collective_timeout)):
            raise RunError(f"collective_timeout: must be a positive number of seconds, got "
                           f"{self.collective_timeout}")
        if self.max_memory is not None and self.max_memory < 1:
            raise RunError(f"max_memory: must be a positive number of bytes, got "
                           f"{self.max_memory}")
        if self.max_while_iterations is not None and self.max_while_iterations < 0:
            raise RunError(f"max_while_iterations: must be 0 or more, got "
                           f"{self.max_while_iterations}")

    @classmethod
    def of(cls, options: "RunOptions | None" = None, **changes) -> "RunOptions":
        """`options` with `changes` (field names; an unknown one is an error naming it)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise RunError(f"unknown run option {unknown[0]!r} (known: {', '.join(sorted(known))})")
        base = options if options is not None else cls()
        return cls(**{**{f.name: getattr(base, f.name) for f in fields(cls)}, **changes})

    @property
    def draw_seed(self) -> int:
        """The seed of the draws (inputs not given, rng ops): 0 when none was given."""
        return self.seed if self.seed is not None else 0

    def executor_options(self) -> dict:
        """The executor's settings for this run (ExecContext's `options`)."""
        out = {"max_while_iterations": self.max_while_iterations, "seed": self.draw_seed,
               "loop_teams": self.loop_teams}
        if self.interpret:  # no compiled fusions or while loops: every instruction its own kernel
            out.update(fusion_min_elements=1 << 62, interpret_loops=True)
        return out


@dataclass
class Mismatch:
    leaf: str
    message: str


@dataclass
class RunResult:
    """outputs: the output leaves (out0, out1, ...) of the devices this process ran -- on
    several, stacked on a leading device axis (under MPI with `gather`, rank 0 holds every
    device's); per_device: [device][leaf]; timings: parse/compile/run seconds (run: the
    median of `run_times`); peak_bytes: the buffers one device holds at most; mismatches:
    against `expected` (None when nothing was compared); all_ok: no mismatch on any rank;
    trace: with RunOptions(trace=True), the run as a Chrome trace object
    ({"traceEvents": [...], ...}, ready for json.dump) -- under MPI with `gather`, rank 0's
    holds every rank's events, else each rank's its own."""
    outputs: list[np.ndarray]
    per_device: list[list[np.ndarray]]
    timings: dict[str, float]
    run_times: list[float] = field(default_factory=list)
    peak_bytes: int = 0
    grid: Any = None
    engine: str = "interpreter"
    # local (one device), threads, mpi; xla / xla-worker: XLA's host devices in this
    # process / in the engine's worker process (engine_devices.py)
    transport: str = "local"
    rank: int = 0
    devices: tuple[int, ...] = (0,)   # the device ids this process ran
    profile: Any = None               # a runtime.profiler.Profiler when asked for
    trace: dict | None = None         # the Chrome trace object when asked for
    mismatches: list[Mismatch] | None = None
    all_ok: bool = True
