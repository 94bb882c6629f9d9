"""XLA:CPU as the oracle for multi-device HLO, on 8 host devices, in a subprocess (the host
device count is fixed when jax starts): the bridge's worker, `xlaplug/xla/devices.py`.

    python tests/xla_devices.py CASES.npz OUT.npz
    python tests/xla_devices.py --serve    # `CASES OUT` lines on stdin, `done` after each

CASES.npz holds `n` and, per case i, `text_i` (HLO text with replica_count= /
num_partitions= in its header), `grid_i` ([R, P]), `nargs_i`, `arg_i_k_d` (argument k of
device d) and `dtype_i_k`; OUT.npz gets `out_i_j_d` (output leaf j of device d) and
`dtype_i_j`, or `error_i` (XLA's message).  ml_dtypes arrays travel as their bits.
Device d is replica d // P, partition d % P, as XLA's default device assignment.
"""
from __future__ import annotations

import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"

from xlaplug.xla.devices import _raw, _typed, main, run_case  # noqa: E402,F401

def serve() -> None:
    """`--serve`: one `CASES OUT` pair a line from stdin, answered `done` once OUT is
    written -- one jax start for a module's many references (tests/xla_oracle.py)."""
    for line in sys.stdin:
        cases, out = line.split()
        main(cases, out)
        print("done", flush=True)


if __name__ == "__main__":
    serve() if sys.argv[1:] == ["--serve"] else main(*sys.argv[1:3])
