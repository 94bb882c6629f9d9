"""XLA:CPU executables shared by the processes of one test session (conftest.py installs it).

Several test files have XLA compile the same programs: check-plugins' decompositions run
by XLA (tests/test_check_plugins_xla.py compiles every bundled decomposition, and
tests/test_lapack_decomposition_edges.py the jax_lapack ones again as `--reference xla`),
0.3 s of CPU each, on whichever xdist worker runs the file.  Here the first compile of a
program writes XLA's serialized executable to a directory of this session, and a later
compile of the same program -- same StableHLO bytes, devices, options, jaxlib and XLA_FLAGS
-- in any worker loads it: the executable XLA made for it, as jax's own compilation cache
does; a worker wanting a program another is compiling waits for it.  Nothing outlives the session (pytest's temporary directory of this run), so every run
compiles each program once; subprocesses (the CLI, MPI ranks) compile as they always do.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
from pathlib import Path


def session_dir(tmp_path_factory) -> Path:
    """A directory every worker of this run shares: under xdist the workers' temporary
    directories sit in one of the run, named by the run's id; `-n 0`: the run's own."""
    base = tmp_path_factory.getbasetemp()
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    d = base.parent / f"xla-executables-{run}" if run else base / "xla-executables"
    d.mkdir(mode=0o700, exist_ok=True)
    return d


def _key(computation, replicas, partitions, platform, shardy, xla_options) -> str:
    import jaxlib
    h = hashlib.sha256(computation if isinstance(computation, bytes) else
                       computation.encode())
    h.update(repr((replicas, partitions, platform, shardy,
                   sorted((xla_options or {}).items()), jaxlib.__version__,
                   os.environ.get("XLA_FLAGS"))).encode())
    return h.hexdigest()[:32]


def install(directory: Path, monkeypatch) -> None:
    """xla_executables._compile through `directory` for the rest of the session."""
    from xlaplug.xla import xla_executables as X
    real = X._compile

    def compile_(computation, replicas, partitions, what, platform="cpu", shardy=None,
                 xla_options=None):
        path = directory / (_key(computation, replicas, partitions, platform, shardy,
                                 xla_options) + ".xla")
        backend, devs, opts = X.compile_setup(replicas, partitions, what, platform, shardy,
                                              xla_options)
        # One compile a program: a worker that wants a program another is compiling waits
        # for it and loads it (the files that share programs run side by side).
        with open(path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if path.is_file():
                return backend.deserialize_executable(path.read_bytes(),
                                                      X.devs_list(what, devs), opts), devs
            exe, devs = real(computation, replicas, partitions, what, platform, shardy,
                             xla_options)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(backend.serialize_executable(exe))
            os.replace(tmp, path)
            return exe, devs
    monkeypatch.setattr(X, "_compile", compile_)
