"""`--engine xla` on D host devices in a subprocess: jax fixes its host device count when its
CPU backend starts, so where this process's jax has fewer devices than the module runs on,
a worker process started with `--xla_force_host_platform_device_count=D` runs it
(runtime/engine_devices.py decides; devices.py is `--reference xla`'s counterpart).  The
worker is kept: it loads the plugins, registers their kernels and compiles the module once,
then runs it as often as asked, as an executable kept in this process would.

    python -m xlaplug.runtime.engine_worker    (requests on stdin, replies on stdout)

Every message is an npz archive, prefixed by its length (8 bytes, little-endian).  The
first request sets the program up: `text` (the module lowered for the engine, its plugin
ops still custom calls), `grid` ([R, P]), `global` ([devices, shardy], a global program;
absent for a per-device one), `sources` (JSON: the plugin sources -- files, package
directories, `entry point NAME` -- whose kernels the module calls); the worker makes XLA's
program of it as the parent would (engine_comms.xla_program) and replies `made_s` (plugins
loaded, kernels registered, XLA's compile), `ops`, `communicators` and `overrides` (JSON: the
ops served as FFI targets, those served across the devices, and the core opcodes whose
overrides each device runs).  Each later request is a run:
`repeat`, `timeout` (a communicator call's wait for the other devices), `nargs`, `arg_k_d`
and `dtype_k` (argument k of device d; one device, d = 0, for a global program); its reply
`out_j_d` and `dtype_j` (the last run's outputs) and `times` (each run's seconds).  Any reply may be `error` (one line) instead;
the worker goes on after a failed run.  It ends when its stdin closes.
"""
from __future__ import annotations

import io
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from ..xla.devices import _raw, _typed


class _Program:
    """The worker's side: the program set up by the first request, run by the others."""

    def __init__(self, setup):
        from ..backends.spmd.groups import DeviceGrid
        from ..hlo.text.parser import parse_module
        from ..plugin.loader import load_sources
        from ..plugin.session import Session
        from ..xla.xla_executables import compile_global_on_xla, compile_on_xla_cpu
        from .engine_comms import communicator_ops, override_ops, xla_program
        t0 = time.perf_counter()
        session = Session(load_sources(json.loads(str(setup["sources"]))))
        module = parse_module(str(setup["text"]), "<xla engine>")
        self.grid = DeviceGrid(*(int(v) for v in setup["grid"]))
        self.whole = "global" in setup
        text, served, self.comms = xla_program(module, session, self.grid, self.whole)
        self.ops = [s.op for s in served]
        self.communicators = communicator_ops(self.comms)
        self.overrides = override_ops(self.comms)
        if self.whole:
            n, shardy = (int(v) for v in setup["global"])
            self.compiled = compile_global_on_xla(text, n, bool(shardy), what="--engine xla")
            root = module.entry.root.shape
            self.shapes = [tuple(s.dims) for s in (root.tuple_shapes if root.is_tuple
                                                   else (root,))]
        else:
            self.compiled = compile_on_xla_cpu(text, self.grid.replicas, self.grid.partitions,
                                               what="--engine xla")
        self.made_s = time.perf_counter() - t0

    def run(self, req) -> dict:
        from ..xla.xla_executables import run_compiled, run_global_compiled
        from .engine_comms import run_with
        nargs, repeat = int(req["nargs"]), int(req["repeat"])
        devices = 1 if self.whole else self.grid.count
        args = [[_typed(req[f"arg_{k}_{d}"], str(req[f"dtype_{k}"])) for k in range(nargs)]
                for d in range(devices)]
        times: list[float] = []
        if self.whole:
            per = [run_global_compiled(self.compiled, args[0], self.shapes,
                                       what="--engine xla", repeat=repeat, times=times)]
        else:
            per = run_with(self.comms, float(req["timeout"]), lambda: run_compiled(
                self.compiled, args, repeat=repeat, times=times))
        out = {"times": np.array(times)}
        for d, leaves in enumerate(per):
            for j, v in enumerate(leaves):
                out[f"out_{j}_{d}"], out[f"dtype_{j}"] = _raw(v)
        return out


def _answer(make) -> dict:
    from ..hlo.errors import HloError, one_line
    try:
        return make()
    except HloError as e:
        return {"error": np.array(one_line(e.message))}
    except Exception as e:  # noqa: BLE001 - reported to the parent as its one line
        said = getattr(e, "message", None)  # (a DeviceError: "device D: ...")
        return {"error": np.array(one_line(said or f"{type(e).__name__}: {e}"))}


def _pack(entries: dict) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **entries)
    data = buf.getvalue()
    return len(data).to_bytes(8, "little") + data


def _read(fd: int, n: int, deadline: float | None) -> bytes | None:
    """Exactly `n` bytes from `fd` (None at its end); TimeoutError past `deadline`."""
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
        chunk = os.read(fd, min(n - got, 1 << 24))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _unpack(fd: int, deadline: float | None = None):
    head = _read(fd, 8, deadline)
    body = head and _read(fd, int.from_bytes(head, "little"), deadline)
    return None if body is None else np.load(io.BytesIO(body), allow_pickle=False)


def main() -> None:
    # Replies go on a private copy of stdout: whatever a plugin or XLA prints goes to stderr.
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    setup = _unpack(0)
    if setup is None:
        return
    program = None

    def made():
        nonlocal program
        program = _Program(setup)
        return {"made_s": np.array(program.made_s), "ops": np.array(json.dumps(program.ops)),
                "communicators": np.array(json.dumps(program.communicators)),
                "overrides": np.array(json.dumps(program.overrides))}
    reply = _answer(made)
    while True:
        replies.write(_pack(reply))
        replies.flush()
        if program is None:
            return
        req = _unpack(0)
        if req is None:
            return
        reply = _answer(lambda: program.run(req))


class Worker:
    """The parent's side: a worker process on `n` host devices holding one program."""

    def __init__(self, text: str, replicas: int, partitions: int, sources: list[str],
                 global_program: tuple[int, bool] | None = None, timeout: float = 600):
        from ..xla.jaxlib_names import require_jax
        require_jax("--engine xla")
        self.n = global_program[0] if global_program else replicas * partitions
        self.timeout, self.lock = timeout, threading.Lock()
        env = dict(os.environ)
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                            f" --xla_force_host_platform_device_count={self.n}").strip()
        env["JAX_PLATFORMS"] = "cpu"
        # the worker imports this xlaplug, wherever this process found it (a checkout,
        # not an installed copy)
        here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "xlaplug.runtime.engine_worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, env=env)
        setup = {"text": np.array(text), "grid": np.array([replicas, partitions]),
                 "sources": np.array(json.dumps(sources))}
        if global_program:
            setup["global"] = np.array([global_program[0], int(global_program[1])])
        try:
            made = self._ask(setup)
            self.made_s = float(made["made_s"])
            self.ops = json.loads(str(made["ops"]))
            self.communicators = json.loads(str(made["communicators"]))
            self.overrides = json.loads(str(made["overrides"]))
        except BaseException:
            self.close()
            raise

    def run(self, per_device: list[list[np.ndarray]], repeat: int = 1, timeout: float = 60.0
            ) -> tuple[list[list[np.ndarray]], list[float]]:
        """([device][leaf] outputs of the last of `repeat` runs, each run's seconds);
        `timeout`: a communicator call's wait for the other devices."""
        req = {"repeat": np.array(repeat), "nargs": np.array(len(per_device[0])),
               "timeout": np.array(float(timeout))}
        for d, args in enumerate(per_device):
            for k, a in enumerate(args):
                req[f"arg_{k}_{d}"], req[f"dtype_{k}"] = _raw(a)
        res = self._ask(req, self.timeout + timeout)  # (a run may wait at a call that long)
        leaves = sorted({int(k.split("_")[1]) for k in res.files if k.startswith("out_")})
        per = [[_typed(res[f"out_{j}_{d}"], str(res[f"dtype_{j}"])) for j in leaves]
               for d in range(len(per_device))]
        return per, [float(t) for t in res["times"]]

    def _ask(self, request: dict, wait: float | None = None):
        """The worker's reply to `request`, waited for `wait` seconds at most (the
        worker's `timeout` unless given)."""
        from ..xla.jaxlib_names import XlaError
        wait = self.timeout if wait is None else wait
        with self.lock:  # one request at a time: replies come back in order
            try:
                self.proc.stdin.write(_pack(request))
                self.proc.stdin.flush()
                res = _unpack(self.proc.stdout.fileno(), time.monotonic() + wait)
            except TimeoutError:
                self.close()
                raise XlaError(f"--engine xla: XLA:CPU on {self.n} host devices gave no "
                               f"answer in {wait:g} s; its process was stopped") from None
            except (BrokenPipeError, OSError):
                res = None
            if res is None:  # the worker died: its last line says why
                self.close()
                self.stderr.seek(0)
                lines = [ln for ln in self.stderr.read().decode(errors="replace").splitlines()
                         if ln.strip()]
                raise XlaError(f"--engine xla: XLA:CPU on {self.n} host devices failed: "
                               f"{(lines or ['its process ended'])[-1]}")
        if "error" in res:
            raise XlaError(str(res["error"]))
        return res

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        """End the worker (its stdin closed; killed if it does not go)."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


if __name__ == "__main__":
    main()
