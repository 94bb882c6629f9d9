"""Whether CUDA can be used here: a GPU with numba.cuda, or numba's simulator."""
from __future__ import annotations

import os

from ..hlo.errors import UsageError


def cuda_status() -> tuple[bool, str]:
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return True, "numba CUDA simulator (NUMBA_ENABLE_CUDASIM=1)"
    try:
        from numba import cuda
        if cuda.is_available():
            return True, str(cuda.get_current_device().name)
        return False, "numba.cuda finds no CUDA driver or GPU"
    except Exception as e:  # numba.cuda import problems are environment errors
        return False, f"numba.cuda is unusable: {e}"


def require_cuda() -> None:
    """--device cuda needs a GPU with numba.cuda, or numba's simulator."""
    ok, why = cuda_status()
    if not ok:
        raise UsageError(f"--device cuda is not available: {why} (set NUMBA_ENABLE_CUDASIM=1 "
                       "to use numba's simulator)")
