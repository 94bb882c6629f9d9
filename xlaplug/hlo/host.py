"""Facts about the machine xlaplug runs on, asked of the operating system when needed."""
from __future__ import annotations

import os


def available_memory() -> int:
    """Physical memory not in use now, in bytes (1 << 62 where the system does not say): the
    default limit of a run's buffers and the most a parsed constant may hold."""
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62
