"""backends/device.keep_freed_buffers: a CPU context fixes glibc's malloc thresholds for its
process, so a run's freed arrays are kept for the next run instead of going back to the
kernel.  Seen from outside: after a CPU context is made, a 4 MiB array lies in the process's
[heap] (brk's area) where glibc's own 128 KiB starting threshold would map it afresh; and a malloc
tunable in the environment leaves glibc's thresholds alone."""
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and platform.machine().lower() in ("x86_64", "amd64")
         and platform.libc_ver()[0] == "glibc"),
    reason="glibc's malloc thresholds: x86-64 Linux with glibc only")

_PROBE = """
import sys, numpy as np
if sys.argv[1] == "context":
    from xlaplug.backends.backend import CpuBackend
    CpuBackend().memory()
a = np.ones(1 << 20, np.float32)
at = a.ctypes.data
with open("/proc/self/maps") as f:
    heap = [tuple(int(v, 16) for v in line.split()[0].split("-"))
            for line in f if line.rstrip().endswith("[heap]")]
print("heap" if any(lo <= at < hi for lo, hi in heap) else "mapped")
"""


def _where(mode: str, **env) -> str:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=120, check=True)
    return out.stdout.strip()


def test_a_cpu_context_keeps_large_arrays_on_the_heap():
    assert _where("none") == "mapped"  # glibc's own threshold: a fresh mapping
    assert _where("context") == "heap"


def test_a_malloc_tunable_in_the_environment_is_left_alone():
    assert _where("context", GLIBC_TUNABLES="glibc.malloc.check=0") == "mapped"
