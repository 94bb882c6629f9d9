"""XLA:CPU's outputs for multi-device HLO from one kept process (tests/xla_devices.py
--serve, jax on 8 host devices): what xlaplug.xla.reference gives a test through a fresh
process a call (~1.1 s of CPU, most of it jax starting), for a test module's many calls.
A module fixture makes one (`XlaOracle(tmp_dir)`) and closes it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from xlaplug.xla.devices import _raw, _typed


class XlaOracle:
    def __init__(self, directory: Path):
        self.dir, self.proc, self.calls = directory, None, 0

    def run(self, text: str, per_device: list[list[np.ndarray]], replicas: int,
            partitions: int = 1) -> list[list[np.ndarray]]:
        """[device][leaf] outputs of XLA:CPU running `text` (given as XLA gets it: portable,
        plugin ops decomposed) on replicas x partitions devices; XLA's refusal fails."""
        case = {"n": np.array(1), "text_0": np.array(text),
                "grid_0": np.array([replicas, partitions]),
                "nargs_0": np.array(len(per_device[0]))}
        for d, args in enumerate(per_device):
            for k, a in enumerate(args):
                case[f"arg_0_{k}_{d}"], case[f"dtype_0_{k}"] = _raw(a)
        self.calls += 1
        cases, out = self.dir / f"cases{self.calls}.npz", self.dir / f"out{self.calls}.npz"
        np.savez(cases, **case)
        if self.proc is None:
            env = dict(os.environ, JAX_PLATFORMS="cpu")
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("xla_devices.py")), "--serve"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.proc.stdin.write(f"{cases} {out}\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        assert answer == "done\n", f"the XLA process ended ({self.proc.poll()}): {answer!r}"
        res = np.load(out, allow_pickle=False)
        assert "error_0" not in res, str(res["error_0"])
        leaves = sorted({int(k.split("_")[2]) for k in res.files if k.startswith("out_0_")})
        return [[_typed(res[f"out_0_{j}_{d}"], str(res[f"dtype_0_{j}"])) for j in leaves]
                for d in range(replicas * partitions)]

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
