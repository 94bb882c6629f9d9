"""Transparent huge pages for the large XLA buffers a collective reads and writes.

An all-reduce through `--engine xla` over MPI reads XLA's operand and writes XLA's result
buffer, which XLA:CPU takes from malloc; raw mpi4py reads and writes numpy arrays, and numpy
asks the kernel for huge pages on every allocation of 4 MiB or more
(`madvise(MADV_HUGEPAGE)`, effective where transparent huge pages are in "madvise" mode, as
here).  MPICH moves a 16 MiB buffer over 4 KiB pages ~1.4x slower than over 2 MiB ones
(3.0 vs 4.4 ms, 2 ranks, mpi4py alone, numpy's advice on and off; 2026-12-06, load 0.3),
which was the engine's whole gap to mpi4py at that size.  So the MPI handler gives XLA's
buffers numpy's treatment the first time it sees one (mpi_frames.Site: XLA hands the same
few buffers back call after call, malloc keeping them: backends/device.keep_freed_buffers): the
buffer's whole 2 MiB pages are advised and collapsed into huge pages now (MADV_COLLAPSE,
Linux 6.1+; a copy of the buffer, once), since pages already touched are not collapsed on
advice alone.  Where the kernel refuses either, nothing changes but the speed.
"""
from __future__ import annotations

import ctypes

MADV_HUGEPAGE = 14
MADV_COLLAPSE = 25
HUGE_PAGE = 2 << 20
FROM_BYTES = 4 << 20  # numpy's threshold for the same advice

_libc = ctypes.CDLL(None, use_errno=True)
_libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)


def advise(addr: int, nbytes: int) -> bool:
    """Huge pages for the whole 2 MiB pages inside [addr, addr + nbytes), for buffers of
    FROM_BYTES or more; whether the kernel collapsed them."""
    if nbytes < FROM_BYTES:
        return False
    start = -(-addr // HUGE_PAGE) * HUGE_PAGE
    end = (addr + nbytes) // HUGE_PAGE * HUGE_PAGE
    if end <= start:
        return False
    _libc.madvise(start, end - start, MADV_HUGEPAGE)
    return _libc.madvise(start, end - start, MADV_COLLAPSE) == 0
