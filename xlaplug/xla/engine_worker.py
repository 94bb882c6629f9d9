"""`--engine xla` on D host devices in a subprocess: jax fixes its host device count when its
CPU backend starts, so where this process's jax has fewer devices than the module runs on,
a fresh process with `--xla_force_host_platform_device_count=D` runs it
(runtime/engine_devices.py decides; devices.py is `--reference xla`'s counterpart).

    python -m xlaplug.xla.engine_worker CASE.npz OUT.npz

CASE.npz: `text` (the module lowered for the engine: HLO text whose plugin ops are typed-FFI
calls), `grid` ([R, P]), `global` ([devices, shardy], a global program; absent for a
per-device one), `ops` and `sources` (JSON: the ops to serve, and the plugin sources --
files, package directories, `entry point NAME` -- that define their kernels), `repeat`,
`nargs`, `arg_k_d` and `dtype_k` (argument k of device d; one device, d = 0, for a global
program).  OUT.npz: `out_j_d` and `dtype_j`, `times` (each run's seconds), `made_s`
(plugins loaded, kernels registered, XLA's compile), or `error` (one line).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from .devices import _raw, _typed


def serve(ops: list[str], sources: list[str]) -> None:
    """Register the kernels of `ops` (from the plugins of `sources`) as FFI targets here."""
    from ..plugin.loader import load_sources
    from .engine import EngineError
    from .ffi import NOT_SERVED, register_op
    registry = load_sources(sources)
    for op in ops:
        entry = registry.kernel_for(op, "cpu")
        if entry is None:
            raise EngineError(f"'{op}': no kernel for cpu in the plugins loaded from "
                              f"{', '.join(sources)}")
        s = register_op(op, entry, shape_rule=registry.shapes.get(op))
        if s.how == NOT_SERVED:
            raise EngineError(f"'{op}' cannot be served inside XLA: {s.reason}")


def run_case(case) -> dict:
    """OUT.npz's entries for one case (module docstring)."""
    from ..hlo.text.parser import parse_module
    from .jaxlib_names import (compile_global_on_xla, compile_on_xla_cpu, run_compiled,
                               run_global_compiled)
    t0 = time.perf_counter()
    text = str(case["text"])
    serve(json.loads(str(case["ops"])), json.loads(str(case["sources"])))
    r, p = (int(v) for v in case["grid"])
    whole = "global" in case
    nargs, repeat = int(case["nargs"]), int(case["repeat"])
    args = [[_typed(case[f"arg_{k}_{d}"], str(case[f"dtype_{k}"])) for k in range(nargs)]
            for d in range(1 if whole else r * p)]
    times: list[float] = []
    if whole:
        n, shardy = (int(v) for v in case["global"])
        compiled = compile_global_on_xla(text, n, bool(shardy), what="--engine xla")
        made_s = time.perf_counter() - t0
        root = parse_module(text, "<xla engine>").entry.root.shape
        shapes = [tuple(s.dims) for s in (root.tuple_shapes if root.is_tuple else (root,))]
        per = [run_global_compiled(compiled, args[0], shapes, what="--engine xla",
                                   repeat=repeat, times=times)]
    else:
        compiled = compile_on_xla_cpu(text, r, p, what="--engine xla")
        made_s = time.perf_counter() - t0
        per = run_compiled(compiled, args, repeat=repeat, times=times)
    out = {"times": np.array(times), "made_s": np.array(made_s)}
    for d, leaves in enumerate(per):
        for j, v in enumerate(leaves):
            out[f"out_{j}_{d}"], out[f"dtype_{j}"] = _raw(v)
    return out


def main(case_path: str, out_path: str) -> None:
    from ..hlo.errors import HloError, one_line
    case = np.load(case_path, allow_pickle=False)
    try:
        out = run_case(case)
    except HloError as e:
        out = {"error": np.array(one_line(e.message))}
    except Exception as e:  # noqa: BLE001 - reported to the parent as its one line
        out = {"error": np.array(one_line(f"{type(e).__name__}: {e}"))}
    np.savez(out_path, **out)


def run_in_subprocess(text: str, replicas: int, partitions: int,
                      per_device: list[list[np.ndarray]], ops: list[str], sources: list[str],
                      repeat: int = 1, global_program: tuple[int, bool] | None = None,
                      timeout: float = 600) -> tuple[list[list[np.ndarray]], list, float]:
    """([device][leaf] outputs of the last run, each run's seconds, the subprocess's seconds
    outside its runs: its start, jax's, the plugins', the registrations and XLA's compile).
    The worker's failure is an XlaError with its line."""
    from .jaxlib_names import XlaError
    n = global_program[0] if global_program else replicas * partitions
    case = {"text": np.array(text), "grid": np.array([replicas, partitions]),
            "ops": np.array(json.dumps(ops)), "sources": np.array(json.dumps(sources)),
            "repeat": np.array(repeat), "nargs": np.array(len(per_device[0]))}
    if global_program:
        case["global"] = np.array([global_program[0], int(global_program[1])])
    for d, args in enumerate(per_device):
        for k, a in enumerate(args):
            case[f"arg_{k}_{d}"], case[f"dtype_{k}"] = _raw(a)
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                        f" --xla_force_host_platform_device_count={n}").strip()
    env["JAX_PLATFORMS"] = "cpu"
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="xlaplug-engine-") as tmp:
        case_path, out_path = os.path.join(tmp, "case.npz"), os.path.join(tmp, "out.npz")
        np.savez(case_path, **case)
        proc = subprocess.run([sys.executable, "-m", "xlaplug.xla.engine_worker", case_path,
                               out_path], env=env, capture_output=True, text=True,
                              timeout=timeout)
        if proc.returncode != 0 or not os.path.exists(out_path):
            tail = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:] or ["no message"]
            raise XlaError(f"--engine xla: XLA:CPU on {n} host devices failed: {tail[0]}")
        res = np.load(out_path, allow_pickle=False)
        if "error" in res:
            raise XlaError(str(res["error"]))
        leaves = sorted({int(k.split("_")[1]) for k in res.files if k.startswith("out_")})
        per = [[_typed(res[f"out_{j}_{d}"], str(res[f"dtype_{j}"])) for j in leaves]
               for d in range(1 if global_program else n)]
        times = [float(t) for t in res["times"]]
    return per, times, time.perf_counter() - t0 - sum(times)


if __name__ == "__main__":
    main(*sys.argv[1:3])
