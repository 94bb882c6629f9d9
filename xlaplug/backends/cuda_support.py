"""Whether CUDA can be used here: a GPU with numba.cuda, or numba's simulator."""
from __future__ import annotations

import os

from ..hlo.errors import HloError


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


def require_cuda(backend: bool = True) -> None:
    """CUDA must be usable; with `backend`, the core-opcode CUDA backend too."""
    ok, why = cuda_status()
    if not ok:
        raise HloError(f"error: --device cuda is not available: {why} (set NUMBA_ENABLE_CUDASIM=1 "
                       "to use numba's simulator)")
    if backend:
        raise HloError("error: --device cuda: core opcodes have no CUDA kernels yet (only plugin "
                       "kernels do: see `xlaplug check-plugins --device cuda`); use --device cpu")
