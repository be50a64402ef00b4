"""Keep memory the process frees for its next use instead of giving it back to the OS after every step.

glibc's ``malloc`` serves blocks of 128 KiB and more with ``mmap`` and, once more than a threshold is free at the
top of its heap, returns that top to the OS; it moves both thresholds as it goes. A PPO update allocates and
frees megabytes of activations and gradients every minibatch, so glibc keeps handing those pages back and the
next minibatch faults them in again: the kernel zeroes and maps the same memory over and over, inside every
update. Fixed thresholds (``mallopt``) keep blocks up to 32 MiB in the heap and up to 256 MiB of free heap in the
process, as PyTorch's CUDA caching allocator does on GPUs, so each minibatch reuses the pages the previous one
freed. The resident memory stays at its peak (the largest step's working set) instead of falling between steps.

Other C libraries (macOS, musl) manage memory their own way; there this does nothing.
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["keep_freed_memory"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 32 << 20  # glibc's largest allowed value on 64-bit systems
_TRIM_THRESHOLD = 256 << 20


def keep_freed_memory() -> bool:
    """Fix glibc's ``mmap`` and trim thresholds for this process; True if they were set (glibc on Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
