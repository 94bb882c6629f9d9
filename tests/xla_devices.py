"""XLA:CPU as the oracle for multi-device HLO, on 8 host devices, in a subprocess (the host
device count is fixed when jax starts): the bridge's worker, `xlaplug/xla/devices.py`.

    python tests/xla_devices.py CASES.npz OUT.npz

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

if __name__ == "__main__":
    main(*sys.argv[1:3])
