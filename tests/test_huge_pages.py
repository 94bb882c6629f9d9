"""xla/ffi/huge_pages.py: XLA's big buffers get the huge pages numpy gives its own (the MPI
handler's all-reduce through them was 1.3-1.5x mpi4py's at 16 MiB on 4 KiB pages)."""
import ctypes

import numpy as np

from xlaplug.xla.ffi import huge_pages


def _huge_kib(start: int, end: int) -> int:
    """AnonHugePages of the mappings overlapping [start, end), from /proc/self/smaps."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and all(c in "0123456789abcdef-" for c in head):
                lo, hi = (int(v, 16) for v in head.split("-"))
                inside = lo < end and hi > start
            elif inside and line.startswith("AnonHugePages:"):
                total += int(line.split()[1])
    return total


def test_a_big_malloced_buffer_is_collapsed_into_huge_pages_with_its_bytes_kept():
    n = 16 << 20
    buf = ctypes.create_string_buffer(n)  # malloc's memory, as XLA's buffers
    addr = ctypes.addressof(buf)
    view = np.frombuffer(buf, np.uint8)
    view[:] = np.arange(n, dtype=np.uint64).astype(np.uint8)  # every page touched
    want = view.copy()
    collapsed = huge_pages.advise(addr, n)
    np.testing.assert_array_equal(view, want)
    if collapsed:  # (a kernel before 6.1, or huge pages off: the call changes nothing)
        assert _huge_kib(addr, addr + n) >= 2048 * 6  # 7 whole 2 MiB pages inside, at least 6


def test_small_buffers_are_left_alone():
    buf = ctypes.create_string_buffer((4 << 20) - 1)
    assert huge_pages.advise(ctypes.addressof(buf), len(buf)) is False
