"""XLA:CPU on D host devices, in a subprocess: jax fixes its host device count when it starts
(`XLA_FLAGS=--xla_force_host_platform_device_count=D`), so a run on many devices cannot share
a process with a jax already started on one.

    python -m xlaplug.xla.devices CASES.npz OUT.npz

CASES.npz holds `n` and, per case i, `text_i` (HLO text), `grid_i` ([R, P]), `nargs_i`,
`arg_i_k_d` (argument k of device d) and `dtype_i_k`; OUT.npz gets `out_i_j_d` (output leaf
j of device d) and `dtype_i_j`, or `error_i` (XLA's message).  ml_dtypes arrays travel as
their bits.  A case with `global_i` ([devices, shardy]) is a global program
(global_shards.py): one set of global arguments (d = 0) in, the global outputs out (d = 0).
tests/xla_devices.py is the same worker on 8 devices.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import numpy as np


def _raw(a: np.ndarray):
    """npz keeps no ml_dtypes types: an array as (plain bits, its dtype's name)."""
    a = np.asarray(a)
    if a.dtype.kind == "V" or a.dtype.type.__module__.startswith("ml_dtypes"):
        return a.view(f"u{a.dtype.itemsize}"), np.array(a.dtype.name)
    return a, np.array(a.dtype.name)


def _typed(bits: np.ndarray, name: str) -> np.ndarray:
    import ml_dtypes
    dt = np.dtype(getattr(ml_dtypes, name)) if hasattr(ml_dtypes, name) else np.dtype(name)
    return bits.view(dt) if bits.dtype != dt else bits


def run_case(text: str, replicas: int, partitions: int, args: list[list[np.ndarray]]):
    """[leaf][device] outputs of one case (the layout the tests read)."""
    from .xla_executables import run_on_xla_cpu
    per = run_on_xla_cpu(text, args, replicas, partitions)
    return [[per[d][j] for d in range(len(per))] for j in range(len(per[0]) if per else 0)]


def run_global_case(text: str, devices: int, shardy: bool, args: list[np.ndarray]):
    """[leaf][0]: the global outputs of a global program on `devices` partitions."""
    from ..hlo.text.parser import parse_module
    from .xla_executables import run_global_on_xla
    root = parse_module(text, "<reference>").entry.root.shape
    shapes = [tuple(s.dims) for s in (root.tuple_shapes if root.is_tuple else (root,))]
    return [[v] for v in run_global_on_xla(text, args, shapes, devices, shardy)]


def main(cases_path: str, out_path: str) -> None:
    from ..hlo.errors import HloError
    cases = np.load(cases_path, allow_pickle=False)
    out = {}
    for i in range(int(cases["n"])):
        r, p = (int(v) for v in cases[f"grid_{i}"])
        nargs = int(cases[f"nargs_{i}"])
        whole = f"global_{i}" in cases
        args = [[_typed(cases[f"arg_{i}_{k}_{d}"], str(cases[f"dtype_{i}_{k}"]))
                 for k in range(nargs)] for d in range(1 if whole else r * p)]
        try:
            if whole:
                n, shardy = (int(v) for v in cases[f"global_{i}"])
                leaves = run_global_case(str(cases[f"text_{i}"]), n, bool(shardy), args[0])
            else:
                leaves = run_case(str(cases[f"text_{i}"]), r, p, args)
            for j, leaf in enumerate(leaves):
                for d, v in enumerate(leaf):
                    out[f"out_{i}_{j}_{d}"], out[f"dtype_{i}_{j}"] = _raw(v)
        except HloError as e:
            out[f"error_{i}"] = np.array(e.message)
        except Exception as e:  # noqa: BLE001 - the message is the oracle's answer
            out[f"error_{i}"] = np.array(str(e).splitlines()[0] if str(e) else repr(e))
    np.savez(out_path, **out)


def run_in_subprocess(text: str, replicas: int, partitions: int,
                      per_device: list[list[np.ndarray]], timeout: float = 600,
                      xla_flags: str = "",
                      global_program: tuple[int, bool] | None = None
                      ) -> list[list[np.ndarray]]:
    """[device][leaf] outputs of XLA:CPU on replicas x partitions host devices, run in a
    fresh process; XLA's refusal is an XlaError with its message.  `xla_flags`: more
    XLA_FLAGS for that process (XLA reads them once, when jax starts).  `global_program`
    (devices, shardy): the text is one program for that many devices, `per_device` its one
    set of global arguments, and the result its global outputs ([[leaf...]])."""
    from .jaxlib_names import XlaError, require_jax
    require_jax("--reference xla")
    n = global_program[0] if global_program else replicas * partitions
    case = {"n": np.array(1), "text_0": np.array(text), "grid_0": np.array([replicas, partitions]),
            "nargs_0": np.array(len(per_device[0]) if per_device else 0)}
    if global_program:
        case["global_0"] = np.array([global_program[0], int(global_program[1])])
    for d, args in enumerate(per_device):
        for k, a in enumerate(args):
            case[f"arg_0_{k}_{d}"], case[f"dtype_0_{k}"] = _raw(a)
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                        f" --xla_force_host_platform_device_count={n} {xla_flags}").strip()
    env["JAX_PLATFORMS"] = "cpu"
    with tempfile.TemporaryDirectory(prefix="xlaplug-xla-") as tmp:
        cases, out = os.path.join(tmp, "cases.npz"), os.path.join(tmp, "out.npz")
        np.savez(cases, **case)
        proc = subprocess.run([sys.executable, "-m", "xlaplug.xla.devices", cases, out],
                              env=env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0 or not os.path.exists(out):
            tail = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:] or ["no message"]
            raise XlaError(f"XLA:CPU on {n} host devices failed: {tail[0]}")
        res = np.load(out, allow_pickle=False)
        if "error_0" in res:
            raise XlaError(str(res["error_0"]))
        leaves = sorted({int(k.split("_")[2]) for k in res.files if k.startswith("out_0_")})
        return [[_typed(res[f"out_0_{j}_{d}"], str(res[f"dtype_0_{j}"])) for j in leaves]
                for d in range(1 if global_program else n)]


if __name__ == "__main__":
    main(*sys.argv[1:3])
