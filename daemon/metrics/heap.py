"""glibc heap tuning for the scrape's one large bytes object."""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
import threading

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
_heap_threshold = [0]  # what keep_on_heap set last
_heap_lock = threading.Lock()


def keep_on_heap(nbytes: int) -> bool:
    """Let glibc's malloc serve blocks of `nbytes` (an exposition's size) from its heap and keep them there.

    A scrape builds one bytes object of the whole exposition (41 MB with 1,000 ClusterQueues and their LocalQueues);
    glibc maps a block above its mmap threshold (at most 32 MB) afresh each time and unmaps it when freed, so every
    scrape paid a page fault per 4 KiB of it: 33-38 ms of the 41 MB join against 8 ms from the heap (measured, see
    bench/RESULTS.md). Raising the threshold above the exposition's size, and the trim threshold with it, makes the
    next scrape reuse the previous one's memory; the cost is that much more resident memory. A no-op (False) where
    the C library is not glibc."""
    want = 2 * nbytes
    if want <= max(_heap_threshold[0], 32 * 2**20):
        return True
    with _heap_lock:
        if platform.libc_ver()[0] != "glibc":
            return False
        name = ctypes.util.find_library("c")
        if name is None:
            return False
        libc = ctypes.CDLL(name)
        if libc.mallopt(_M_MMAP_THRESHOLD, want) != 1 or libc.mallopt(_M_TRIM_THRESHOLD, 2 * want) != 1:
            return False
        _heap_threshold[0] = want
        return True
