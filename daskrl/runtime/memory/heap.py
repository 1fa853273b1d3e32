"""How a learner process keeps the memory it frees: large blocks come from, and go back to, the process's heap.

Why: glibc's malloc maps every block above its mmap threshold (at most 32 MB) afresh and unmaps it when freed, and
returns the top of the heap to the system above 128 KB free. An image learner allocates the same large tensors every
step (a 1,024-frame batch as bfloat16 is 57 MB for Doom, a convolution's activations tens of MB), so each step
faulted all of them in again, page by page. Measured on Doom frames (bfloat16 Nature CNN, one thread, 24 steps):
2,575 -> 2,956 samples/s, at a steady resident size of 502 MB against 410 (the step's peak, kept between steps; it
did not grow). It is no guarantee of reuse: a loop that allocates one 64-byte-aligned 64 MB tensor after another can
be placed anew each time by glibc's alignment padding; the learner's mix of sizes measured steady. A small MLP's
learner allocates nothing that large: nothing changes for it. Other C libraries (musl, macOS) have no such knobs,
and nothing is changed there.
"""

from __future__ import annotations

import ctypes
import ctypes.util

#: glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: blocks up to this size come from the heap (a few steps' largest tensors), and this much free heap is kept
MMAP_THRESHOLD = 512 << 20
TRIM_THRESHOLD = 1 << 30

_done = False


def keep_freed_memory() -> bool:
    """Make this process's malloc keep large freed blocks for the next step (once per process); False where the C
    library has no ``mallopt`` or refuses the settings."""
    global _done
    if _done:
        return True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    _done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _done
