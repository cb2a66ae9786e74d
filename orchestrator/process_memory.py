"""The C allocator of a process that trains or evaluates with torch on the CPU: freed memory kept for reuse.

glibc's malloc serves a block above its mmap threshold with a fresh mapping and unmaps it when freed, and gives
the top of its heap back to the system once more than its trim threshold is free there. A training step or an
evaluation batch of a convolutional model frees and asks again for activations of megabytes every time, so each
comes back as new pages the kernel must fault in and zero: on acar_cnn's rounds that was about a sixth of the CPU
time (benchmarks/README.md, "Where the model is the cost"). With a mmap threshold of 32 MiB (glibc's largest
dynamic one) and a trim threshold of 256 MiB the blocks are reused instead. Mooring's client actors and
coordinator set it at start-up, and so do the benchmarks' reference loops, so that their ratios measure what
Mooring does, not the allocator. A setting the user gives through glibc's environment variables
(MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_) is left as it is."""
from __future__ import annotations

import ctypes
import os
import platform

MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
TRIM_THRESHOLD_BYTES = 256 * 1024 * 1024
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (glibc's malloc.h)
_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def keep_freed_memory() -> bool:
    """This process's malloc set to reuse freed blocks (see the module's doc); whether it was set: not where the C
    library is not glibc (macOS, musl) or where the user set the thresholds in the environment."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    if any(name in os.environ for name in _USER_SETTINGS):
        return False
    libc = ctypes.CDLL(None)
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
                and libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
